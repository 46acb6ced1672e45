/* A linear map out = in @ W^T + b, W stored (out, in) as in PyTorch. */
#include <math.h>

#include "core/layers/layer_util.h"
#include "giant/layers.h"

enum { W, B_ };

static gt_status lin_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_linear_config)));
  const gt_linear_config *c = self->state;
  if (c->in <= 0 || c->out <= 0)
    return gt_errorf(GT_EINVAL, "linear needs in and out > 0, got %d and %d", c->in, c->out);
  self->in_dim = c->in;
  self->out_dim = c->out;
  gt_param_spec w = {.name = "w",
                     .ndim = 2,
                     .shape = {c->out, c->in},
                     .init = GT_INIT_NORMAL,
                     .std = 0.02f,
                     .decay = true,
                     .matmul_only = true};
  GT_TRY(gt_layer_declare_param(self, &w, NULL));
  if (c->bias) {
    gt_param_spec b = {.name = "b", .ndim = 1, .shape = {c->out}, .init = GT_INIT_ZEROS};
    GT_TRY(gt_layer_declare_param(self, &b, NULL));
  }
  return GT_OK;
}

static size_t lin_acts(const gt_layer *self, int B, int T) {
  (void)self;
  (void)B;
  (void)T;
  return 0;
}

static gt_status lin_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  (void)acts;
  const gt_linear_config *c = self->state;
  return gt_layer_linear_forward(self, ctx, out, in, W, c->bias ? gt_layer_param(self, B_) : NULL, ctx->B * ctx->T,
                                 c->in, c->out);
}

static gt_status lin_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                              float *acts) {
  (void)acts;
  const gt_linear_config *c = self->state;
  return gt_layer_linear_backward(self, ctx, din, c->bias ? gt_layer_grad(self, B_) : NULL, dout, in, W,
                                  ctx->B * ctx->T, c->in, c->out);
}

static double lin_flops(const gt_layer *self, int B, int T) {
  const gt_linear_config *c = self->state;
  return 2.0 * B * T * c->in * c->out;
}

const gt_layer_type gt_linear_layer = {
    .name = "linear",
    .build = lin_build,
    .acts_floats = lin_acts,
    .forward = lin_forward,
    .backward = lin_backward,
    .flops = lin_flops,
    .destroy = gt_layer_free_state,
};
