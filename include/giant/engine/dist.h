/* A running job's parallel state: the process grid built from a plan, and
 * the groups the model and trainer use. It can be destroyed and built again
 * at another layout inside the same process.
 */
#ifndef GIANT_DIST_H
#define GIANT_DIST_H

#include "giant/engine/comm.h"
#include "giant/engine/grid.h"
#include "giant/group.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"

GT_API_BEGIN

typedef struct gt_dist gt_dist;

typedef struct gt_dist_config {
  gt_plan plan;
  gt_store *store;        /* bootstrap store shared by the world */
  const char *generation; /* key namespace, unique per build ("gen0") */
  gt_comm_config comm;    /* template: backend, secret, timeouts */
} gt_dist_config;

gt_status gt_dist_create(const gt_dist_config *cfg, gt_dist **out);
void gt_dist_destroy(gt_dist *d);
const gt_plan *gt_dist_plan(const gt_dist *d);
gt_grid *gt_dist_grid(gt_dist *d);
/* The model's parallel context for this rank (set it before adding layers). */
gt_model_parallel gt_dist_model_parallel(gt_dist *d);

GT_API_END
#endif
