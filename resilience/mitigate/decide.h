/* The job leader's decisions on the workers' mitigation report (the report
 * and the decision are records of the coordinator, giant/engine/coord.h):
 * the rows each replica takes, or the pipeline's cut, priced by
 * rebalance.h over a horizon of steps. launch/lead.c calls these. */
#ifndef GIANT_MITIGATE_DECIDE_H
#define GIANT_MITIGATE_DECIDE_H

#include "giant/engine/coord.h"
#include "resilience/mitigate/rebalance.h"

/* The leader's decision on a report: gt_rebalance_choose with the report's
 * cap and transition cost over `horizon` steps. */
gt_status gt_mitigation_decide(const gt_mitigation_report *r, int horizon, double min_gain, int *new_shares,
                               gt_rebalance_decision *d);
/* The leader's pipeline cut on a report with pp > 1: gt_rebalance_choose_cut
 * over `horizon` steps, the switch (a rebuild) costing twice the report's
 * transition_s. */
gt_status gt_mitigation_decide_cut(const gt_mitigation_report *r, int horizon, double min_gain, gt_rebalance_cut *c);

#endif
