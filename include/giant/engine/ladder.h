/* The mitigation ladder for a fail-slow rank (docs/resilience.md):
 *   S1 rebalance: fewer rows of each micro-batch for the slow replica;
 *   S2 re-cut:    fewer layers for the slow pipeline stage;
 *   S3 exclude:   reshape in-process without the slow rank;
 *   S4 restart:   checkpoint, and restart the job without it.
 * A pure function: the predicted step time of each rung the job can take,
 * plus its transition cost spread over a horizon of steps, and the
 * cheapest total wins (the lowest rung on a tie; doing nothing is rung 0).
 */
#ifndef GIANT_LADDER_H
#define GIANT_LADDER_H

#include <stdbool.h>

#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_ladder_rung {
  GT_LADDER_NONE = 0,
  GT_LADDER_REBALANCE = 1,
  GT_LADDER_RECUT = 2,
  GT_LADDER_EXCLUDE = 3,
  GT_LADDER_RESTART = 4,
} gt_ladder_rung;

typedef struct gt_ladder_input {
  int dp, pp;       /* the layout now: replicas, and pipeline stages */
  double step_s;    /* the step time now, with the slow rank (measured) */
  double slowdown;  /* the slow rank's compute over its prediction (> 1) */
  int horizon;      /* steps the decision is judged over (the steps left, capped) */
  bool can[5];      /* which rungs this job has (can[0], doing nothing, always) */
  double cost_s[5]; /* each rung's transition cost in seconds (measured where known) */
  double min_share; /* S1: the smallest fraction of the rows a replica may keep (0: none) */
} gt_ladder_input;

typedef struct gt_ladder_decision {
  gt_ladder_rung rung;
  double step_s[5];  /* the predicted step time of each rung (0 where it cannot be taken) */
  double total_s[5]; /* cost + horizon x step: what is compared */
} gt_ladder_decision;

gt_status gt_ladder_decide(const gt_ladder_input *in, gt_ladder_decision *out);

/* A slow link with ranks behind it (a node's own link): every step waits
 * on it, wait_s against wait_base_s in normal steps. S1 and S2 move
 * compute, not traffic, and are not offered; S3 (and S4) leave the ranks
 * behind it out, `replicas` data-parallel replicas of dp: the step without
 * the wait, the work of those replicas spread over the others,
 *   (step_s - (wait_s - wait_base_s)) * dp / (dp - replicas). */
typedef struct gt_ladder_link_input {
  int dp, replicas; /* replicas: those the ranks behind the link belong to (< dp) */
  double step_s;    /* the step time now (measured) */
  double wait_s, wait_base_s;
  int horizon;
  bool can[5]; /* only can[3] and can[4] are looked at */
  double cost_s[5];
} gt_ladder_link_input;

gt_status gt_ladder_decide_link(const gt_ladder_link_input *in, gt_ladder_decision *out);
const char *gt_ladder_rung_name(gt_ladder_rung r);

GT_API_END
#endif
