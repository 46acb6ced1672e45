/* All-reduce in two levels, for a group that spans hosts with several of
 * its ranks on some host: the ranks of each host sum onto their leader
 * (the lowest rank there) through shared memory, the leaders all-reduce
 * over TCP, and each leader broadcasts the sum back through shared
 * memory. A flat TCP ring through every rank would send each byte over
 * the network about twice per rank; here it crosses it about twice per
 * host, and the hops inside a host cost a copy instead of a socket.
 *
 * The two levels are groups split from this one when it forms
 * (gt_comm_hier_setup), so an abort of the group reaches them; the other
 * collectives stay on the flat mesh. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_internal.h"
#include "giant/engine/comm.h"

struct gt_comm_hier {
  gt_comm *node;    /* this host's ranks (shared memory) */
  gt_comm *leaders; /* one rank per host (TCP); NULL off the leaders */
};

gt_status gt_comm_hier_setup(gt_comm *c, const int *host_of, int nhosts) {
  if (nhosts < 2 || nhosts >= c->size) return GT_OK; /* one host, or one rank a host: nothing to gain */
  gt_comm_hier *h = calloc(1, sizeof *h);
  if (!h) return gt_errorf(GT_ENOMEM, "out of memory");
  bool leader = true;
  for (int j = 0; j < c->rank; j++)
    if (host_of[j] == host_of[c->rank]) leader = false;
  char pfx[256];
  snprintf(pfx, sizeof pfx, "%s/node", c->prefix);
  gt_status st = gt_comm_split(c, host_of[c->rank], c->rank, pfx, &h->node);
  snprintf(pfx, sizeof pfx, "%s/leaders", c->prefix);
  if (st == GT_OK) st = gt_comm_split(c, leader ? 0 : -1, c->rank, pfx, &h->leaders);
  if (st != GT_OK) {
    gt_comm_destroy(h->node);
    free(h);
    return gt_error_context(st, "forming the node and leader groups of '%s'", c->prefix);
  }
  c->hier = h;
  return GT_OK;
}

void gt_comm_hier_abort(gt_comm *c) {
  if (!c->hier) return;
  gt_comm_abort(c->hier->node);
  gt_comm_abort(c->hier->leaders);
}

/* The buffer goes in pieces, so the levels overlap: while the leaders
 * all-reduce piece i, the host sums piece i+1 and hands back piece i-1.
 * Every rank of a host queues its node operations in one order (reduce
 * i+1 before broadcast i), which the leader keeps by waiting for piece
 * i's sum before it queues piece i's broadcast. */
#define PIECE ((size_t)4 << 20) /* bytes: enough to stream, small enough to overlap */

static gt_status hier_wait(gt_comm_req **r) {
  gt_status st = *r ? gt_comm_wait(*r, -1) : GT_OK;
  *r = NULL;
  return st;
}

gt_status gt_comm_hier_allreduce(gt_comm *c, void *buf, size_t count, gt_dtype t) {
  gt_comm_hier *h = c->hier;
  bool local = gt_comm_size(h->node) > 1;
  size_t es = gt_dtype_size(t), per = PIECE / es, np = (count + per - 1) / per;
  char *b = buf;
  gt_comm_req *red[2] = {NULL, NULL}, *bc[2] = {NULL, NULL};
  gt_status st = GT_OK;
#define AT(i) (b + (size_t)(i)*per * es)
#define LEN(i) ((size_t)(i) + 1 < np ? per : count - (size_t)(i)*per)
  if (local) st = gt_comm_reduce_to_start(h->node, AT(0), AT(0), LEN(0), t, GT_COMM_SUM, 0, &red[0]);
  for (size_t i = 0; st == GT_OK && i < np; i++) {
    if (local && i + 1 < np)
      st = gt_comm_reduce_to_start(h->node, AT(i + 1), AT(i + 1), LEN(i + 1), t, GT_COMM_SUM, 0, &red[(i + 1) % 2]);
    if (st == GT_OK) st = hier_wait(&red[i % 2]);
    if (st == GT_OK && h->leaders) st = gt_comm_allreduce(h->leaders, AT(i), LEN(i), t, GT_COMM_SUM);
    if (st == GT_OK) st = hier_wait(&bc[(i + 1) % 2]); /* piece i-1 back, before its slot is reused */
    if (st == GT_OK && local) st = gt_comm_broadcast_start(h->node, AT(i), LEN(i), t, 0, &bc[i % 2]);
  }
  for (int k = 0; k < 2; k++) {
    gt_status a = hier_wait(&bc[k]), r = hier_wait(&red[k]);
    if (st == GT_OK) st = a != GT_OK ? a : r;
  }
#undef AT
#undef LEN
  if (st == GT_OK) return GT_OK;
  /* A rank of this host may wait in the broadcast for a sum this leader
   * will never send: failing both levels wakes it, as the group's own
   * failure wakes its peers on the flat mesh. */
  gt_comm_hier_abort(c);
  return gt_error_context(st, "the all-reduce of group '%s' across hosts", c->prefix);
}

void gt_comm_hier_destroy(gt_comm *c) {
  if (!c->hier) return;
  gt_comm_destroy(c->hier->leaders);
  gt_comm_destroy(c->hier->node);
  free(c->hier);
  c->hier = NULL;
}
