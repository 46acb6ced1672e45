/* What a run shows of itself as it trains: each step's metrics line
 * (--metrics), the step line with the fraction done and the time left,
 * and TensorBoard's event file (--tensorboard): the step's scalars and, as
 * text, faults, fail-slow verdicts, the ladder's decisions and reshapes. */
#ifndef GIANT_RUN_OBSERVE_H
#define GIANT_RUN_OBSERVE_H

#include <stdbool.h>

#include "giant/metrics.h"
#include "resilience/detect/failslow.h"
#include "tboard.h"

typedef struct run_observe {
  gt_metrics *metrics; /* this rank's --metrics file, or none */
  run_tboard *tb;      /* the lead's event file, opened when a rank first leads */
  const char *tb_dir;  /* --tensorboard, or NULL */
  bool tb_broken;      /* a write failed: warned once, no more written */
  int steps;           /* --steps: the ETA's end */
  int print_every;
  double step_avg; /* moving average of the step time, the first step (warm-up) left out */
  int timed;       /* steps seen since the run (or this process) started */
} run_observe;

/* metrics: this rank's metrics file or NULL; tb_dir: --tensorboard or
 * NULL, whose file the lead opens now (a directory that cannot be made is
 * the flag's error). */
gt_status run_observe_open(run_observe *o, const char *metrics, const char *tb_dir, bool lead, int steps,
                           int print_every);
void run_observe_close(run_observe *o);
/* After a step the trainer took (not a skipped one): st's ETA and fraction
 * done filled in, its metrics line written, the lead's step line printed
 * every print_every steps and its scalars written. */
gt_status run_observe_step(run_observe *o, bool lead, gt_step_stats *st);
/* After the fail-slow monitor's report: every rank's step time (when it
 * gathered) and its verdicts, on the lead. */
void run_observe_failslow(run_observe *o, bool lead, const gt_failslow_report *rep);
/* A line of text under tag ("events/fault") at step, on the lead. */
void run_observe_text(run_observe *o, bool lead, int step, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
