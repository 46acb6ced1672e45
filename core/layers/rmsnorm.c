/* RMSNorm over the feature dimension, with a learned scale (the Llama
 * family's norm): out = x / sqrt(mean(x^2) + eps) * weight. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"

#define RMS_EPS_DEFAULT 1e-5f

static gt_status rms_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_rmsnorm_config)));
  gt_rmsnorm_config *c = self->state;
  if (c->C <= 0) return gt_errorf(GT_EINVAL, "rmsnorm needs C > 0, got %d", c->C);
  if (c->eps < 0.0f) return gt_errorf(GT_EINVAL, "rmsnorm needs eps >= 0 (0 for 1e-5), got %g", (double)c->eps);
  if (c->eps == 0.0f) c->eps = RMS_EPS_DEFAULT;
  self->in_dim = self->out_dim = c->C;
  gt_param_spec w = {.name = "weight", .ndim = 1, .shape = {c->C}, .init = GT_INIT_ONES};
  return gt_layer_declare_param(self, &w, NULL);
}

/* rstd per row; backward reads the input, which the model keeps. */
static size_t rms_acts(const gt_layer *self, int B, int T) {
  (void)self;
  return (size_t)B * (size_t)T;
}

static gt_status rms_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const gt_rmsnorm_config *c = self->state;
  return gt_op_rmsnorm_forward(ctx->be, out, acts, in, gt_layer_param(self, 0), c->eps, ctx->B * ctx->T, c->C);
}

static gt_status rms_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                              float *acts) {
  const gt_rmsnorm_config *c = self->state;
  return gt_op_rmsnorm_backward(ctx->be, din, gt_layer_grad(self, 0), dout, in, gt_layer_param(self, 0), acts,
                                ctx->B * ctx->T, c->C);
}

const gt_layer_type gt_rmsnorm_layer = {
    .name = "rmsnorm",
    .build = rms_build,
    .acts_floats = rms_acts,
    .forward = rms_forward,
    .backward = rms_backward,
    .destroy = gt_layer_free_state,
};
