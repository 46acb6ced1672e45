/* bench/reshape: the time from a worker's death to the next completed step.
 *
 * examples/gpt on four ranks (giantrun --standalone, dp=4 with ZeRO-1, one
 * thread each, a checkpoint every 10 steps). When rank 0's metrics show
 * step KILL_AFTER done, the bench SIGKILLs worker 1 and times how long
 * until rank 0 logs a step again, in one run with each of:
 *   - giantrun --reshape: the three left reshape in-process, the lost
 *     ZeRO-1 shard from its copy on a peer (gpt's default --mirror-every:
 *     as often as 2% of a step allows; an older copy gives way to the
 *     checkpoint);
 *   - today's full restart (--max-restarts 1): every worker stopped, a new
 *     generation, a load of the newest committed checkpoint.
 * The clock stops at the first step rank 0 completes after the recovered
 * job announced itself (the reshape's line, or the new generation's resume
 * line), so that a step the old layout finished just after the kill does
 * not count. steps_lost: of the reshape run, the steps completed before the
 * kill that were done again after it. redundancy_overhead: the copies' share of the
 * step time, as the example measured it over its first steps, divided by
 * the steps between copies it chose.
 * Last line: reshape_recover_ms=<x> restart_recover_ms=<y> vs_restart=<y/x>
 *            steps_lost=<n> redundancy_overhead=<o> */
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

enum { KILL_AFTER = 20, STEPS = 40, VICTIM = 1 };

typedef struct outcome {
  double recover_ms;
  int last_before, first_after; /* the steps rank 0 logged last before the kill and first after it */
  double overhead;              /* redundancy's share of a step (the reshape run) */
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
           "echo $p; done | head -1", (long)agent, rank);
  FILE *p = popen(cmd, "r");
  long pid = 0;
  if (p && fscanf(p, "%ld", &pid) != 1) pid = 0;
  if (p) pclose(p);
  return (pid_t)pid;
}

static double overhead_of(const char *log) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "grep -a 'redundancy: a copy takes' '%s' | head -1", log);
  FILE *p = popen(cmd, "r");
  char line[1024] = "";
  if (p && !fgets(line, sizeof line, p)) line[0] = 0;
  if (p) pclose(p);
  double ms, pct, step;
  int every;
  const char *q = strstr(line, "a copy takes");
  if (!q || sscanf(q, "a copy takes %lf ms, %lf%% of a %lf ms step: copying every %d", &ms, &pct, &step, &every) != 4)
    return NAN;
  return pct / 100 / every;
}

static outcome run(const char *dir, const char *build, bool reshape) {
  outcome o = {.recover_ms = NAN, .overhead = NAN};
  char metrics[512], log[512], cmd[4096];
  snprintf(metrics, sizeof metrics, "%s/m%d.jsonl", dir, reshape);
  snprintf(log, sizeof log, "%s/log%d.txt", dir, reshape);
  snprintf(cmd, sizeof cmd,
           "exec env OMP_NUM_THREADS=1 '%s/launch/giantrun' --standalone --nproc-per-node 4 --plan dp=4 %s "
           "--ckpt-dir '%s/ck%d' --ckpt-every 10 '%s/examples/gpt' --corpus /usr/share/games/fortunes "
           "--data '%s/fortunes.tok' --steps %d --layers 4 --channels 128 --heads 4 --seq 64 --global-batch 16 "
           "--zero1 --sample 0 --print-every 0 --metrics '%s' > '%s' 2>&1",
           build, reshape ? "--reshape" : "--max-restarts 1", dir, reshape, build, dir, STEPS, metrics, log);
  pid_t agent = fork();
  if (agent == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  /* Wait for step KILL_AFTER, then kill worker VICTIM. */
  int lines = 0, last = -1;
  double t_kill = 0, deadline = gt_now() + 600;
  while (gt_now() < deadline && (last = last_step(metrics, &lines)) < KILL_AFTER) {
    if (waitpid(agent, NULL, WNOHANG) == agent) return o;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  pid_t victim = worker_pid(agent, VICTIM);
  if (victim <= 0 || kill(victim, SIGKILL) != 0) {
    fprintf(stderr, "bench_reshape: no worker %d to kill (%s)\n", VICTIM, strerror(errno));
    kill(agent, SIGTERM);
    waitpid(agent, NULL, 0);
    return o;
  }
  t_kill = gt_now();
  o.last_before = last_step(metrics, &lines);
  /* A step the old layout completes just after the kill is not a
   * recovery: wait for the recovered job to say it is there (the reshape's
   * line, or the new generation's resume line), then for its first step. */
  const char *marker = reshape ? "gpt: reshaped in " : "checkpoints: resumed from ";
  int seen = -1;
  while (gt_now() < deadline) {
    int now_lines = 0, s = last_step(metrics, &now_lines);
    if (seen < 0 && count_in(log, marker) > 0) seen = now_lines;
    if (seen >= 0 && now_lines > seen) {
      o.recover_ms = (gt_now() - t_kill) * 1e3;
      o.first_after = s;
      break;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  int st = 0;
  waitpid(agent, &st, 0);
  o.ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && !isnan(o.recover_ms);
  if (!o.ok) fprintf(stderr, "bench_reshape: the %s run failed (exit %d): see %s\n", reshape ? "reshape" : "restart",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1, log);
  if (reshape) o.overhead = overhead_of(log);
  return o;
}

int main(void) {
  char dir[] = "/tmp/giant-bench-reshape-XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  const char *build = GIANT_BUILD_DIR;
  printf("bench_reshape: examples/gpt, 4 ranks dp=4 + ZeRO-1 on one machine, L=4 C=128 T=64, global batch 16,\n"
         "a checkpoint every 10 steps; worker %d SIGKILLed once step %d is done, %d steps\n", VICTIM, KILL_AFTER,
         STEPS);
  outcome a = run(dir, build, true);
  outcome b = run(dir, build, false);
  printf("reshape in-process: next step %.0f ms after the kill (last step before %d, first after %d)\n", a.recover_ms,
         a.last_before, a.first_after);
  printf("full restart from the newest checkpoint: next step %.0f ms after the kill (last step before %d, first "
         "after %d)\n", b.recover_ms, b.last_before, b.first_after);
  printf("redundancy: %.4f of the step time\n", a.overhead);
  int lost = a.ok ? a.last_before + 1 - a.first_after : -1;
  printf("reshape_recover_ms=%.0f restart_recover_ms=%.0f vs_restart=%.2f steps_lost=%d redundancy_overhead=%.4f\n",
         a.recover_ms, b.recover_ms, b.recover_ms / a.recover_ms, lost < 0 ? -1 : lost, a.overhead);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "bench_reshape: could not remove %s\n", dir);
  return a.ok && b.ok ? 0 : 1;
}
