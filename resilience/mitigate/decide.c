/* The job leader's decisions on a mitigation report (decide.h). */
#include "resilience/mitigate/decide.h"
#include "giant/engine/coord.h"
#include "resilience/mitigate/rebalance.h"

gt_status gt_mitigation_decide(const gt_mitigation_report *r, int horizon, double min_gain, int *new_shares,
                               gt_rebalance_decision *d) {
  if (r->dp < 1 || r->dp > GT_MITIGATION_MAX_DP)
    return gt_errorf(GT_EINVAL, "mitigation record: dp=%d is outside 1..%d", r->dp, GT_MITIGATION_MAX_DP);
  gt_rebalance_config cfg = {.cap = r->cap, .transition_s = r->transition_s, .horizon = horizon, .min_gain = min_gain};
  return gt_rebalance_choose(&cfg, r->dp, r->speed, r->micro, r->shares, new_shares, d);
}

gt_status gt_mitigation_decide_cut(const gt_mitigation_report *r, int horizon, double min_gain, gt_rebalance_cut *c) {
  /* A re-cut rebuilds the model and trainer: about two steps. */
  gt_rebalance_config cfg = {.cap = 1, .transition_s = 2 * r->transition_s, .horizon = horizon, .min_gain = min_gain};
  return gt_rebalance_choose_cut(&cfg, r->pp, r->cut, r->stage_s, r->layer_flops, r->layers, c);
}
