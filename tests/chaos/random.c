/* The chaos suite's random mode (cases.h): one long job on RANDOM_NODES
 * emulated nodes, faults from the table at the times of a seeded Poisson
 * process, a report of each fault and its recovery, and at the end the
 * steps lost and the ETTR (kept steps' time over wall time). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chaos/cases.h"

#define RANDOM_NODES 4
#define RANDOM_NPROC 2
/* A fault the job has not recovered from by then is a failure. Recovery
 * is a reshape (< 0.5 s) or a lease's lapse (4 s) and a reshape: under
 * 10 s on loaded cores, so 120 s is > 10x. */
#define RECOVER_BOUND_S 120.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Uniform in [0, 1) from the seeded state. */
static double uniform(unsigned *seed) { return rand_r(seed) / ((double)RAND_MAX + 1); }

/* The highest step any rank finished. */
static int job_step(const chaos_job *j) {
  int best = -1;
  for (int r = 0; r < j->cfg.nodes * j->cfg.nproc; r++) {
    int s = chaos_rank_last_step(j, r);
    if (s > best) best = s;
  }
  return best;
}

/* Waits until the job finished two steps past `from`; seconds it took, or
 * -1 past the bound. */
static double wait_progress(chaos_job *j, int from, double t0) {
  if (chaos_job_wait_step(j, from + 2, RECOVER_BOUND_S) < 0) return -1;
  return now_s() - t0;
}

typedef enum { F_KILL_WORKER, F_KILL_AGENT, F_STOP_WORKER, F_PARTITION, F_KINDS } fault_kind;
static const char *const fault_names[F_KINDS] = {"kill-worker", "kill-agent", "sigstop", "partition"};

/* Plays one fault; returns the recovery time in seconds (-1: none seen). */
static double play(chaos_job *j, chaos_env *env, fault_kind k, unsigned *seed, char *what, size_t n) {
  int world = j->cfg.nodes * j->cfg.nproc, step = job_step(j);
  double t0 = now_s(), rec = -1;
  switch (k) {
    case F_KILL_WORKER:
    case F_STOP_WORKER: {
      pid_t pid = -1;
      int rank = -1;
      for (int tries = 0; tries < 4 * world && pid <= 0; tries++)
        pid = chaos_worker_pid(j, rank = rand_r(seed) % world);
      if (pid <= 0) {
        snprintf(what, n, "no worker to %s", fault_names[k]);
        return -1;
      }
      kill(pid, k == F_KILL_WORKER ? SIGKILL : SIGSTOP);
      snprintf(what, n, "%s rank %d (pid %d) at step %d", k == F_KILL_WORKER ? "SIGKILL" : "SIGSTOP for 30 s", rank,
               (int)pid, step);
      rec = wait_progress(j, step, t0);
      if (k == F_STOP_WORKER) {
        while (now_s() - t0 < 30) usleep(100000);
        kill(pid, SIGCONT);
      }
      break;
    }
    case F_KILL_AGENT: {
      int node = 1 + rand_r(seed) % (j->cfg.nodes - 1); /* not node 0, whose output the report reads last */
      kill(j->agent[node], SIGKILL);
      chaos_job_wait_node(j, node, 10);
      snprintf(what, n, "SIGKILL node %d's agent at step %d; a new agent on it 10 s later", node, step);
      rec = wait_progress(j, step, t0);
      while (now_s() - t0 < 10) usleep(100000);
      chaos_job_start_node(j, node); /* the node is replaced: it rejoins */
      break;
    }
    case F_PARTITION: {
      int node = 1 + rand_r(seed) % (j->cfg.nodes - 1);
      chaos_sh("ip link set %s down", env->net.veth[node]);
      snprintf(what, n, "node %d cut off for 20 s at step %d", node, step);
      rec = wait_progress(j, step, t0);
      while (now_s() - t0 < 20) usleep(100000);
      chaos_sh("ip link set %s up", env->net.veth[node]);
      break;
    }
    default: break;
  }
  return rec;
}

int chaos_random(chaos_env *env, unsigned seed, double minutes, double per_minute, chaos_result *r) {
  char flags[320];
  /* No line a step: through the agents' pipes it would be a cost of the
   * test, not of training. */
  snprintf(flags, sizeof flags, "--ckpt-dir %s/random-ckpt --ckpt-every 50 --print-every 0", env->dir);
  chaos_job_cfg c = {.name = "random",
                     .nodes = RANDOM_NODES,
                     .nproc = RANDOM_NPROC,
                     .steps = 100000000,
                     .gpt_flags = flags,
                     .global_batch = 16,
                     .agent_flags = "--hang-timeout 10 --max-restarts 100"};
  chaos_job j;
  *r = (chaos_result){.recover_ms = -1};
  if (chaos_job_start(&j, env, &c) != 0) {
    snprintf(r->why, sizeof r->why, "cannot start the job");
    return -1;
  }
  double end = j.t0 + minutes * 60, next = j.t0;
  int faults = 0, recovered = 0;
  printf("chaos random: seed %u, %.1f minutes, %.2f faults a minute, %d nodes x %d workers\n", seed, minutes,
         per_minute, RANDOM_NODES, RANDOM_NPROC);
  for (;;) {
    /* Poisson arrivals: exponential gaps of mean 1/rate. */
    next += -log(1 - uniform(&seed)) * 60.0 / per_minute;
    if (next >= end) break;
    while (now_s() < next) usleep(100000);
    fault_kind k = (fault_kind)(rand_r(&seed) % F_KINDS);
    char what[200];
    double rec = play(&j, env, k, &seed, what, sizeof what);
    faults++;
    recovered += rec >= 0;
    if (rec * 1e3 > r->recover_ms) r->recover_ms = rec * 1e3;
    printf("  %7.1f s  %-11s %s: %s\n", next - j.t0, fault_names[k], what,
           rec >= 0 ? "recovered" : "NOT recovered within the bound");
    if (rec >= 0) printf("             the job went on %.1f s after the fault\n", rec);
    fflush(stdout);
    if (now_s() > next) next = now_s(); /* a long fault pushes the next one back */
  }
  while (now_s() < end) usleep(100000);
  /* The user stops the job: the agents stop their workers. The job's
   * time ends with the request: the steps cut short by the stop are left
   * out of the ledger, and the wind-down out of the wall time. */
  int last = job_step(&j);
  double wall = now_s() - j.t0;
  for (int i = 0; i < c.nodes; i++)
    if (j.code[i] == -2) kill(j.agent[i], SIGTERM);
  chaos_job_wait(&j, 60);     /* the agents stop their workers (--stop-grace 3 s at most) and end: 60 s is > 10x */
  j.ledger_to = last + 1 - 2; /* the last steps may have been cut short by the stop */
  char why[1024];
  int lost = 0;
  bool ledger = chaos_ledger(&j, &lost, why, sizeof why) == 0;
  r->kept_s = chaos_kept_seconds(&j);
  r->job_s = wall;
  r->steps_lost = lost;
  r->faults = faults;
  r->recovered = recovered;
  int procs = 0;
  /* what is left of an ended job goes in ms: 10 s is > 100x */
  for (double t = now_s() + 10; (procs = chaos_job_processes(&j)) > 0 && now_s() < t;) usleep(50000);
  snprintf(r->summary, sizeof r->summary,
           "%d fault(s), %d recovered; %d steps kept in %.0f s, %d step run(s) lost; ETTR %.3f; ledger %s; %d "
           "process(es) left",
           faults, recovered, j.ledger_to, wall, lost, r->kept_s / wall, ledger ? "whole" : "BROKEN", procs);
  r->passed = recovered == faults && ledger && procs == 0;
  if (!r->passed)
    snprintf(r->why, sizeof r->why, "%s\n%s\n--- job output (tail):\n%s", r->summary, ledger ? "" : why,
             j.out && strlen(j.out) > 3000 ? j.out + strlen(j.out) - 3000 : (j.out ? j.out : ""));
  chaos_job_free(&j);
  return faults;
}
