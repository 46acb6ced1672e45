/* Hang detection. Each worker reports its step counter on a pipe of its own
 * (gt_job_step); the agent flags a worker whose step has not advanced for
 * the hang timeout. A collective would notice a hung peer only after its own
 * timeout (minutes); the step counter costs one write per step. */
#include <stdio.h>
#include <string.h>

#include "giant/log.h"
#include "launch/agent.h"

void progress_take(worker *w, const unsigned char *data, size_t n) {
  for (size_t i = 0; i < n; i++) {
    w->rec[w->rec_len++] = data[i];
    if (w->rec_len < 8) continue;
    w->rec_len = 0;
    unsigned long long v = 0;
    for (int b = 7; b >= 0; b--) v = v << 8 | w->rec[b];
    long long step = (long long)v;
    if (step <= w->step && w->step_at > 0) continue;
    double now = gt_now();
    /* The first report starts the clock: start-up (loading data, building
     * the model) is not a step. */
    if (w->step_at > 0 && now - w->step_at > w->longest_step) w->longest_step = now - w->step_at;
    /* The usual step, smoothed: one long step (a recovery's) weighs on
     * it for a few steps only. */
    double interval = now - w->step_at;
    if (w->step_at > 0) w->usual_step = w->usual_step > 0 ? 0.8 * w->usual_step + 0.2 * interval : interval;
    w->step = step;
    w->step_at = now;
  }
}

int workers_hung(const worker_group *g, double timeout_s, double slack, char *why, size_t n) {
  double now = gt_now();
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (w->exited || w->step_at <= 0) continue;
    double limit = timeout_s;
    if (limit <= 0) {
      limit = 3.0 * w->longest_step;
      if (limit < HANG_FLOOR_S) limit = HANG_FLOOR_S;
    }
    limit *= slack;
    if (now - w->step_at <= limit) continue;
    snprintf(why, n,
             "worker rank %d (pid %ld) made no progress for %.0f s after step %lld (hang timeout %.0f s; "
             "see --hang-timeout)",
             w->rank, (long)w->pid, now - w->step_at, w->step, limit);
    return i;
  }
  return -1;
}

int worker_stopped(const worker *w) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)w->pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  /* "pid (comm) S ...": the state follows the last ')' (comm may hold one). */
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

double workers_progress_at(const worker_group *g, double since) {
  double at = since;
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (w->exited || w->released) continue;
    /* Its progress pipe closed (gt_job_done): training is over, and what
     * is left is no stall. */
    if (w->fd[2] < 0) return gt_now();
    if (w->step_at > at) at = w->step_at;
  }
  return at;
}

int workers_stopped_long(const worker_group *g, char *why, size_t n) {
  double now = gt_now();
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (w->exited || w->step_at <= 0 || !worker_stopped(w)) continue;
    /* Against its usual step, not its longest: a stopped process makes
     * no progress at all, and a step that once waited out a recovery
     * says nothing of how long this one should take. */
    double limit = 3.0 * w->usual_step;
    if (limit < STOPPED_FLOOR_S) limit = STOPPED_FLOOR_S;
    if (now - w->step_at <= limit) continue;
    snprintf(why, n, "worker rank %d (pid %ld) is stopped and made no progress for %.0f s after step %lld", w->rank,
             (long)w->pid, now - w->step_at, w->step);
    return i;
  }
  return -1;
}
