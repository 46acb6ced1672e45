/* --rebalance at pipeline layouts: what the stage cut by measured speed
 * is decided on (resilience/mitigate/rebalance.h, gt_rebalance_choose_cut).
 * docs/failslow.md, "Re-cutting pipeline stages". */
#ifndef GIANT_RUN_RECUT_H
#define GIANT_RUN_RECUT_H

#include "giant/metrics.h"
#include "giant/model.h"
#include "giant/engine/plan.h"
#include "resilience/mitigate/rebalance.h"

#define RUN_RECUT_MAX_LAYERS 512

typedef struct run_recut_inputs {
  int pp, layers;
  int now[GT_REBALANCE_MAX_STAGES + 1];    /* the model's cut: stage s holds layers [now[s], now[s+1]) */
  double stage_s[GT_REBALANCE_MAX_STAGES]; /* each stage's slowest rank's compute, median over the steps */
  double flops[RUN_RECUT_MAX_LAYERS];      /* each layer's forward FLOPs, B rows of T tokens */
} run_recut_inputs;

/* The model's cut: now[s] the first layer of stage s, now[pp] its layers. */
void run_recut_now(const gt_model *m, int pp, int *now);
/* From nsteps of every world rank's telemetry (tel[s * world + r]) and the
 * model m as it is cut. GT_EUNSUPPORTED past the limits above. */
gt_status run_recut_inputs_of(const gt_plan *plan, const gt_model *m, int B, int T, const gt_step_telemetry *tel,
                              int nsteps, run_recut_inputs *out);

#endif
