/* Splitting a communicator by color, as MPI_Comm_split and ncclCommSplit
 * do: the ranks of one color form a new group ordered by (key, rank). The
 * colors travel through the store under the parent's prefix. */
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
  uint32_t seq = c->split_seq++;
  char k[320], v[64];
  gt_comm_key(c, k, sizeof k, "split/%u/%d", seq, c->rank);
  int vl = snprintf(v, sizeof v, "%d %d", color, key);
  GT_TRY(gt_store_set(c->store, k, v, (size_t)vl));
  int n = c->size, size = 0, rank = -1;
  int *colors = malloc(sizeof(int) * (size_t)n), *keys = malloc(sizeof(int) * (size_t)n);
  if (!colors || !keys) {
    free(colors);
    free(keys);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  gt_status st = GT_OK;
  double deadline = gt_now() + c->init_timeout_ms / 1000.0;
  for (int j = 0; st == GT_OK && j < n; j++) {
    gt_comm_key(c, k, sizeof k, "split/%u/%d", seq, j);
    void *val;
    size_t len;
    int ms = (int)((deadline - gt_now()) * 1000);
    st = gt_store_get(c->store, k, &val, &len, ms > 0 ? ms : 0);
    if (st != GT_OK) break;
    if (sscanf(val, "%d %d", &colors[j], &keys[j]) != 2)
      st = gt_errorf(GT_EFORMAT, "malformed split entry '%s' of rank %d", (char *)val, j);
    free(val);
  }
  if (st == GT_OK && color >= 0) {
    for (int j = 0; j < n; j++) {
      if (colors[j] != color) continue;
      size++;
      if (keys[j] < key || (keys[j] == key && j < c->rank)) rank++;
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
  free(colors);
  free(keys);
  return st == GT_OK ? st : gt_error_context(st, "splitting group '%s'", c->prefix);
}
