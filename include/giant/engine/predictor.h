/* The workload-aware iteration-time predictor.
 *
 * Per rank, the step's compute time is modelled from its workload
 * (gt_step_telemetry in giant/metrics.h):
 *   t_compute ~ a * tokens + b * seq_sq * layers + c
 * tokens pays for the matrix products, seq_sq * layers for attention (whose
 * cost grows with the square of the sequence length, in every layer held),
 * c for what every step costs. (a, b, c) are fitted online by recursive
 * least squares with forgetting, one fit per rank, starting from a prior
 * taken from the planner's cost model (the layers' FLOPs, forward plus twice
 * that backward, over the measured peak) so that it predicts from step 1.
 * A long batch is slow because it is long: the prediction says so. A rank
 * slower than its prediction is not explained by its workload.
 *
 * Peer prediction: a rank's workload under its peers' fits (their median;
 * the peers of its group, a pipeline stage, when there are any, so a stage
 * is judged by its own stage), which tells a rank that has always been
 * slow from a job that is. */
#ifndef GIANT_PREDICTOR_H
#define GIANT_PREDICTOR_H

#include <stdbool.h>

#include "giant/metrics.h"
#include "giant/engine/model.h"

GT_API_BEGIN

typedef struct gt_predictor_prior {
  double a; /* seconds per token */
  double b; /* seconds per unit of seq_sq * layers */
  double c; /* seconds per step */
} gt_predictor_prior;

typedef struct gt_predictor_config {
  int nranks;
  gt_predictor_prior prior;
  double forget;      /* RLS forgetting factor in (0, 1]; 0: 0.98 (a memory of about 50 steps) */
  double prior_trust; /* how far the prior may be off, as a factor; 0: 3 */
  double clip;        /* a step's error counts at most clip x its prediction (bursts); 0: 0.5 */
  /* Ranks doing the same work: ranks with equal groups[r] are each other's
   * peers (a pipeline stage: the first holds the embedding, the last the
   * LM head). Copied. NULL: ranks holding as many layers are peers. */
  const int *groups;
} gt_predictor_config;

typedef struct gt_predictor gt_predictor;

gt_status gt_predictor_create(const gt_predictor_config *cfg, gt_predictor **out);
void gt_predictor_destroy(gt_predictor *p);

/* The prior for a rank holding `layers` of model m (its local layers) on a
 * device of peak_flops: the cost model's FLOPs of a row of length T are
 * alpha*T + beta*T^2 (matrix products, attention); a step costs three
 * forwards. */
gt_status gt_predictor_prior_from_model(const gt_model *m, int layers, double peak_flops, gt_predictor_prior *out);

/* Predicted compute seconds of w on w->rank: under its own fit, and under
 * the median of the other ranks' fits. */
double gt_predictor_own(const gt_predictor *p, const gt_step_telemetry *w);
double gt_predictor_peers(const gt_predictor *p, const gt_step_telemetry *w);
/* Predicted compute seconds of w under rank `fit`'s fit (NaN before that
 * rank has learnt, or outside the job). */
double gt_predictor_with(const gt_predictor *p, int fit, const gt_step_telemetry *w);
/* Learns from w (its workload and its measured compute_s). */
gt_status gt_predictor_update(gt_predictor *p, const gt_step_telemetry *w);
/* Steps rank has learnt from. */
int gt_predictor_updates(const gt_predictor *p, int rank);
/* Whether ranks a and b are peers (the same group). */
bool gt_predictor_same_group(const gt_predictor *p, int a, int b);

GT_API_END
#endif
