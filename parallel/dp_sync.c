/* Data-parallel gradient averaging, bucketed and overlapped with backward.
 *
 * Parameters are laid out in layer order, so walking the flat gradient
 * buffer from its end backwards follows the order in which backward
 * finishes them. Buckets are contiguous ranges cut at parameter boundaries.
 * A parameter's gradient is final once its declaring layer's backward has
 * run: a tied user (the LM head using the embedding's table) always comes
 * later in the model and so runs earlier in backward.
 *
 * The gradients are summed, not averaged: the trainer weighs each
 * replica's loss by its share of the step's tokens, so the sum is the mean
 * over every token of the step, also when replicas hold uneven shares.
 *
 * Layers reduced (gt_dp_sync_on_reduced): the communicator runs its
 * operations in the order they were started, so buckets end in order, and
 * once buckets [0, k) have ended every float from bucket k-1's start up is
 * final. Whenever backward hands a layer over, the buckets started so far
 * are tested (never waited for), and each layer whose floats all lie in
 * the final part is announced, from the top layer down; finish() waits for
 * the rest and announces the layers left. Everything happens on the
 * caller's thread.
 *
 * ZeRO-1 reduces each bucket to the rank whose shard holds it, in place,
 * as soon as the bucket is final, so that it overlaps backward as the
 * all-reduce does: a reduce-scatter cut bucket by bucket (buckets are cut
 * at the shards' edges too, so each has one owner), with its bytes, half
 * an all-reduce's. A reduce sums along the ring in the order a reduce-
 * scatter of the whole buffer sums the owner's block (gt_comm_reduce_to_start),
 * so the shard gets the same bits as from one reduce-scatter after
 * backward; the floats outside the shard keep this rank's own gradients,
 * which nothing reads. When layers are to be announced (an update layer by
 * layer), ZeRO-1 all-reduces the buckets instead: twice the bytes, every
 * rank gets every sum, and each updates the part of each layer its shard
 * holds. The sums are the same either way at dp = 2 (one addition); at
 * more replicas a float may be summed in another order.
 *
 * ZeRO-2 has no buckets: the model holds only its shard of the gradients
 * (core/model/zero.c) and hands each layer's to the sink below after the
 * layer's backward, on every micro-batch; the sink reduces each owner's
 * piece to its owner with the same reduce as ZeRO-1's buckets, and the
 * owner adds it to its shard. finish() flushes the model's last sends.
 *
 * ZeRO-3 adds the parameters: the model holds only its shard of them too
 * (core/model/zero3.c) and gathers each layer's before the layer runs,
 * through the source below: one broadcast from each owner of its piece,
 * on the same communicator, in the order every rank's forward and
 * backward ask for them. The optimizer updates the shard in place, so
 * nothing is gathered after the step. */
#include <stdlib.h>
#include <string.h>

#include "giant/engine/comm.h"
#include "parallel/dp_sync.h"
#include "giant/log.h"
#include "giant/engine/plan.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

#define SOURCE_SLOT0 3 /* the sink's slots 0..2, then the source's */
#define NSENDS 5

typedef struct bucket {
  size_t lo, hi; /* floats of the flat buffer */
  int min_layer; /* lowest declaring layer among its parameters */
  gt_comm_req *req;
} bucket;

struct gt_dp_sync {
  gt_model *m;
  gt_comm *dp;
  bool zero1, reduce, overlap;
  bucket *b;
  int nb, next;     /* buckets [0, next) have been started this step */
  int ended;        /* buckets [0, ended) have ended well */
  gt_status failed; /* a bucket that ended badly: nothing more is announced */
  gt_status (*reduced)(void *ctx, int layer);
  void *reduced_ctx;
  int next_layer;   /* the highest layer not yet announced this step */
  size_t *layer_lo; /* per layer: its lowest float (SIZE_MAX: none of its own) */
  size_t shard_lo, shard_hi;
  int stage; /* ZeRO stage: 0, 1, 2 (the gradients sharded, sent by the sink) or 3 (the parameters too) */
  struct {
    gt_comm_req **req;
    int n, cap;
  } sends[NSENDS]; /* ZeRO-2: the sink's requests in flight, per slot; ZeRO-3: the source's after them */
  gt_dp_sync_stats stats;
};

/* ZeRO-1 by reduces to each bucket's owner, not by all-reduces: unless
 * layers are announced as they are reduced. */
static bool scatters(const gt_dp_sync *s) { return s->zero1 && !s->reduced; }

static gt_status start_bucket(gt_dp_sync *s, bucket *b) {
  float *g = gt_model_grads(s->m) + b->lo;
  if (scatters(s)) {
    int owner = (int)(b->lo / (s->shard_hi - s->shard_lo)); /* buckets are cut at the shards' edges */
    return gt_comm_reduce_to_start(s->dp, g, g, b->hi - b->lo, GT_F32, GT_COMM_SUM, owner, &b->req);
  }
  return gt_comm_allreduce_start(s->dp, g, b->hi - b->lo, GT_F32, GT_COMM_SUM, &b->req);
}

/* Bucket i has ended with st: layers wholly above the final floats are
 * announced. */
static gt_status bucket_ended(gt_dp_sync *s, int i, gt_status st) {
  s->b[i].req = NULL;
  if (st != GT_OK) {
    if (s->failed == GT_OK) s->failed = st;
    return st;
  }
  if (s->failed != GT_OK || i != s->ended) return GT_OK;
  s->ended++;
  size_t final_lo = s->b[i].lo;
  while (s->reduced && s->next_layer >= 0 &&
         (s->layer_lo[s->next_layer] == SIZE_MAX || s->layer_lo[s->next_layer] >= final_lo))
    GT_TRY(s->reduced(s->reduced_ctx, s->next_layer--));
  return GT_OK;
}

/* The buckets started so far that have ended, in order, without waiting. */
static gt_status poll_buckets(gt_dp_sync *s) {
  while (s->ended < s->next && s->failed == GT_OK) {
    bool done = false;
    gt_status st = gt_comm_test(s->b[s->ended].req, &done);
    if (!done) return GT_OK;
    GT_TRY(bucket_ended(s, s->ended, st));
  }
  return GT_OK;
}

/* The model calls this after each layer's backward. */
static gt_status on_layer_done(void *ctx, int layer) {
  gt_dp_sync *s = ctx;
  if (!s->reduce || !s->overlap) return GT_OK;
  while (s->next < s->nb && s->b[s->next].min_layer >= layer) GT_TRY(start_bucket(s, &s->b[s->next++]));
  return s->reduced ? poll_buckets(s) : GT_OK;
}

gt_status gt_dp_sync_on_reduced(gt_dp_sync *s, gt_status (*fn)(void *ctx, int layer), void *ctx) {
  gt_model *m = s->m;
  if (fn && s->stage >= 2)
    return gt_errorf(GT_EUNSUPPORTED,
                     "ZeRO-%d does not announce layers as they are reduced (an update layer by layer): "
                     "use ZeRO-1",
                     s->stage);
  int nl = gt_model_num_layers(m);
  if (fn && !s->layer_lo) {
    if (!(s->layer_lo = malloc((size_t)(nl ? nl : 1) * sizeof *s->layer_lo)))
      return gt_errorf(GT_ENOMEM, "out of memory");
    for (int l = 0; l < nl; l++) s->layer_lo[l] = SIZE_MAX;
    for (int i = 0; i < gt_model_num_params(m); i++) {
      const gt_param *p = gt_model_param(m, i);
      if (p->tied_to >= 0 || !p->local || p->numel == 0) continue;
      if (p->offset < s->layer_lo[p->layer]) s->layer_lo[p->layer] = p->offset;
    }
  }
  s->reduced = fn;
  s->reduced_ctx = ctx;
  return GT_OK;
}

/* ZeRO-1: buckets cut again where a shard ends, so each has one owner. */
static void cut_at_shards(gt_dp_sync *s) {
  size_t S = s->shard_hi - s->shard_lo;
  for (int i = 0; S && i < s->nb; i++) {
    size_t edge = (s->b[i].hi - 1) / S * S; /* the start of the shard holding the bucket's last float */
    if (edge <= s->b[i].lo) continue;
    memmove(&s->b[i + 1], &s->b[i], (size_t)(s->nb - i) * sizeof *s->b);
    s->nb++;
    s->b[i].lo = edge; /* the upper part, first in backward order */
    s->b[i + 1].hi = edge;
  }
}

/* Room for one more request in flight of `slot`. */
static gt_status more_sends(gt_dp_sync *s, int slot) {
  if (s->sends[slot].n < s->sends[slot].cap) return GT_OK;
  int cap = s->sends[slot].cap ? 2 * s->sends[slot].cap : 16;
  gt_comm_req **r = realloc(s->sends[slot].req, (size_t)cap * sizeof *r);
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory for ZeRO's requests in flight");
  s->sends[slot].req = r;
  s->sends[slot].cap = cap;
  return GT_OK;
}

/* ZeRO-2's sink: the floats [lo, hi) at g go to their owners, one reduce
 * per owner's piece. */
static gt_status sink_send(void *ctx, int slot, float *g, size_t lo, size_t hi) {
  gt_dp_sync *s = ctx;
  size_t S = s->shard_hi - s->shard_lo;
  for (size_t a = lo; a < hi;) {
    size_t owner = a / S, b = (owner + 1) * S < hi ? (owner + 1) * S : hi;
    GT_TRY(more_sends(s, slot));
    float *p = g + (a - lo);
    GT_TRY(gt_comm_reduce_to_start(s->dp, p, p, b - a, GT_F32, GT_COMM_SUM, (int)owner,
                                   &s->sends[slot].req[s->sends[slot].n]));
    s->sends[slot].n++;
    a = b;
  }
  return GT_OK;
}

/* ZeRO-3's source: the floats [lo, hi) at dst come from their owners, one
 * broadcast per owner's piece. */
static gt_status source_gather(void *ctx, int slot, float *dst, size_t lo, size_t hi) {
  gt_dp_sync *s = ctx;
  if (slot < 0 || SOURCE_SLOT0 + slot >= NSENDS)
    return gt_errorf(GT_EINVAL, "ZeRO-3: gather slot %d out of range", slot);
  slot += SOURCE_SLOT0;
  size_t S = s->shard_hi - s->shard_lo;
  for (size_t a = lo; a < hi;) {
    size_t owner = a / S, b = (owner + 1) * S < hi ? (owner + 1) * S : hi;
    GT_TRY(more_sends(s, slot));
    GT_TRY(gt_comm_broadcast_start(s->dp, dst + (a - lo), b - a, GT_F32, (int)owner,
                                   &s->sends[slot].req[s->sends[slot].n]));
    s->sends[slot].n++;
    a = b;
  }
  return GT_OK;
}

static gt_status sink_wait(void *ctx, int slot) {
  gt_dp_sync *s = ctx;
  if (slot < 0 || slot >= NSENDS) return gt_errorf(GT_EINVAL, "ZeRO: request slot %d out of range", slot);
  gt_status first = GT_OK;
  for (int i = 0; i < s->sends[slot].n; i++) {
    gt_status st = gt_comm_wait(s->sends[slot].req[i], -1);
    if (st != GT_OK && first == GT_OK) first = st;
  }
  s->sends[slot].n = 0;
  return first;
}

static gt_status source_wait(void *ctx, int slot) {
  if (slot < 0 || SOURCE_SLOT0 + slot >= NSENDS)
    return gt_errorf(GT_EINVAL, "ZeRO-3: gather slot %d out of range", slot);
  return sink_wait(ctx, SOURCE_SLOT0 + slot);
}

static gt_status make_buckets(gt_dp_sync *s, size_t bucket_floats) {
  gt_model *m = s->m;
  int np = gt_model_num_params(m);
  s->b = calloc((size_t)np + (size_t)gt_comm_size(s->dp), sizeof *s->b);
  if (!s->b) return gt_errorf(GT_ENOMEM, "out of memory for gradient buckets");
  size_t end = gt_model_buffer_floats(m);
  bucket cur = {.hi = end, .min_layer = 1 << 30};
  for (int i = np - 1; i >= 0; i--) {
    const gt_param *p = gt_model_param(m, i);
    if (p->tied_to >= 0 || !p->local) continue;
    if (p->layer < cur.min_layer) cur.min_layer = p->layer;
    cur.lo = p->offset;
    if (cur.hi - cur.lo >= bucket_floats) {
      s->b[s->nb++] = cur;
      cur = (bucket){.hi = p->offset, .min_layer = 1 << 30};
    }
  }
  if (cur.hi > 0) {
    cur.lo = 0;
    if (cur.min_layer == 1 << 30) cur.min_layer = 0;
    s->b[s->nb++] = cur;
  }
  if (s->zero1) cut_at_shards(s);
  return GT_OK;
}

/* ZeRO-2: the model must hold the same shard, and take the sink. */
static gt_status attach_sink(gt_dp_sync *s) {
  size_t lo, hi;
  gt_model_grad_range(s->m, &lo, &hi);
  if (!gt_model_grads_sharded(s->m) || lo != s->shard_lo || hi != s->shard_hi)
    return gt_errorf(GT_EINVAL,
                     "ZeRO-%d: the model's gradients are not sharded as the data-parallel group's rank %d "
                     "needs; build the model with the plan's parallel context (gt_dist_model_parallel)",
                     s->stage, gt_comm_rank(s->dp));
  GT_TRY(gt_model_set_grad_sink(s->m, &(gt_grad_sink){.send = sink_send, .wait = sink_wait, .ctx = s}));
  if (s->stage < 3) return GT_OK;
  gt_model_param_range(s->m, &lo, &hi);
  if (!gt_model_params_sharded(s->m) || lo != s->shard_lo || hi != s->shard_hi)
    return gt_errorf(GT_EINVAL,
                     "ZeRO-3: the model's parameters are not sharded as the data-parallel group's rank %d "
                     "needs; build the model with the plan's parallel context (gt_dist_model_parallel)",
                     gt_comm_rank(s->dp));
  return gt_model_set_param_source(s->m, &(gt_param_source){.gather = source_gather, .wait = source_wait, .ctx = s});
}

gt_status gt_dp_sync_create(gt_model *m, gt_comm *dp, size_t bucket_bytes, int zero, gt_dp_sync **out) {
  *out = NULL;
  if (zero < 0 || zero > 3) return gt_errorf(GT_EINVAL, "ZeRO stage %d: the gradient sync runs stages 0 to 3", zero);
  gt_dp_sync *s = calloc(1, sizeof *s);
  if (!s) return gt_errorf(GT_ENOMEM, "out of memory creating gradient sync");
  s->m = m;
  s->dp = dp;
  s->stage = zero;
  s->zero1 = zero >= 1;
  bool zero1 = s->zero1;
  size_t n = gt_model_buffer_floats(m);
  int P = gt_comm_size(dp), r = gt_comm_rank(dp);
  if (zero1 && n % (size_t)P) {
    free(s);
    return gt_errorf(GT_EINVAL,
                     "ZeRO-%d needs the parameter buffer (%zu floats) padded to a multiple of dp=%d; "
                     "set the model's buffer_multiple from the plan",
                     zero, n, P);
  }
  size_t S = zero1 ? n / (size_t)P : n;
  s->shard_lo = zero1 ? S * (size_t)r : 0;
  s->shard_hi = zero1 ? s->shard_lo + S : n;
  gt_status st = GT_OK;
  if (zero >= 2 && P > 1)
    st = attach_sink(s);
  else
    st = make_buckets(s, bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1);
  if (st == GT_OK && !(zero >= 2 && P > 1)) st = gt_model_set_grad_hook(m, on_layer_done, s);
  if (st != GT_OK) {
    gt_dp_sync_destroy(s);
    return st;
  }
  *out = s;
  return GT_OK;
}

void gt_dp_sync_destroy(gt_dp_sync *s) {
  if (!s) return;
  for (int i = 0; i < s->next; i++)
    if (s->b[i].req) gt_comm_wait(s->b[i].req, -1);
  if (gt_model_params_sharded(s->m) && s->stage >= 3) gt_model_set_param_source(s->m, NULL);
  if (gt_model_grads_sharded(s->m) && s->stage >= 2) {
    gt_model_set_grad_sink(s->m, NULL); /* waits for the sends in flight */
  } else {
    gt_model_set_grad_hook(s->m, NULL, NULL);
  }
  for (int k = 0; k < NSENDS; k++) {
    (void)sink_wait(s, k);
    free(s->sends[k].req);
  }
  free(s->layer_lo);
  free(s->b);
  free(s);
}

gt_status gt_dp_sync_begin(gt_dp_sync *s, bool reduce, bool overlap) {
  s->reduce = reduce;
  s->overlap = overlap;
  s->next = s->ended = 0;
  s->failed = GT_OK;
  s->next_layer = gt_model_num_layers(s->m) - 1;
  if (reduce) memset(&s->stats, 0, sizeof s->stats);
  return GT_OK;
}

gt_status gt_dp_sync_finish(gt_dp_sync *s) {
  double t0 = gt_now();
  s->stats.buckets = s->nb;
  gt_status first = GT_OK;
  if (s->stage >= 2 && gt_model_grads_sharded(s->m)) {
    first = gt_model_flush_grads(s->m);
    s->stats.wait_seconds = gt_now() - t0;
    return first == GT_OK ? GT_OK : gt_error_context(first, "summing gradients to their shards' owners (ZeRO-2)");
  }
  while (s->next < s->nb) {
    gt_status st = start_bucket(s, &s->b[s->next++]);
    if (st != GT_OK && first == GT_OK) first = st;
  }
  for (int i = 0; i < s->nb; i++) {
    if (!s->b[i].req) continue;
    gt_status st = bucket_ended(s, i, gt_comm_wait(s->b[i].req, -1));
    if (st != GT_OK && first == GT_OK) first = gt_error_context(st, "averaging gradients over data parallelism");
  }
  s->stats.wait_seconds = gt_now() - t0;
  return first;
}

gt_status gt_dp_sync_gather_params(gt_dp_sync *s) {
  /* ZeRO-3 gathers each layer's parameters when it runs instead. */
  if (!s->zero1 || gt_model_params_sharded(s->m)) return GT_OK;
  size_t S = s->shard_hi - s->shard_lo;
  float *p = gt_model_params(s->m);
  gt_model_params_changed(s->m);
  return gt_comm_allgather(s->dp, p + s->shard_lo, p, S, GT_F32);
}

void gt_dp_sync_shard(const gt_dp_sync *s, size_t *lo, size_t *hi) {
  *lo = s->shard_lo;
  *hi = s->shard_hi;
}

bool gt_dp_sync_zero1(const gt_dp_sync *s) { return s->zero1; }
int gt_dp_sync_stage(const gt_dp_sync *s) { return s->stage; }
const gt_dp_sync_stats *gt_dp_sync_last(const gt_dp_sync *s) { return &s->stats; }
