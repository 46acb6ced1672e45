/* The process grid: rank arithmetic for dp x pp x tp, and one communicator
 * per axis group. Rank order follows Megatron (tp fastest, then dp, then
 * pp): rank = tp_idx + tp * (dp_idx + dp * pp_idx). */
#include <stdio.h>
#include <stdlib.h>

#include "giant/engine/comm.h"
#include "giant/engine/grid.h"
#include "comm/delays.h"
#include "giant/group.h"

struct gt_grid {
  gt_grid_layout l;
  gt_grid_coords me;
  gt_comm *world;
  gt_comm *axis[3];
};

gt_status gt_grid_check(const gt_grid_layout *l, int world) {
  if (!l) return gt_errorf(GT_EINVAL, "grid: NULL layout");
  if (l->dp < 1 || l->tp < 1 || l->pp < 1)
    return gt_errorf(GT_EINVAL, "grid: dp=%d tp=%d pp=%d must all be >= 1", l->dp, l->tp, l->pp);
  if ((long long)l->dp * l->tp * l->pp != world)
    return gt_errorf(GT_EINVAL, "grid: dp*tp*pp = %d*%d*%d = %lld does not match the world size %d", l->dp, l->tp,
                     l->pp, (long long)l->dp * l->tp * l->pp, world);
  return GT_OK;
}

int gt_grid_axis_size(const gt_grid_layout *l, gt_grid_axis axis) {
  return axis == GT_GRID_DP ? l->dp : axis == GT_GRID_TP ? l->tp : l->pp;
}

gt_status gt_grid_coords_of(const gt_grid_layout *l, int rank, gt_grid_coords *c) {
  int world = l->dp * l->tp * l->pp;
  GT_TRY(gt_grid_check(l, world));
  if (rank < 0 || rank >= world) return gt_errorf(GT_EINVAL, "grid: rank %d outside the world of %d", rank, world);
  c->tp = rank % l->tp;
  c->dp = (rank / l->tp) % l->dp;
  c->pp = rank / (l->tp * l->dp);
  return GT_OK;
}

int gt_grid_rank_of(const gt_grid_layout *l, const gt_grid_coords *c) {
  return c->tp + l->tp * (c->dp + l->dp * c->pp);
}

gt_status gt_grid_group(const gt_grid_layout *l, int rank, gt_grid_axis axis, int *ranks, int *index, int *group) {
  gt_grid_coords me;
  GT_TRY(gt_grid_coords_of(l, rank, &me));
  int n = gt_grid_axis_size(l, axis);
  for (int i = 0; i < n; i++) {
    gt_grid_coords c = me;
    if (axis == GT_GRID_DP)
      c.dp = i;
    else if (axis == GT_GRID_TP)
      c.tp = i;
    else
      c.pp = i;
    if (ranks) ranks[i] = gt_grid_rank_of(l, &c);
  }
  if (index) *index = axis == GT_GRID_DP ? me.dp : axis == GT_GRID_TP ? me.tp : me.pp;
  if (group) {
    if (axis == GT_GRID_TP)
      *group = me.dp + l->dp * me.pp;
    else if (axis == GT_GRID_DP)
      *group = me.tp + l->tp * me.pp;
    else
      *group = me.tp + l->tp * me.dp;
  }
  return GT_OK;
}

void gt_grid_destroy(gt_grid *g) {
  if (!g) return;
  for (int a = 0; a < 3; a++) gt_comm_destroy(g->axis[a]);
  gt_comm_destroy(g->world);
  free(g);
}

void gt_grid_abort(gt_grid *g) {
  if (!g) return;
  for (int a = 0; a < 3; a++)
    if (g->axis[a]) gt_comm_abort(g->axis[a]);
  if (g->world) gt_comm_abort(g->world);
}

gt_comm *gt_grid_comm(gt_grid *g, gt_grid_axis axis) { return g && axis >= 0 && axis <= 2 ? g->axis[axis] : NULL; }
gt_comm *gt_grid_world(gt_grid *g) { return g ? g->world : NULL; }
const gt_grid_coords *gt_grid_my_coords(const gt_grid *g) { return &g->me; }

gt_status gt_grid_create(const gt_grid_config *cfg, gt_grid **out) {
  if (!cfg || !out || !cfg->store) return gt_errorf(GT_EINVAL, "grid: NULL config or store");
  if (!cfg->generation || !*cfg->generation)
    return gt_errorf(GT_EINVAL, "grid: a generation string is required (it keeps rebuilds apart)");
  const gt_grid_layout *l = &cfg->layout;
  int world = l->dp * l->tp * l->pp;
  GT_TRY(gt_grid_check(l, world));
  gt_grid *g = calloc(1, sizeof *g);
  if (!g) return gt_errorf(GT_ENOMEM, "out of memory");
  g->l = *l;
  gt_status st = gt_grid_coords_of(l, cfg->rank, &g->me);
  char prefix[256];
  gt_comm_config cc = cfg->comm;
  cc.store = cfg->store;
  if (st == GT_OK) {
    snprintf(prefix, sizeof prefix, "%s/grid/world", cfg->generation);
    cc.prefix = prefix;
    cc.rank = cfg->rank;
    cc.size = world;
    st = gt_comm_init(&cc, &g->world);
  }
  static const char *const names[3] = {"dp", "tp", "pp"};
  for (int a = 0; st == GT_OK && a < 3; a++) {
    int index, group;
    st = gt_grid_group(l, cfg->rank, (gt_grid_axis)a, NULL, &index, &group);
    if (st != GT_OK) break;
    snprintf(prefix, sizeof prefix, "%s/grid/%s/%d", cfg->generation, names[a], group);
    cc.prefix = prefix;
    cc.rank = index;
    cc.size = gt_grid_axis_size(l, (gt_grid_axis)a);
    st = gt_comm_init(&cc, &g->axis[a]);
  }
  if (st != GT_OK) {
    gt_grid_destroy(g);
    return gt_error_context(st, "building the %dx%dx%d (dp x tp x pp) grid, generation '%s'", l->dp, l->tp, l->pp,
                            cfg->generation);
  }
  *out = g;
  return GT_OK;
}

/* A slow link to world_peer, played on purpose: see gt_comm_set_send_delay. */
gt_status gt_grid_set_send_delay(gt_grid *g, int world_peer, double ms) {
  if (!g) return gt_errorf(GT_EINVAL, "gt_grid_set_send_delay: NULL grid");
  gt_comm *world = gt_grid_world(g);
  int me = gt_comm_rank(world);
  GT_TRY(gt_comm_set_send_delay(world, world_peer, ms));
  /* The same link inside every axis group that holds both ends, at the
   * peer's index in that group. */
  const gt_grid_layout *l = &g->l;
  int ranks[4096];
  for (int axis = 0; axis < 3; axis++) {
    int size = gt_grid_axis_size(l, (gt_grid_axis)axis), index, group;
    if (size < 2 || size > 4096) continue;
    GT_TRY(gt_grid_group(l, me, (gt_grid_axis)axis, ranks, &index, &group));
    for (int i = 0; i < size; i++)
      if (ranks[i] == world_peer) GT_TRY(gt_comm_set_send_delay(g->axis[axis], i, ms));
  }
  return GT_OK;
}
