/* The process grid: dp x pp x tp ranks, and one communicator per axis
 * group, built over a store.
 */
#ifndef GIANT_GRID_H
#define GIANT_GRID_H

#include "giant/engine/comm.h"
#include "giant/status.h"
#include "giant/engine/store.h"

GT_API_BEGIN

/*
 * Rank order follows Megatron: tensor-parallel index fastest, then
 * data-parallel, then pipeline-parallel:
 *     rank = tp_idx + tp * (dp_idx + dp * pp_idx)
 * so the tp ranks of one model replica stage are adjacent (one node), and a
 * pipeline stage's ranks are contiguous.
 */

typedef enum gt_grid_axis { GT_GRID_DP = 0, GT_GRID_TP = 1, GT_GRID_PP = 2 } gt_grid_axis;

typedef struct gt_grid_coords {
  int dp, tp, pp;
} gt_grid_coords;

/* Checks that every factor is >= 1 and dp*tp*pp == world. */
gt_status gt_grid_check(const gt_grid_layout *l, int world);
gt_status gt_grid_coords_of(const gt_grid_layout *l, int rank, gt_grid_coords *c);
int gt_grid_rank_of(const gt_grid_layout *l, const gt_grid_coords *c);
/* The world ranks of `rank`'s group along `axis`, in group order, into
 * ranks[] (room for the axis size); *index = rank's place in it and *group
 * = which group of that axis it is (0 .. world/axis_size - 1). */
gt_status gt_grid_group(const gt_grid_layout *l, int rank, gt_grid_axis axis, int *ranks, int *index, int *group);
int gt_grid_axis_size(const gt_grid_layout *l, gt_grid_axis axis);

typedef struct gt_grid gt_grid;

typedef struct gt_grid_config {
  gt_store *store;
  const char *generation; /* namespaces every key ("gen7"); unique per build */
  gt_grid_layout layout;
  int rank;            /* world rank */
  gt_comm_config comm; /* template: backend, secret, host, transport,
                             timeouts (store, prefix, rank, size ignored) */
} gt_grid_config;

/* Builds the world communicator and this rank's dp, tp and pp groups.
 * Collective over the world. */
gt_status gt_grid_create(const gt_grid_config *cfg, gt_grid **out);
void gt_grid_destroy(gt_grid *g);
/* The group along an axis (size-1 groups are communicators too). */
gt_comm *gt_grid_comm(gt_grid *g, gt_grid_axis axis);
gt_comm *gt_grid_world(gt_grid *g);
const gt_grid_coords *gt_grid_my_coords(const gt_grid *g);
/* Aborts every communicator of the grid (any thread). */
void gt_grid_abort(gt_grid *g);

GT_API_END
#endif
