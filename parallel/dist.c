/* A running job's parallel state: the grid built from a plan, and the
 * groups that layers and the trainer reduce over. */
#include <stdio.h>
#include <stdlib.h>

#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "parallel/dist_engine.h"

struct gt_dist {
  gt_plan plan;
  gt_grid *grid;
  gt_group tp, dp, pp;
  char generation[96];
  int instances; /* executors created on it so far */
};

gt_status gt_dist_create(const gt_dist_config *cfg, gt_dist **out) {
  *out = NULL;
  gt_dist *d = calloc(1, sizeof *d);
  if (!d) return gt_errorf(GT_ENOMEM, "out of memory creating the distributed state");
  d->plan = cfg->plan;
  snprintf(d->generation, sizeof d->generation, "%s", cfg->generation ? cfg->generation : "gen0");
  gt_grid_config gc = {.store = cfg->store,
                       .generation = cfg->generation,
                       .layout = cfg->plan.layout,
                       .rank = cfg->plan.rank,
                       .comm = cfg->comm};
  gt_status s = gt_grid_create(&gc, &d->grid);
  if (s == GT_OK) s = gt_comm_group_init(gt_grid_comm(d->grid, GT_GRID_TP), &d->tp);
  if (s == GT_OK) s = gt_comm_group_init(gt_grid_comm(d->grid, GT_GRID_DP), &d->dp);
  if (s == GT_OK) s = gt_comm_group_init(gt_grid_comm(d->grid, GT_GRID_PP), &d->pp);
  if (s != GT_OK) {
    gt_dist_destroy(d);
    return s;
  }
  *out = d;
  return GT_OK;
}

void gt_dist_destroy(gt_dist *d) {
  if (!d) return;
  gt_grid_destroy(d->grid);
  free(d);
}

const gt_plan *gt_dist_plan(const gt_dist *d) { return &d->plan; }
const char *gt_dist_generation(const gt_dist *d) { return d->generation; }
int gt_dist_next_instance(gt_dist *d) { return d->instances++; }
gt_grid *gt_dist_grid(gt_dist *d) { return d->grid; }
gt_group *gt_dist_dp_group(gt_dist *d) { return &d->dp; }
gt_group *gt_dist_tp_group(gt_dist *d) { return &d->tp; }
gt_group *gt_dist_pp_group(gt_dist *d) { return d->plan.layout.pp > 1 ? &d->pp : NULL; }

gt_model_parallel gt_dist_model_parallel(gt_dist *d) {
  gt_model_parallel p = {.tp = d->plan.layout.tp > 1 ? &d->tp : NULL,
                         .seq_parallel = d->plan.seq_parallel,
                         .buffer_multiple = 16 * (size_t)d->plan.layout.dp,
                         .pp_rank = d->plan.me.pp,
                         .pp_size = d->plan.layout.pp,
                         .pp_chunks = d->plan.chunks,
                         .zero = d->plan.zero,
                         .dp_rank = d->plan.me.dp,
                         .dp_size = d->plan.layout.dp};
  return p;
}
