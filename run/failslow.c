/* A run's fail-slow detection: the monitor after every step, and the
 * predictor's accuracy over the run at the end. */
#include "failslow.h"
#include "giant/engine/dist.h"
#include "giant/engine/init.h"
#include "resilience/detect/failslow.h"

#include <stdio.h>

static double ape_sum, ape_raw_sum;
static int ape_steps;

gt_status run_failslow_start(const gt_run_options *o, gt_dist *dist, const gt_model *m, gt_job *job,
                             const char *metrics, const int *record_ranks, gt_failslow **out) {
  *out = NULL;
  if (!o->failslow) return GT_OK;
  if (!dist) return gt_errorf(GT_EINVAL, "--failslow needs a job of 2 or more ranks (run under giantrun)");
  gt_failslow_config c = {.theta = o->failslow_theta,
                          .k = o->failslow_k,
                          .warmup = o->failslow_warmup,
                          .window = o->failslow_window,
                          .every = o->failslow_every,
                          .probe_rounds = o->failslow_probe_rounds,
                          .probe_bytes = o->failslow_probe_bytes,
                          .metrics_path = metrics,
                          .etcd = gt_job_etcd(job),
                          .job_id = job->job_id,
                          .record_ranks = record_ranks};
  return gt_failslow_create(dist, m, &c, out);
}

gt_status run_failslow_after_step(gt_failslow *fs, const gt_step_stats *st, gt_failslow_report *rep) {
  *rep = (gt_failslow_report){.step = st->step};
  if (!fs) return GT_OK;
  GT_TRY(gt_failslow_step(fs, st, rep));
  /* Accuracy over the steps where nothing was flagged or found. */
  bool clean = rep->gathered && rep->nverdicts == 0;
  for (int r = 0; clean && r < rep->nranks; r++) clean = !gt_failslow_flagged(fs, r, GT_FAILSLOW_COMPUTE, -1);
  if (clean && st->step >= 10) {
    ape_sum += rep->ape;
    ape_raw_sum += rep->ape_raw;
    ape_steps++;
  }
  return GT_OK;
}

void run_failslow_summary(gt_failslow *fs, bool lead) {
  if (!fs || !lead || ape_steps == 0) return;
  /* ape_raw is the forecast's error; ape, scaled by the step's own job
   * factor, only the ranks' spread around it (docs/failslow.md). */
  printf(
      "fail-slow: predictor MAPE %.4f (the job factor forecast from the steps before), spread %.4f (the step's own "
      "job factor applied), over %d clean steps\n",
      ape_raw_sum / ape_steps, ape_sum / ape_steps, ape_steps);
}
