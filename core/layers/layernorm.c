/* LayerNorm over the feature dimension, with learned scale and shift. Under
 * sequence parallelism it normalises this rank's rows only. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"

enum { W, B_ };

static gt_status ln_build(gt_layer *self, const void *config) {
  GT_TRY(gt_layer_keep_config(self, config, sizeof(gt_layernorm_config)));
  const gt_layernorm_config *c = self->state;
  if (c->C <= 0) return gt_errorf(GT_EINVAL, "layernorm needs C > 0, got %d", c->C);
  self->in_dim = self->out_dim = c->C;
  gt_param_spec w = {.name = "w", .ndim = 1, .shape = {c->C}, .init = GT_INIT_ONES};
  gt_param_spec b = {.name = "b", .ndim = 1, .shape = {c->C}, .init = GT_INIT_ZEROS};
  GT_TRY(gt_layer_declare_param(self, &w, NULL));
  return gt_layer_declare_param(self, &b, NULL);
}

/* mean and rstd per row. */
static size_t ln_acts(const gt_layer *self, int B, int T) {
  (void)self;
  return 2 * (size_t)B * (size_t)T;
}

static gt_status ln_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const gt_layernorm_config *c = self->state;
  int N = 0;
  GT_TRY(gt_layer_rows(self, ctx, &N));
  return gt_op_layernorm_forward(ctx->be, out, acts, acts + N, in, gt_layer_param(self, W), gt_layer_param(self, B_), N,
                                 c->C);
}

static gt_status ln_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                             float *acts) {
  const gt_layernorm_config *c = self->state;
  int N = 0;
  GT_TRY(gt_layer_rows(self, ctx, &N));
  return gt_layernorm_backward_shard(self, ctx, din, gt_layer_grad(self, W), gt_layer_grad(self, B_), dout, in,
                                     gt_layer_param(self, W), acts, acts + N, N, c->C, ctx->scratch);
}

static size_t ln_scratch(const gt_layer *self, int B, int T) {
  (void)B;
  (void)T;
  const gt_layernorm_config *c = self->state;
  return 2 * (size_t)c->C;
}

const gt_layer_type gt_layernorm_layer = {
    .name = "layernorm",
    .build = ln_build,
    .acts_floats = ln_acts,
    .forward = ln_forward,
    .backward = ln_backward,
    .scratch_floats = ln_scratch,
    .destroy = gt_layer_free_state,
    .supports_seq_parallel = true,
};
