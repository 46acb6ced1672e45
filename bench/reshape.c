/* bench/reshape: the time from a worker's death to the next completed step.
 *
 *   bench_reshape [--runs N] [--seed S]
 *
 * examples/gpt on four ranks (giantrun --standalone, dp=4 with ZeRO-1, one
 * thread each, a checkpoint every 10 steps). Each of N runs (default 5)
 * SIGKILLs worker 1 at a random moment: once rank 0's metrics show a step
 * drawn from [KILL_MIN, KILL_MAX] done, after a further random delay of up
 * to one step, so the kill lands anywhere in a step, on a checkpoint's
 * step or between two copies of the ZeRO-1 shards alike. With
 * giantrun --reshape the three left reshape in-process, the lost shard
 * from its copy on a peer (gpt's default --mirror-every: as often as 2% of
 * a step allows) or, when that copy is older than the step, by rolling
 * back in-process to the newest checkpoint. One more run, the baseline,
 * does a full restart instead (--max-restarts 1): every worker stopped, a
 * new generation, a load of the newest committed checkpoint.
 *
 * The clock stops at the first step rank 0 completes after the recovered
 * job announced itself (the reshape's line, or the new generation's resume
 * line), so that a step the old layout finished just after the kill does
 * not count. steps_lost: the steps completed before the kill that were
 * done again after it (at most 1 with a fresh copy, at most --ckpt-every
 * after a roll-back). A job that ends before it recovers fails the bench
 * at once. redundancy_overhead: the copies' share of the step time, as the
 * example measured it over its first steps, divided by the steps between
 * copies it chose.
 *
 * The full restart's time includes giantrun's back-off before it starts
 * the workers again, random in [0.5, 1) s for a first restart so that a
 * crash loop does not spin; giantrun logs the wait it took
 * ("back-off waited"), and vs_restart_no_backoff leaves it out.
 * Last line: reshape_recover_ms=<median> restart_recover_ms=<y> restart_backoff_ms=<b>
 *            vs_restart=<y/median> vs_restart_no_backoff=<(y-b)/median>
 *            steps_lost=<most> redundancy_overhead=<median> */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"

enum { KILL_MIN = 12, KILL_MAX = 30, STEPS = 40, VICTIM = 1, CKPT_EVERY = 10, MAX_RUNS = 50 };
#define DEADLINE_S 600.0 /* one run: ~15 s on two quiet cores */

typedef struct outcome {
  double recover_ms;
  int kill_after;               /* the step drawn */
  int last_before, first_after; /* the steps rank 0 logged last before the kill and first after it */
  bool rolled_back;             /* the lost shard came from the checkpoint */
  double overhead;              /* redundancy's share of a step (reshape runs) */
  double backoff_ms;            /* giantrun's wait before the restart (restart runs) */
  bool ok;
} outcome;

/* The last "step" index in rank 0's metrics file, and how many lines. */
static int last_step(const char *path, int *lines) {
  FILE *f = fopen(path, "r");
  int last = -1;
  *lines = 0;
  char line[4096];
  while (f && fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "{\"step\":");
    if (!p) continue;
    last = atoi(p + 8);
    (*lines)++;
  }
  if (f) fclose(f);
  return last;
}

/* How many times text occurs in the file at path. */
static int count_in(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[8192];
  while (f && fgets(line, sizeof line, f)) n += strstr(line, text) != NULL;
  if (f) fclose(f);
  return n;
}

/* The pid of worker `rank`: the agent's child whose GT_RANK it is. */
static pid_t worker_pid(pid_t agent, int rank) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "for p in $(pgrep -P %ld); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx GT_RANK=%d && "
           "echo $p; done | head -1",
           (long)agent, rank);
  FILE *p = popen(cmd, "r");
  long pid = 0;
  if (p && fscanf(p, "%ld", &pid) != 1) pid = 0;
  if (p) pclose(p);
  return (pid_t)pid;
}

/* The first line of the log that holds `what` into line ("" if none). */
static void log_line(const char *log, const char *what, char *line, size_t cap) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "grep -a '%s' '%s' | head -1", what, log);
  FILE *p = popen(cmd, "r");
  line[0] = '\0';
  if (p && !fgets(line, (int)cap, p)) line[0] = '\0';
  if (p) pclose(p);
}

static double overhead_of(const char *log) {
  char line[1024];
  log_line(log, "redundancy: a copy takes", line, sizeof line);
  double ms, pct, step;
  int every;
  const char *q = strstr(line, "a copy takes");
  if (!q || sscanf(q, "a copy takes %lf ms, %lf%% of a %lf ms step: copying every %d", &ms, &pct, &step, &every) != 4)
    return NAN;
  return pct / 100 / every;
}

/* The back-off giantrun waited before restarting the workers, as it logs
 * it; NAN when it logged none. */
static double backoff_of(const char *log) {
  char line[1024];
  log_line(log, "back-off waited", line, sizeof line);
  double s;
  const char *q = strstr(line, "back-off waited");
  return q && sscanf(q, "back-off waited %lf s", &s) == 1 ? s * 1e3 : NAN;
}

static void nap_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
  nanosleep(&ts, NULL);
}

/* Whether the agent has exited (reaped into *st). */
static bool agent_gone(pid_t agent, int *st) { return waitpid(agent, st, WNOHANG) == agent; }

static void fail_run(const char *what, int k, const char *log, pid_t agent, bool reaped, int st) {
  if (!reaped) {
    kill(agent, SIGTERM);
    waitpid(agent, &st, 0);
  }
  fprintf(stderr, "bench_reshape: run %d: %s (agent exit %d); its log follows\n", k, what,
          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "grep -av '\\] step ' '%s' | tail -40 >&2", log);
  if (system(cmd) != 0) fprintf(stderr, "(cannot show %s)\n", log);
}

static outcome run(const char *dir, const char *build, int k, bool reshape, unsigned *seed) {
  outcome o = {.recover_ms = NAN, .overhead = NAN, .backoff_ms = NAN};
  char metrics[512], log[512], cmd[4096];
  snprintf(metrics, sizeof metrics, "%s/m%d.jsonl", dir, k);
  snprintf(log, sizeof log, "%s/log%d.txt", dir, k);
  snprintf(cmd, sizeof cmd,
           "exec env OMP_NUM_THREADS=1 '%s/launch/giantrun' --standalone --nproc-per-node 4 --plan dp=4 %s "
           "--ckpt-dir '%s/ck%d' --ckpt-every %d '%s/examples/gpt' --corpus /usr/share/games/fortunes "
           "--data '%s/fortunes.tok' --steps %d --layers 4 --channels 128 --heads 4 --seq 64 --global-batch 16 "
           "--zero1 --sample 0 --print-every 0 --metrics '%s' > '%s' 2>&1",
           build, reshape ? "--reshape" : "--max-restarts 1", dir, k, CKPT_EVERY, build, dir, STEPS, metrics, log);
  o.kill_after = KILL_MIN + (int)(rand_r(seed) % (KILL_MAX - KILL_MIN + 1));
  double delay_frac = rand_r(seed) / ((double)RAND_MAX + 1);
  pid_t agent = fork();
  if (agent == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  /* Wait for the step drawn, then a part of a step, then kill worker VICTIM. */
  int lines = 0, last = -1, st = 0;
  double deadline = gt_now() + DEADLINE_S, t_at = 0, t_prev = 0;
  while ((last = last_step(metrics, &lines)) < o.kill_after) {
    if (agent_gone(agent, &st)) {
      fail_run("the job ended before the kill", k, log, agent, true, st);
      return o;
    }
    if (gt_now() > deadline) {
      fail_run("no step before the deadline", k, log, agent, false, 0);
      return o;
    }
    if (last == o.kill_after - 1 && t_prev == 0) t_prev = gt_now();
    nap_ms(1);
  }
  t_at = gt_now();
  double step_ms = t_prev > 0 ? (t_at - t_prev) * 1e3 : 50;
  nap_ms(delay_frac * step_ms);
  pid_t victim = worker_pid(agent, VICTIM);
  if (victim <= 0 || kill(victim, SIGKILL) != 0) {
    fail_run("no worker to kill", k, log, agent, false, 0);
    return o;
  }
  double t_kill = gt_now();
  o.last_before = last_step(metrics, &lines);
  /* A step the old layout completes just after the kill is not a
   * recovery: wait for the recovered job to say it is there (the reshape's
   * line, or the new generation's resume line), then for its first step. */
  const char *marker = reshape ? "gpt: reshaped in " : "checkpoints: resumed from ";
  int seen = -1;
  bool reaped = false;
  while (gt_now() < deadline) {
    int now_lines = 0, s = last_step(metrics, &now_lines);
    if (seen < 0 && count_in(log, marker) > 0) seen = now_lines;
    if (seen >= 0 && now_lines > seen) {
      o.recover_ms = (gt_now() - t_kill) * 1e3;
      o.first_after = s;
      break;
    }
    if ((reaped = agent_gone(agent, &st))) break; /* a dead job recovers from nothing: no deadline to wait out */
    nap_ms(1);
  }
  if (isnan(o.recover_ms)) {
    fail_run(reaped ? "the job ended without recovering" : "no recovery before the deadline", k, log, agent, reaped,
             st);
    return o;
  }
  if (!reaped) waitpid(agent, &st, 0);
  o.ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!o.ok) fail_run("the job recovered, then failed", k, log, agent, true, st);
  o.rolled_back = count_in(log, "rolled back in-process to ") > 0;
  if (reshape) o.overhead = overhead_of(log);
  if (!reshape) o.backoff_ms = backoff_of(log);
  return o;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : NAN;
}

int main(int argc, char **argv) {
  int runs = 5;
  unsigned seed = (unsigned)time(NULL);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc && atoi(argv[i + 1]) >= 1 && atoi(argv[i + 1]) <= MAX_RUNS) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = (unsigned)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: bench_reshape [--runs N (1..%d)] [--seed S]\n", MAX_RUNS);
      return 2;
    }
  }
  char dir[] = "/tmp/giant-bench-reshape-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  const char *build = GIANT_BUILD_DIR;
  printf(
      "bench_reshape --runs %d --seed %u: examples/gpt, 4 ranks dp=4 + ZeRO-1 on one machine, L=4 C=128 T=64,\n"
      "global batch 16, a checkpoint every %d steps, %d steps; worker %d SIGKILLed at a random moment of a step\n"
      "drawn from %d..%d\n",
      runs, seed, CKPT_EVERY, STEPS, VICTIM, KILL_MIN, KILL_MAX);
  fflush(stdout);
  double rec[MAX_RUNS], over[MAX_RUNS];
  int most_lost = 0, nover = 0, rc = 0;
  for (int k = 0; k < runs; k++) {
    outcome a = run(dir, build, k, true, &seed);
    if (!a.ok) {
      printf("run %d: killed after step %d: FAILED\n", k + 1, a.kill_after);
      rc = 1;
      break;
    }
    int lost = a.last_before + 1 - a.first_after, bound = a.rolled_back ? CKPT_EVERY : 1;
    printf(
        "run %d: killed after step %d: next step %.0f ms after the kill (last step before %d, first after %d), "
        "%d step(s) lost%s\n",
        k + 1, a.last_before, a.recover_ms, a.last_before, a.first_after, lost,
        a.rolled_back ? ", rolled back in-process to the newest checkpoint" : ", the state from the peers");
    fflush(stdout);
    if (lost > bound) {
      printf("run %d: %d steps lost, more than %d\n", k + 1, lost, bound);
      rc = 1;
    }
    rec[k] = a.recover_ms;
    if (!isnan(a.overhead)) over[nover++] = a.overhead;
    if (lost > most_lost) most_lost = lost;
  }
  outcome b = rc == 0 ? run(dir, build, runs, false, &seed) : (outcome){.recover_ms = NAN, .backoff_ms = NAN};
  if (rc == 0 && !b.ok) rc = 1;
  if (rc == 0)
    printf(
        "full restart from the newest checkpoint: next step %.0f ms after the kill (last step before %d, first "
        "after %d), of which %.0f ms giantrun's back-off before restarting the workers, %.0f ms without it\n",
        b.recover_ms, b.last_before, b.first_after, b.backoff_ms, b.recover_ms - b.backoff_ms);
  double med = rc == 0 ? median(rec, runs) : NAN, ov = median(over, nover);
  printf("redundancy: %.4f of the step time (median)\n", ov);
  printf(
      "reshape_recover_ms=%.0f restart_recover_ms=%.0f restart_backoff_ms=%.0f vs_restart=%.2f "
      "vs_restart_no_backoff=%.2f steps_lost=%d redundancy_overhead=%.4f\n",
      med, b.recover_ms, b.backoff_ms, b.recover_ms / med, (b.recover_ms - b.backoff_ms) / med,
      rc == 0 ? most_lost : -1, ov);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "bench_reshape: could not remove %s\n", dir);
  return rc;
}
