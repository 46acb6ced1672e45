/* A run's fail-slow detection (resilience/detect/failslow.h): --failslow turns it on,
 * --failslow-theta, -k, -warmup, -window, -every, -probe-rounds and
 * -probe-bytes tune it (defaults in docs/failslow.md). */
#ifndef GIANT_RUN_FAILSLOW_H
#define GIANT_RUN_FAILSLOW_H

#include "resilience/detect/failslow.h"
#include "giant/engine/init.h"
#include "giant/run.h"
#include "giant/engine/dist.h"

/* NULL *out unless o->failslow. metrics: rank 0's metrics file (verdict lines go
 * there too), or NULL. record_ranks: each rank's rank at launch, for the
 * health records, after a reshape (NULL: the same). */
gt_status run_failslow_start(const gt_run_options *o, gt_dist *dist, const gt_model *m, gt_job *job,
                             const char *metrics, const int *record_ranks, gt_failslow **out);
/* After each step; fs NULL: nothing. The step's report goes to *rep
 * (rep->gathered false when nothing was gathered). */
gt_status run_failslow_after_step(gt_failslow *fs, const gt_step_stats *st, gt_failslow_report *rep);
/* Rank 0, at the end: how well the predictor did over the run. */
void run_failslow_summary(gt_failslow *fs, bool lead);

#endif
