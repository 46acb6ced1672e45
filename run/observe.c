/* The step's metrics line, the step line with its ETA, and TensorBoard's
 * scalars and text, written by the run rather than by the trainer: only
 * the run knows --steps (the ETA) and the events around a step. */
#include "observe.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "giant/log.h"

gt_status run_observe_open(run_observe *o, const char *metrics, const char *tb_dir, bool lead, int steps,
                           int print_every) {
  *o = (run_observe){.tb_dir = tb_dir, .steps = steps, .print_every = print_every};
  GT_TRY(gt_metrics_open(metrics, &o->metrics));
  if (lead && tb_dir) {
    gt_status s = run_tboard_open(tb_dir, &o->tb);
    if (s != GT_OK) {
      run_observe_close(o);
      return s;
    }
  }
  return GT_OK;
}

void run_observe_close(run_observe *o) {
  gt_metrics_close(o->metrics);
  run_tboard_close(o->tb);
  o->metrics = NULL;
  o->tb = NULL;
}

/* The lead's event file: opened by a rank that becomes the lead after a
 * reshape, too. NULL without --tensorboard, or after a failed write. */
static run_tboard *tboard(run_observe *o, bool lead) {
  if (!lead || !o->tb_dir || o->tb_broken) return NULL;
  if (!o->tb && run_tboard_open(o->tb_dir, &o->tb) != GT_OK) {
    gt_warn("--tensorboard: %s; no more events are written", gt_last_error());
    o->tb_broken = true;
  }
  return o->tb;
}

/* A failed event write costs the events, never the training. */
static void tboard_check(run_observe *o, gt_status s) {
  if (s == GT_OK) return;
  gt_warn("--tensorboard: %s; no more events are written", gt_last_error());
  o->tb_broken = true;
  run_tboard_close(o->tb);
  o->tb = NULL;
}

gt_status run_observe_step(run_observe *o, bool lead, gt_step_stats *st) {
  /* The first step of a process warms caches and pools: left out of the
   * average unless it is all there is. */
  const double alpha = 0.1;
  if (o->timed == 1 || o->timed == 0)
    o->step_avg = st->seconds;
  else
    o->step_avg += alpha * (st->seconds - o->step_avg);
  o->timed++;
  int left = o->steps - (st->step + 1);
  st->done = o->steps > 0 ? (double)(st->step + 1) / o->steps : 0;
  st->eta_s = left > 0 ? left * o->step_avg : 0;
  GT_TRY(gt_metrics_write(o->metrics, st));
  if (lead && ((o->print_every > 0 && st->step % o->print_every == 0) || st->has_eval)) gt_metrics_print(stdout, st);
  run_tboard *tb = tboard(o, lead);
  if (!tb) return GT_OK;
  run_tboard_scalar v[] = {
      {"train/loss", st->loss},
      {"train/lr", st->lr},
      {"train/grad_norm", (float)st->grad_norm},
      {"perf/tokens_per_s", (float)st->tokens_per_s},
      {"perf/mfu", (float)st->mfu},
      {"perf/step_time_s", (float)st->seconds},
      {"memory/peak_mib", (float)((double)st->mem_peak / (1 << 20))},
      {"progress/eta_s", (float)st->eta_s},
      {NULL, 0}, /* eval/loss, on the steps evaluated */
  };
  int n = (int)(sizeof v / sizeof v[0]) - 1;
  if (st->has_eval) v[n++] = (run_tboard_scalar){"eval/loss", st->eval_loss};
  tboard_check(o, run_tboard_scalars(tb, st->step, v, n));
  return GT_OK;
}

void run_observe_failslow(run_observe *o, bool lead, const gt_failslow_report *rep) {
  run_tboard *tb = tboard(o, lead);
  if (!tb || !rep->gathered) return;
  enum { MAX_RANKS = 256 };
  char tags[MAX_RANKS][40];
  run_tboard_scalar v[MAX_RANKS];
  int n = rep->nranks < MAX_RANKS ? rep->nranks : MAX_RANKS;
  for (int k = 0; k < n; k++) {
    snprintf(tags[k], sizeof tags[k], "perf/step_time_s/rank_%d", k);
    v[k] = (run_tboard_scalar){tags[k], (float)rep->telemetry[k].step_s};
  }
  tboard_check(o, run_tboard_scalars(tb, rep->step, v, n));
  /* The verdicts are events (run/events.c): text, with the metrics' lines. */
}

void run_observe_text(run_observe *o, bool lead, int step, const char *tag, const char *fmt, ...) {
  run_tboard *tb = tboard(o, lead);
  if (!tb) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  tboard_check(o, run_tboard_text(tb, step, tag, text));
}
