/* What the run tells etcd of its progress (giant/engine/progress.h): each
 * rank's step and step time, and rank 0's view of the job with its ETA.
 * A thread of its own writes them at most once a second, so that a slow or
 * absent etcd never holds a step up; without etcd nothing is written. */
#ifndef GIANT_RUN_PROGRESS_H
#define GIANT_RUN_PROGRESS_H

#include "giant/metrics.h"
#include "giant/status.h"

typedef struct run_progress run_progress;
struct gt_run;

/* NULL in *out (and GT_OK) when the job has no etcd. */
gt_status run_progress_open(struct gt_run *r, run_progress **out);
/* After step step_done (1-based) ended with st. */
void run_progress_step(run_progress *p, const struct gt_run *r, const gt_step_stats *st, int step_done);
/* The newest committed checkpoint again, after the last save ended. */
void run_progress_ckpt(run_progress *p, const struct gt_run *r);
/* Writes what is pending, then stops the thread. NULL is a no-op. */
void run_progress_close(run_progress *p);

#endif
