/* Rebalancing data-parallel shares by measured speed: the decision.
 *
 * Replicas that compute at different speeds (a slow device, a throttled
 * node) make every step wait for the slowest. Giving each replica rows of
 * every group micro-batch in proportion to its speed makes them finish
 * together; every token still weighs the same (giant/engine/trainer.h,
 * gt_trainer_set_rows). This is the decision only: a pure function of the
 * plan, every rank's telemetry of recent steps, the current shares and the
 * switch's cost, so that every rank, given the same data, decides the
 * same. docs/failslow.md describes it. */
#ifndef GIANT_REBALANCE_H
#define GIANT_REBALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/metrics.h"
#include "giant/engine/coord.h"
#include "giant/engine/plan.h"

typedef struct gt_rebalance_config {
  int cap;             /* the most rows one replica may take (the B_max its activations hold) */
  double transition_s; /* what switching costs, in seconds (>= 0) */
  int horizon;         /* steps a switch has to pay back over (>= 1) */
  double min_gain;     /* hysteresis: the predicted step must shrink by at least this fraction; 0: 0.05 */
} gt_rebalance_config;

typedef struct gt_rebalance_decision {
  double step_now_s; /* predicted compute time of a step at the current shares */
  double step_new_s; /* ... at the proposed shares */
  double gain_s;     /* (now - new) x horizon - transition_s */
  bool change;       /* switch: the shares differ, gain_s > 0 and the step shrinks by min_gain */
} gt_rebalance_decision;

/* tel holds `nsteps` steps of every world rank's telemetry, oldest first:
 * tel[s * plan->world + r] is world rank r's at step s. A rank's speed is
 * the median over the steps of its rows per compute-second (rows =
 * tokens^2 / seq_sq, the micro-batches' B summed when T is fixed); a
 * replica's is its slowest rank's (the tensor- and pipeline-parallel ranks
 * of a replica all work on its rows). shares[i] is replica i's rows of
 * every group micro-batch now; new_shares[i] gets the shares that minimise
 * the predicted step (max over replicas of rows x micro-batches / speed),
 * each in 1..cap, summing to the same total. speed (NULL: not wanted) gets
 * each replica's rows per second. */
gt_status gt_rebalance_decide(const gt_rebalance_config *cfg, const gt_plan *plan, const gt_step_telemetry *tel,
                              int nsteps, const int *shares, int *new_shares, double *speed,
                              gt_rebalance_decision *out);

/* The two halves of gt_rebalance_decide, for a decision taken elsewhere
 * than where the telemetry is (a job's leader, giant/engine/coord.h):
 * gt_rebalance_speeds measures every replica's rows per second (speed) and
 * micro-batches a step (micro), dp entries each; gt_rebalance_choose
 * decides from them alone. */
gt_status gt_rebalance_speeds(const gt_plan *plan, const gt_step_telemetry *tel, int nsteps, double *speed, int *micro);
gt_status gt_rebalance_choose(const gt_rebalance_config *cfg, int dp, const double *speed, const int *micro,
                              const int *shares, int *new_shares, gt_rebalance_decision *out);

/* Pipelines: re-cutting the stages by measured speed. A stage's speed is
 * the FLOPs of the layers it holds over its compute a step (stage_s[s]:
 * its slowest rank's), and the planner (gt_planner_partition) cuts the
 * layers again for those speeds. now[s] is the first layer of stage s
 * (now[pp] = nlayers); layer_flops[i], layer i's forward FLOPs a
 * micro-batch. The predicted step is the slowest stage's; the switch must
 * pay back cfg->transition_s (a rebuild) within cfg->horizon steps and
 * shrink it by cfg->min_gain (cfg->cap is not used). */
#define GT_REBALANCE_MAX_STAGES GT_MITIGATION_MAX_STAGES

typedef struct gt_rebalance_cut {
  int pp, layers;
  int now[GT_REBALANCE_MAX_STAGES + 1];  /* the cut given */
  int next[GT_REBALANCE_MAX_STAGES + 1]; /* the cut chosen (the same when no change) */
  double speed[GT_REBALANCE_MAX_STAGES]; /* each stage's FLOP/s, relative to the fastest */
  double step_now_s, step_new_s;         /* the slowest stage's compute, now and at next */
  double gain_s;                         /* (now - new) x horizon - transition_s */
  bool change;
} gt_rebalance_cut;

gt_status gt_rebalance_choose_cut(const gt_rebalance_config *cfg, int pp, const int *now, const double *stage_s,
                                  const double *layer_flops, int nlayers, gt_rebalance_cut *out);

/* Damping of switches (of rows or of a cut), as routers damp a flapping
 * route. A slow device stays slow and is followed once; a neighbour's load
 * that comes and goes moves the measured speeds back and forth, and
 * following every move pays a rebuild each time for nothing. So each
 * switch taken within `horizon` steps of the one before doubles the
 * agreeing decisions in a row the next one needs (at most
 * 2^GT_REBALANCE_DAMPING_MAX times) and adds min_gain to the gain it must
 * promise; a layout quiet for `horizon` steps is judged afresh. */
#define GT_REBALANCE_DAMPING_MAX 3

typedef struct gt_rebalance_damping {
  int horizon;       /* steps after a switch during which the next one is damped (>= 1) */
  int64_t last_step; /* of the last switch; -1: none yet */
  int streak;        /* switches in a row, each within the horizon of the one before */
} gt_rebalance_damping;

void gt_rebalance_damping_init(gt_rebalance_damping *d, int horizon);
/* The decisions in a row a switch at `step` needs, undamped `persist`. */
int gt_rebalance_damping_persist(const gt_rebalance_damping *d, int64_t step, int persist);
/* The fraction the predicted step must shrink by for a switch at `step`,
 * undamped `min_gain` (gt_rebalance_config's). */
double gt_rebalance_damping_gain(const gt_rebalance_damping *d, int64_t step, double min_gain);
/* A switch taken at `step`. */
void gt_rebalance_damping_note(gt_rebalance_damping *d, int64_t step);

/* Decisions in a row that propose the same layout: `proposed` (n ints, the
 * caller's) holds the last proposal and *agreed how many decisions in a
 * row made it. A decision to change to next[0..n) counts one more when it
 * proposes the same, else starts a new count of 1; a decision without a
 * change sets the count to 0. Returns the count. A switch stands once it
 * reaches gt_rebalance_damping_persist; the caller sets *agreed to 0 when
 * it switches. */
int gt_rebalance_agree(int *proposed, int *agreed, bool change, const int *next, int n);

#endif
