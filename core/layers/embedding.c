/* Token embedding plus learned position embedding. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"

enum { WTE, WPE };

static gt_status emb_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_embedding_config)));
  const gt_embedding_config *c = self->state;
  if (c->vocab_size <= 0 || c->C <= 0 || (c->positional && c->T_max <= 0))
    return gt_errorf(GT_EINVAL, "embedding needs vocab_size, C (and T_max when positional) > 0; got %d, %d, %d",
                     c->vocab_size, c->C, c->T_max);
  self->in_dim = 0;
  self->out_dim = c->C;
  self->vocab = c->vocab_size;
  gt_param_spec wte = {.name = "wte", .ndim = 2, .shape = {c->vocab_size, c->C}, .init = GT_INIT_NORMAL,
                       .std = 0.02f, .decay = true};
  GT_TRY(gt_layer_declare_param(self, &wte, NULL));
  if (c->positional) {
    gt_param_spec wpe = {.name = "wpe", .ndim = 2, .shape = {c->T_max, c->C}, .init = GT_INIT_NORMAL,
                         .std = 0.01f, .decay = true};
    GT_TRY(gt_layer_declare_param(self, &wpe, NULL));
  }
  return GT_OK;
}

static size_t emb_acts(const gt_layer *self, int B, int T) {
  (void)self, (void)B, (void)T;
  return 0;
}

static gt_status emb_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out,
                             float *acts) {
  (void)in, (void)acts;
  const gt_embedding_config *c = self->state;
  if (c->positional && ctx->T > c->T_max)
    return gt_errorf(GT_EINVAL, "sequence of %d tokens is longer than the position table (%d)", ctx->T, c->T_max);
  const float *wpe = c->positional ? gt_layer_param(self, WPE) : NULL;
  return ctx->be->ops->embedding_forward(ctx->be, out, ctx->tokens, gt_layer_param(self, WTE), wpe, ctx->B,
                                         ctx->T, c->C);
}

static gt_status emb_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout,
                              float *din, float *acts) {
  (void)in, (void)din, (void)acts;
  const gt_embedding_config *c = self->state;
  float *dwpe = c->positional ? gt_layer_grad(self, WPE) : NULL;
  return ctx->be->ops->embedding_backward(ctx->be, gt_layer_grad(self, WTE), dwpe, dout, ctx->tokens, ctx->B,
                                          ctx->T, c->C);
}

const gt_layer_type gt_embedding_layer = {
    .name = "embedding",
    .build = emb_build,
    .acts_floats = emb_acts,
    .forward = emb_forward,
    .backward = emb_backward,
    .destroy = gt_layer_free_state,
};
