/* Fail-slow detection: which rank is slower than its workload explains.
 *
 * Each step, every rank's measured compute time is compared with what the
 * predictor (giant/engine/predictor.h) says its workload should have cost:
 * e_r = log(observed / predicted). What all ranks share (longer batches the
 * predictor missed, a machine-wide slowdown) is taken out by subtracting the
 * median over ranks, z_r = e_r - median(e), so a job that slows as a whole
 * raises no alarm. A rank is flagged when z_r > log(1 + theta) for k
 * steps in a row (a step still over log(1 + theta / 2) holds the count)
 * and a CUSUM on z_r / sigma (sigma: the robust spread of
 * clean residuals over the last `window` steps) confirms a shift, so that a
 * short burst of noise, however large, is not one, and when the rank is
 * slow against its peers as well (the predictor's groups: its pipeline
 * stage), over the same k steps: the median over them of the lesser of how
 * far its z_r stands out from theirs and how much longer it took than its
 * workload under their fits predicts is over log(1 + theta). A rank
 * whose conditions changed with its peers', or whose own fit was learnt in
 * a quieter spell, is then not flagged. While a rank builds
 * evidence its fit is frozen, so the predictor does not explain the shift
 * away. Once flagged, its own fit follows its slow speed and it is judged
 * against its peers' fits: it is cleared when the median of its last 2k
 * residuals against them is under log(1 + theta / 2). The detector feeds
 * the predictor: call gt_detector_step, not gt_predictor_update, for a
 * predictor it watches.
 *
 * With two ranks the median would be their mean, which halves a slow
 * rank's excess: each is judged against the other instead, z_r = e_r -
 * e_other, which a machine-wide slowdown moves alike. One rank alone has
 * no job to be told from and is never flagged. */
#ifndef GIANT_DETECTOR_H
#define GIANT_DETECTOR_H

#include <stdbool.h>

#include "giant/engine/predictor.h"

GT_API_BEGIN

typedef struct gt_detector_config {
  int nranks;
  double theta;       /* slowdown that counts, as a fraction; 0: 0.25, or 0.4 for two ranks */
  int k;              /* steps in a row above it to flag; 0: 5 */
  int warmup;         /* steps the predictor learns before any verdict; 0: 10 */
  int window;         /* steps of clean residuals that set sigma; 0: 50 */
  double cusum_drift; /* subtracted each step, in sigmas; 0: 0.5 */
  double cusum_limit; /* the CUSUM that confirms a shift, in sigmas; 0: 8 */
  double sigma_min;   /* floor of sigma (log scale), for very quiet machines; 0: 0.02 */
  /* The fits learn each rank's speed relative to the job: each step's
   * job-wide factor is taken out of what they see, so a slowdown all ranks
   * share never moves them, and ranks whose fits would follow it at
   * different paces (different workloads, a pipeline's stages) do not
   * drift apart while it begins or ends. Predictions are then in units of
   * the job's speed: seconds are a prediction times the step's job-wide
   * factor. With two ranks the fits learn plain times (the job-wide factor
   * is then half of each rank's own residual, and relative fits drift). */
  bool relative_fits;
} gt_detector_config;

typedef struct gt_detector_event {
  int rank;
  int step;     /* the step of the verdict */
  int onset;    /* flagged: the first step of the run above theta */
  bool flagged; /* true: flagged slow; false: cleared */
  double ratio; /* observed / predicted, job-wide factor removed, at the verdict */
} gt_detector_event;

typedef struct gt_detector gt_detector;

/* The detector feeds the predictor (and keeps a flagged rank's fit frozen);
 * it does not own it. */
gt_status gt_detector_create(const gt_detector_config *cfg, gt_predictor *pred, gt_detector **out);
void gt_detector_destroy(gt_detector *d);
/* One step: tel[r] is rank r's telemetry (nranks entries). Writes the
 * verdicts of this step (at most nranks) to events. */
gt_status gt_detector_step(gt_detector *d, int step, const gt_step_telemetry *tel, gt_detector_event *events,
                           int *nevents);
bool gt_detector_flagged(const gt_detector *d, int rank);

GT_API_END
#endif
