/* The residual MLP layer: what a user writes to add a layer type.
 *
 * 1. build: read the config, set in_dim/out_dim, declare parameters.
 * 2. acts_floats / scratch_floats: how much memory forward and backward need.
 * 3. forward / backward: compose the backend's kernels. Backward kernels
 *    accumulate into gradients, so temporaries are zeroed first.
 * Because it only calls the gt_op_* functions, the same layer runs on every
 * backend. */
#include "residual_mlp.h"

#include <stdlib.h>
#include <string.h>

enum { FC1W, FC1B, FC2W, FC2B };

static gt_status build(gt_layer *self, const void *config) {
  const residual_mlp_config *c = config;
  if (!c || c->C <= 0 || c->hidden <= 0) return gt_errorf(GT_EINVAL, "residual_mlp needs C and hidden > 0");
  self->state = malloc(sizeof *c);
  if (!self->state) return gt_errorf(GT_ENOMEM, "out of memory");
  memcpy(self->state, c, sizeof *c);
  self->in_dim = self->out_dim = c->C;
  /* The weights are read only by gt_layer_linear_*: matmul_only lets an
   * offloaded bf16 model hold them in bf16 alone. */
  gt_param_spec specs[] = {
      {"fc1.w", 2, {c->hidden, c->C}, GT_INIT_NORMAL, 0.02f, true, false, 0, true},
      {"fc1.b", 1, {c->hidden}, GT_INIT_ZEROS, 0, false, false, 0, false},
      {"fc2.w", 2, {c->C, c->hidden}, GT_INIT_NORMAL, 0.02f, true, false, 0, true},
      {"fc2.b", 1, {c->C}, GT_INIT_ZEROS, 0, false, false, 0, false},
  };
  for (int i = 0; i < 4; i++) GT_TRY(gt_layer_declare_param(self, &specs[i], NULL));
  return GT_OK;
}

/* Saved for backward: the hidden pre-activation h and gelu(h). */
static size_t acts_floats(const gt_layer *self, int B, int T) {
  const residual_mlp_config *c = self->state;
  return 2 * (size_t)B * (size_t)T * (size_t)c->hidden;
}

/* Forward: the fc2 output before the residual add. Backward: two hidden grads. */
static size_t scratch_floats(const gt_layer *self, int B, int T) {
  const residual_mlp_config *c = self->state;
  size_t N = (size_t)B * (size_t)T;
  return N * (size_t)c->C + 2 * N * (size_t)c->hidden;
}

static gt_status forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const residual_mlp_config *c = self->state;
  gt_backend *be = ctx->be;
  int N = ctx->B * ctx->T;
  float *h = acts, *g = acts + (size_t)N * c->hidden, *y = ctx->scratch;
  /* The matrix products go through gt_layer_linear_*, which run them in the
   * trainer's precision (fp32, or bf16 with fp32 accumulation). */
  GT_TRY(gt_layer_linear_forward(self, ctx, h, in, FC1W, gt_layer_param(self, FC1B), N, c->C, c->hidden));
  GT_TRY(gt_op_gelu_forward(be, g, h, (size_t)N * c->hidden));
  GT_TRY(gt_layer_linear_forward(self, ctx, y, g, FC2W, gt_layer_param(self, FC2B), N, c->hidden, c->C));
  return gt_op_residual_forward(be, out, in, y, (size_t)N * c->C);
}

static gt_status backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                          float *acts) {
  const residual_mlp_config *c = self->state;
  gt_backend *be = ctx->be;
  int N = ctx->B * ctx->T;
  size_t NH = (size_t)N * c->hidden;
  float *h = acts, *g = acts + NH, *dg = ctx->scratch, *dh = dg + NH;
  GT_TRY(gt_backend_memset(be, dg, 0, NH * sizeof(float), NULL));
  GT_TRY(gt_layer_linear_backward(self, ctx, dg, gt_layer_grad(self, FC2B), dout, g, FC2W, N, c->hidden, c->C));
  GT_TRY(gt_backend_memset(be, dh, 0, NH * sizeof(float), NULL));
  GT_TRY(gt_op_gelu_backward(be, dh, h, dg, NH));
  if (din) {
    GT_TRY(gt_layer_linear_backward(self, ctx, din, gt_layer_grad(self, FC1B), dh, in, FC1W, N, c->C, c->hidden));
    return gt_op_residual_backward(be, din, NULL, dout, (size_t)N * c->C); /* the skip connection */
  }
  return gt_layer_linear_backward(self, ctx, NULL, gt_layer_grad(self, FC1B), dh, in, FC1W, N, c->C, c->hidden);
}

static double flops(const gt_layer *self, int B, int T) {
  const residual_mlp_config *c = self->state;
  return 4.0 * B * T * (double)c->C * c->hidden;
}

static void destroy(gt_layer *self) { free(self->state); }

const gt_layer_type residual_mlp_layer = {
    .name = "residual_mlp",
    .build = build,
    .acts_floats = acts_floats,
    .scratch_floats = scratch_floats,
    .forward = forward,
    .backward = backward,
    .flops = flops,
    .destroy = destroy,
};
