/* The language-model head: logits over the vocabulary and softmax
 * cross-entropy. The probabilities are kept in the saved activations and
 * overwritten in place by their gradient in backward, so the (B,T,V) logits
 * cost one buffer. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"

static gt_status head_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_lm_head_config)));
  gt_lm_head_config *c = self->state;
  c->tie_to = NULL; /* the name is used only here, during build */
  const gt_lm_head_config *user = config;
  if (c->C <= 0 || c->vocab_size <= 0)
    return gt_errorf(GT_EINVAL, "lm_head needs C and vocab_size > 0, got %d and %d", c->C, c->vocab_size);
  self->in_dim = c->C;
  self->out_dim = 1;
  self->is_loss = true;
  self->vocab = c->vocab_size;
  if (user->tie_to) {
    GT_TRY(gt_layer_tie_param(self, "w", user->tie_to, "wte", NULL));
    const gt_param *p = gt_layer_param_info(self, 0);
    if (p->shape[0] != c->vocab_size || p->shape[1] != c->C)
      return gt_errorf(GT_EINVAL, "cannot tie lm_head (%d x %d) to %s.wte of shape %lld x %lld", c->vocab_size,
                       c->C, user->tie_to, (long long)p->shape[0], (long long)p->shape[1]);
    return GT_OK;
  }
  gt_param_spec w = {.name = "w", .ndim = 2, .shape = {c->vocab_size, c->C}, .init = GT_INIT_NORMAL,
                     .std = 0.02f, .decay = true};
  return gt_layer_declare_param(self, &w, NULL);
}

static size_t head_acts(const gt_layer *self, int B, int T) {
  const gt_lm_head_config *c = self->state;
  return (size_t)B * (size_t)T * (size_t)c->vocab_size;
}

static gt_status head_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const gt_lm_head_config *c = self->state;
  int N = ctx->B * ctx->T;
  gt_backend *be = ctx->be;
  GT_TRY(be->ops->linear_forward(be, acts, in, gt_layer_param(self, 0), NULL, N, c->C, c->vocab_size));
  return be->ops->softmax_xent_forward(be, out, acts, acts, ctx->targets, N, c->vocab_size);
}

static gt_status head_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout,
                               float *din, float *acts) {
  (void)dout;
  const gt_lm_head_config *c = self->state;
  int N = ctx->B * ctx->T;
  gt_backend *be = ctx->be;
  GT_TRY(be->ops->softmax_xent_backward(be, acts, acts, ctx->targets, ctx->loss_scale, N, c->vocab_size));
  return be->ops->linear_backward(be, din, gt_layer_grad(self, 0), NULL, acts, in, gt_layer_param(self, 0), N,
                                  c->C, c->vocab_size);
}

static double head_flops(const gt_layer *self, int B, int T) {
  const gt_lm_head_config *c = self->state;
  return 2.0 * B * T * c->C * (double)c->vocab_size;
}

static gt_status head_probs(gt_layer *self, const gt_layer_ctx *ctx, float *acts, int b, int t, float *host_out) {
  const gt_lm_head_config *c = self->state;
  size_t row = (size_t)b * (size_t)ctx->T + (size_t)t;
  return gt_backend_download(ctx->be, host_out, acts + row * (size_t)c->vocab_size,
                             (size_t)c->vocab_size * sizeof(float));
}

const gt_layer_type gt_lm_head_layer = {
    .name = "lm_head",
    .build = head_build,
    .acts_floats = head_acts,
    .forward = head_forward,
    .backward = head_backward,
    .flops = head_flops,
    .probs = head_probs,
    .destroy = gt_layer_free_state,
};
