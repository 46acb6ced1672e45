/* Splitting a communicator by color, as MPI_Comm_split and ncclCommSplit
 * do: the ranks of one color form a new group ordered by (key, rank). The
 * colors travel over the parent; the new group forms through the store
 * under the prefix given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "comm/comm_internal.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

gt_status gt_comm_split(gt_comm *c, int color, int key, const char *prefix, gt_comm **out) {
  if (!c || !out || !prefix || !*prefix)
    return gt_errorf(GT_EINVAL, "gt_comm_split: NULL communicator, prefix or result");
  *out = NULL;
  if (c->nccl) {
    gt_comm *child = NULL;
    GT_TRY(gt_comm_nccl_split(c, color, key, &child));
    if (child) gt_comm_adopt(c, child);
    *out = child;
    return GT_OK;
  }
  /* The colors travel over the parent itself: one all-gather, where the
   * store would take a write and a read per rank. */
  int n = c->size, size = 0, rank = -1;
  int32_t mine[2] = {color, key}, *all = malloc(sizeof(int32_t) * 2 * (size_t)n);
  if (!all) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status st = gt_comm_allgather(c, mine, all, 2, GT_F32); /* ints, moved as 4-byte words */
  if (st == GT_OK && color >= 0) {
    for (int j = 0; j < n; j++) {
      if (all[2 * j] != color) continue;
      size++;
      if (all[2 * j + 1] < key || (all[2 * j + 1] == key && j < c->rank)) rank++;
    }
    rank++; /* ranks that sort before us, counted from -1 */
    gt_comm_config cfg = c->cfg;
    char pfx[256];
    snprintf(pfx, sizeof pfx, "%s/c%d", prefix, color);
    cfg.store = c->store;
    cfg.prefix = pfx;
    cfg.secret = c->secret;
    cfg.host = c->host;
    cfg.rank = rank;
    cfg.size = size;
    cfg.op_timeout_ms = (int)(c->op_timeout * 1000);
    cfg.init_timeout_ms = c->init_timeout_ms;
    cfg.transport = c->cfg.transport;
    st = gt_comm_init(&cfg, out);
    if (st == GT_OK) gt_comm_adopt(c, *out);
  }
  free(all);
  return st == GT_OK ? st : gt_error_context(st, "splitting group '%s'", c->prefix);
}
