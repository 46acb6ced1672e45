/* Token embedding plus learned position embedding.
 *
 * Split across a tensor-parallel group (vocabulary parallelism), rank r
 * holds rows [r*V/p, (r+1)*V/p) of the token table: each rank looks up the
 * tokens it holds (zero for the rest), one rank adds the position
 * embedding, and an all-reduce sums the parts. No rank holds the whole
 * table. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"
#include "core/backend_engine.h"

enum { WTE, WPE };

static gt_status emb_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_embedding_config)));
  const gt_embedding_config *c = self->state;
  if (c->vocab_size <= 0 || c->C <= 0 || (c->positional && c->T_max <= 0))
    return gt_errorf(GT_EINVAL, "embedding needs vocab_size, C (and T_max when positional) > 0; got %d, %d, %d",
                     c->vocab_size, c->C, c->T_max);
  int p = gt_layer_tp_size(self);
  if (c->vocab_size % p)
    return gt_errorf(GT_EINVAL, "tensor parallelism tp=%d does not divide the vocabulary size %d", p, c->vocab_size);
  self->in_dim = 0;
  self->out_dim = c->C;
  self->vocab = c->vocab_size;
  gt_param_spec wte = {.name = "wte",
                       .ndim = 2,
                       .shape = {c->vocab_size, c->C},
                       .init = GT_INIT_NORMAL,
                       .std = 0.02f,
                       .decay = true,
                       .split = true,
                       .split_dim = 0};
  GT_TRY(gt_layer_declare_param(self, &wte, NULL));
  if (c->positional) {
    gt_param_spec wpe = {
        .name = "wpe", .ndim = 2, .shape = {c->T_max, c->C}, .init = GT_INIT_NORMAL, .std = 0.01f, .decay = true};
    GT_TRY(gt_layer_declare_param(self, &wpe, NULL));
  }
  return GT_OK;
}

static size_t emb_acts(const gt_layer *self, int B, int T) {
  (void)self;
  (void)B;
  (void)T;
  return 0;
}

static gt_status emb_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  (void)in;
  (void)acts;
  const gt_embedding_config *c = self->state;
  if (c->positional && ctx->T > c->T_max)
    return gt_errorf(GT_EINVAL, "sequence of %d tokens is longer than the position table (%d)", ctx->T, c->T_max);
  const float *wpe = c->positional ? gt_layer_param(self, WPE) : NULL;
  gt_backend *be = ctx->be;
  if (!self->tp)
    return gt_op_embedding_forward(be, out, ctx->tokens, gt_layer_param(self, WTE), wpe, ctx->B, ctx->T, c->C);
  int V = c->vocab_size / self->tp->size, v0 = self->tp->rank * V, rows = 0;
  GT_TRY(gt_layer_rows(self, ctx, &rows));
  size_t NC = (size_t)ctx->B * (size_t)ctx->T * (size_t)c->C;
  /* On sequence shards the parts are summed and scattered in one step. */
  float *part = gt_layer_seq_parallel(self) ? ctx->scratch : out;
  GT_TRY(gt_op_embedding_slice_forward(be, part, ctx->tokens, gt_layer_param(self, WTE), v0, V,
                                       self->tp->rank == 0 ? wpe : NULL, ctx->B, ctx->T, c->C));
  if (gt_layer_seq_parallel(self)) return self->tp->reduce_scatter_sum(self->tp, part, out, (size_t)rows * c->C);
  return self->tp->allreduce_sum(self->tp, out, NC);
}

static gt_status emb_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                              float *acts) {
  (void)in;
  (void)din;
  (void)acts;
  const gt_embedding_config *c = self->state;
  float *dwpe = c->positional ? gt_layer_grad(self, WPE) : NULL;
  gt_backend *be = ctx->be;
  if (!self->tp)
    return gt_op_embedding_backward(be, gt_layer_grad(self, WTE), dwpe, dout, ctx->tokens, ctx->B, ctx->T, c->C);
  /* dout is whole on every rank, so the position gradient comes out the same
   * everywhere, as the replicated table needs. */
  int V = c->vocab_size / self->tp->size, v0 = self->tp->rank * V, rows = 0;
  GT_TRY(gt_layer_rows(self, ctx, &rows));
  if (gt_layer_seq_parallel(self)) {
    GT_TRY(self->tp->allgather(self->tp, dout, ctx->scratch, (size_t)rows * c->C));
    dout = ctx->scratch;
  }
  return gt_op_embedding_slice_backward(be, gt_layer_grad(self, WTE), dwpe, dout, ctx->tokens, v0, V, ctx->B, ctx->T,
                                        c->C);
}

/* Sequence shards: the whole (N, C) output before it is scattered. */
static size_t emb_scratch(const gt_layer *self, int B, int T) {
  const gt_embedding_config *c = self->state;
  return gt_layer_seq_parallel(self) ? (size_t)B * (size_t)T * (size_t)c->C : 0;
}

const gt_layer_type gt_embedding_layer = {
    .name = "embedding",
    .build = emb_build,
    .acts_floats = emb_acts,
    .forward = emb_forward,
    .backward = emb_backward,
    .scratch_floats = emb_scratch,
    .destroy = gt_layer_free_state,
    .supports_seq_parallel = true,
};
