/* Plans as the run library uses them: previews, checks against a model,
 * stage cuts, the printed table. Internal to libgiant (shared with the
 * layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_PARALLEL_PLAN_ENGINE_H
#define GIANT_PARALLEL_PLAN_ENGINE_H

#include "giant/engine/plan.h"
#include "giant/group.h"

const char *gt_plan_source_name(gt_plan_source s);

/* The same decisions without the planner: the factors the flags and the
 * annotations fix, 0 where the planner is to choose. */
gt_status gt_plan_preview(const gt_plan_config *cfg, gt_grid_layout *fixed);

/* After the model is built: the constraints a layout puts on the model (a
 * split that no layer can take, pipeline stages without pipelining). The
 * message names the constraint. */
gt_status gt_plan_check_model(const gt_plan *p, const gt_model *m);

/* Before the model is built: cut its layers into the plan's pipeline stages
 * with the planner, balancing each stage's FLOPs against its rank's speed
 * (stage_speed[r] for pipeline rank r; NULL: all equal) for micro-batches
 * of (B, T). A slower rank gets fewer layers. No-op without pipelining. */
gt_status gt_plan_cut_stages(const gt_plan *p, gt_model *m, int B, int T, const double *stage_speed);

/* A table: the layout, where each decision came from ("decide dp=2 from
 * annotation: ..."), each layer with its stage and split, each parameter's
 * local and global shape, and this rank's ZeRO shard. */
void gt_plan_print(const gt_plan *p, const gt_model *m, FILE *f);

#endif
