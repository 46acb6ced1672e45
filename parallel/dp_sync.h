/* Data-parallel gradient averaging, bucketed and overlapped with backward,
 * with optional ZeRO-1 sharding of the optimizer's work.
 */
#ifndef GIANT_DP_SYNC_H
#define GIANT_DP_SYNC_H

#include "giant/engine/comm.h"
#include "giant/model.h"
#include "giant/status.h"

/* Sums gradients over the data-parallel group: each replica's loss carries
 * its share of the step's tokens, so the sum is the step's average, even
 * when replicas hold uneven shares. The gradient buffer is cut into
 * buckets of about bucket_bytes, in backward order; a bucket's
 * all-reduce starts as soon as the backward of the lowest layer it covers
 * has run, so communication overlaps the rest of backward. With ZeRO-1 the
 * gradients are reduce-scattered instead, bucket by bucket as they end, each
 * bucket reduced to the rank whose shard holds it: each rank keeps the
 * average of its shard only, updates that shard, and the parameters are
 * all-gathered. With ZeRO-2 the model holds only its shard of the
 * gradients, and each layer's are reduced to their owners after its
 * backward (core/model/zero.c). */
typedef struct gt_dp_sync gt_dp_sync;

typedef struct gt_dp_sync_stats {
  int buckets;
  double wait_seconds; /* time finish() spent waiting after backward ended */
} gt_dp_sync_stats;

/* zero: the ZeRO stage, 0 (all-reduce), 1 (reduce to the owners) or 2
 * (the model's gradients sharded: each layer's sent to its owners after
 * its backward, on every micro-batch; the model must be built with the
 * plan's parallel context, gt_dist_model_parallel). */
gt_status gt_dp_sync_create(gt_model *m, gt_comm *dp, size_t bucket_bytes, int zero, gt_dp_sync **out);
void gt_dp_sync_destroy(gt_dp_sync *s);
/* Before a micro-batch's backward: reduce = true on the step's last
 * micro-batch (the others only accumulate). overlap = false holds every
 * bucket back to finish() (for measuring what overlap buys). */
gt_status gt_dp_sync_begin(gt_dp_sync *s, bool reduce, bool overlap);
/* After the last backward: starts the buckets held back and waits for
 * every bucket. The gradients are then averaged (with ZeRO-1, in this
 * rank's shard). */
gt_status gt_dp_sync_finish(gt_dp_sync *s);
/* Calls fn(ctx, layer) on the caller's thread, on the step's last micro-
 * batch, once each layer's gradients are averaged, from the top layer
 * down: as buckets end during backward (seen whenever backward hands a
 * layer over) and, for the rest, in finish(). A layer is announced once,
 * after its own backward; fn's failure fails the step. With ZeRO-1 the
 * buckets are then all-reduced, not reduced to their owners, so that every
 * rank has its shard's part of each layer as the layer's buckets end. fn
 * NULL: none. */
gt_status gt_dp_sync_on_reduced(gt_dp_sync *s, gt_status (*fn)(void *ctx, int layer), void *ctx);
/* ZeRO-1: all-gathers every rank's updated parameter shard. */
gt_status gt_dp_sync_gather_params(gt_dp_sync *s);
/* The floats [lo, hi) of the flat buffer this rank updates. */
void gt_dp_sync_shard(const gt_dp_sync *s, size_t *lo, size_t *hi);
/* Whether the optimizer's work is sharded (stage >= 1), and the stage. */
bool gt_dp_sync_zero1(const gt_dp_sync *s);
int gt_dp_sync_stage(const gt_dp_sync *s);
const gt_dp_sync_stats *gt_dp_sync_last(const gt_dp_sync *s);

#endif
