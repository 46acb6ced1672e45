/* --rebalance at pipeline layouts: the stage cut by measured speed.
 * docs/failslow.md, "Re-cutting pipeline stages". */
#ifndef GIANT_EXAMPLE_GPT_RECUT_H
#define GIANT_EXAMPLE_GPT_RECUT_H

#include <stdbool.h>

#include "giant/metrics.h"
#include "giant/model.h"
#include "giant/plan.h"
#include "giant/planner.h"

typedef struct gpt_recut {
  double speed[GT_PLANNER_MAX_STAGES];     /* each pipeline rank's measured FLOP/s, relative to the fastest */
  int first[GT_PLANNER_MAX_STAGES + 1];    /* the proposed cut: stage s holds layers [first[s], first[s+1]) */
  int now[GT_PLANNER_MAX_STAGES + 1];      /* the cut the model has */
  double step_now_s, step_new_s;           /* the slowest stage's compute now, and predicted at the cut */
  bool change;                             /* the cuts differ and the slowest stage shrinks by min_gain */
} gpt_recut;

/* From nsteps of every world rank's telemetry (tel[s * world + r]), for a
 * model m cut as it is, with B rows of T tokens a micro-batch: a stage's
 * speed is its layers' FLOPs over its slowest rank's compute (the median
 * over the steps); the planner cuts the layers again for those speeds. */
gt_status gpt_recut_propose(const gt_plan *plan, const gt_model *m, int B, int T, const gt_step_telemetry *tel,
                            int nsteps, double min_gain, gpt_recut *out);

#endif
