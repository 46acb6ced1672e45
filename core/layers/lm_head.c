/* The language-model head: logits over the vocabulary and softmax
 * cross-entropy. The probabilities are kept in the saved activations and
 * overwritten in place by their gradient in backward, so the (B,T,V) logits
 * cost one buffer.
 *
 * Split across a tensor-parallel group (vocabulary parallelism), rank r
 * computes the logits of its V/p vocabulary entries only; the softmax is
 * completed from per-row (max, sum of exponentials) pairs gathered from
 * every rank, so no rank ever holds a whole row of logits. The input
 * gradient is then a partial sum over ranks, completed by an all-reduce. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"
#include "core/backend_engine.h"
#include "giant/group.h"

static gt_status head_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_lm_head_config)));
  gt_lm_head_config *c = self->state;
  c->tie_to = NULL; /* the name is used only here, during build */
  const gt_lm_head_config *user = config;
  if (c->C <= 0 || c->vocab_size <= 0)
    return gt_errorf(GT_EINVAL, "lm_head needs C and vocab_size > 0, got %d and %d", c->C, c->vocab_size);
  int p = gt_layer_tp_size(self);
  if (c->vocab_size % p)
    return gt_errorf(GT_EINVAL, "tensor parallelism tp=%d does not divide the vocabulary size %d", p, c->vocab_size);
  self->in_dim = c->C;
  self->out_dim = 1;
  self->is_loss = true;
  self->vocab = c->vocab_size;
  if (user->tie_to) {
    GT_TRY(gt_layer_tie_param(self, "w", user->tie_to, "wte", NULL));
    GT_TRY(gt_layer_param_matmul_only(self, 0)); /* the embedding reads it as a table */
    const gt_param *w = gt_layer_param_info(self, 0);
    if (w->global_shape[0] != c->vocab_size || w->global_shape[1] != c->C || w->split_parts != p)
      return gt_errorf(GT_EINVAL,
                       "cannot tie lm_head (%d x %d, split %d ways) to %s.wte (%lld x %lld, split %d ways); "
                       "put both layers in the same split scope",
                       c->vocab_size, c->C, p, user->tie_to, (long long)w->global_shape[0],
                       (long long)w->global_shape[1], w->split_parts);
    return GT_OK;
  }
  gt_param_spec w = {.name = "w",
                     .ndim = 2,
                     .shape = {c->vocab_size, c->C},
                     .init = GT_INIT_NORMAL,
                     .std = 0.02f,
                     .decay = true,
                     .split = true,
                     .split_dim = 0,
                     .matmul_only = true};
  return gt_layer_declare_param(self, &w, NULL);
}

static int local_vocab(const gt_layer *self) {
  const gt_lm_head_config *c = self->state;
  return c->vocab_size / gt_layer_tp_size(self);
}

/* The probabilities; on sequence shards also the gathered input. */
static size_t head_acts(const gt_layer *self, int B, int T) {
  const gt_lm_head_config *c = self->state;
  size_t N = (size_t)B * (size_t)T;
  return N * (size_t)local_vocab(self) + (gt_layer_seq_parallel(self) ? N * (size_t)c->C : 0);
}

/* Split forward: the (max, sum) pairs of every rank, and the target logits. */
static size_t head_scratch(const gt_layer *self, int B, int T) {
  const gt_lm_head_config *c = self->state;
  size_t N = (size_t)B * (size_t)T;
  size_t stats = self->tp ? N * (2 + 2 * (size_t)self->tp->size + 1) : 0;
  size_t din = gt_layer_seq_parallel(self) ? N * (size_t)c->C : 0; /* whole input gradient before scattering */
  size_t row = self->tp ? (size_t)c->vocab_size : 0;               /* one gathered row, for sampling */
  size_t most = stats > din ? stats : din;
  return most > row ? most : row;
}

static gt_status head_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const gt_lm_head_config *c = self->state;
  int N = ctx->B * ctx->T, V = local_vocab(self), rows = 0;
  gt_backend *be = ctx->be;
  GT_TRY(gt_layer_rows(self, ctx, &rows));
  if (gt_layer_seq_parallel(self)) {
    float *whole = acts + (size_t)N * (size_t)V;
    GT_TRY(self->tp->allgather(self->tp, in, whole, (size_t)rows * c->C));
    in = whole;
  }
  GT_TRY(gt_layer_linear_forward(self, ctx, acts, in, 0, NULL, N, c->C, V));
  if (!self->tp) return gt_op_softmax_xent_forward(be, out, acts, acts, ctx->targets, N, V);
  gt_group *g = self->tp;
  float *stats = ctx->scratch, *all = stats + 2 * (size_t)N, *tlogit = all + 2 * (size_t)N * g->size;
  GT_TRY(gt_op_xent_slice_stats(be, stats, tlogit, acts, ctx->targets, g->rank * V, N, V));
  GT_TRY(g->allgather(g, stats, all, 2 * (size_t)N));
  GT_TRY(g->allreduce_sum(g, tlogit, (size_t)N));
  return gt_op_xent_slice_finish(be, out, acts, acts, all, g->size, tlogit, ctx->targets, c->vocab_size, N, V);
}

static gt_status head_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                               float *acts) {
  (void)dout;
  const gt_lm_head_config *c = self->state;
  int N = ctx->B * ctx->T, V = local_vocab(self);
  gt_backend *be = ctx->be;
  if (!self->tp) {
    GT_TRY(gt_op_softmax_xent_backward(be, acts, acts, ctx->targets, ctx->loss_scale, N, V));
  } else {
    GT_TRY(gt_op_softmax_xent_slice_backward(be, acts, acts, ctx->targets, self->tp->rank * V, ctx->loss_scale, N, V));
  }
  if (gt_layer_seq_parallel(self)) {
    /* The input gradient is a partial sum over ranks; sum and scatter it. */
    int rows = N / self->tp->size;
    GT_TRY(GT_ZERO(be, ctx->scratch, (size_t)N * c->C));
    GT_TRY(gt_layer_linear_backward(self, ctx, ctx->scratch, NULL, acts, acts + (size_t)N * (size_t)V, 0, N, c->C, V));
    return din ? self->tp->reduce_scatter_sum(self->tp, ctx->scratch, din, (size_t)rows * c->C) : GT_OK;
  }
  GT_TRY(gt_layer_linear_backward(self, ctx, din, NULL, acts, in, 0, N, c->C, V));
  /* din arrived zeroed, so it now holds exactly this rank's partial sum. */
  if (self->tp && din) GT_TRY(self->tp->allreduce_sum(self->tp, din, (size_t)N * (size_t)c->C));
  return GT_OK;
}

/* This rank's share of the work. */
static double head_flops(const gt_layer *self, int B, int T) {
  const gt_lm_head_config *c = self->state;
  return 2.0 * B * T * c->C * (double)local_vocab(self);
}

static gt_status head_probs(gt_layer *self, const gt_layer_ctx *ctx, float *acts, int b, int t, float *host_out) {
  int V = local_vocab(self);
  size_t row = (size_t)b * (size_t)ctx->T + (size_t)t;
  const float *src = acts + row * (size_t)V;
  if (!self->tp) return gt_backend_download(ctx->be, host_out, src, (size_t)V * sizeof(float));
  /* Gather the row's pieces from every rank into scratch, then download. */
  GT_TRY(self->tp->allgather(self->tp, src, ctx->scratch, (size_t)V));
  return gt_backend_download(ctx->be, host_out, ctx->scratch, (size_t)V * self->tp->size * sizeof(float));
}

const gt_layer_type gt_lm_head_layer = {
    .name = "lm_head",
    .build = head_build,
    .acts_floats = head_acts,
    .scratch_floats = head_scratch,
    .forward = head_forward,
    .backward = head_backward,
    .flops = head_flops,
    .probs = head_probs,
    .destroy = gt_layer_free_state,
    .supports_seq_parallel = true,
};
