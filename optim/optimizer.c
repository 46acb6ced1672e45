/* AdamW and SGD with momentum over the model's flat parameter buffer. */
#include <stdlib.h>
#include <string.h>

#include "giant/optim.h"

struct gt_optimizer {
  gt_model *m;
  gt_optim_config cfg;
  float *state[2]; /* AdamW: m, v. SGD: momentum (state[1] unused). Index 0 = float lo. */
  size_t lo, hi;   /* the floats of the flat buffer this optimizer owns */
  int steps;
};

gt_optim_config gt_optim_defaults(gt_optim_kind kind) {
  gt_optim_config c = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .momentum = 0.9f,
                       .nesterov = false, .weight_decay = kind == GT_OPTIM_ADAMW ? 0.1f : 0.0f};
  return c;
}

gt_status gt_optim_parse(const char *name, gt_optim_kind *kind) {
  if (!strcmp(name, "adamw")) *kind = GT_OPTIM_ADAMW;
  else if (!strcmp(name, "sgd")) *kind = GT_OPTIM_SGD;
  else return gt_errorf(GT_EINVAL, "unknown optimizer '%s': use adamw or sgd", name);
  return GT_OK;
}

gt_status gt_optimizer_create(gt_model *m, const gt_optim_config *cfg, gt_optimizer **out) {
  return gt_optimizer_create_range(m, cfg, 0, gt_model_buffer_floats(m), out);
}

gt_status gt_optimizer_create_range(gt_model *m, const gt_optim_config *cfg, size_t lo, size_t hi,
                                    gt_optimizer **out) {
  *out = NULL;
  if (lo > hi || hi > gt_model_buffer_floats(m))
    return gt_errorf(GT_EINVAL, "optimizer range [%zu, %zu) is outside the %zu-float parameter buffer", lo, hi,
                     gt_model_buffer_floats(m));
  if (cfg->kind != GT_OPTIM_ADAMW && cfg->kind != GT_OPTIM_SGD)
    return gt_errorf(GT_EINVAL, "unknown optimizer kind %d", (int)cfg->kind);
  if (cfg->kind == GT_OPTIM_ADAMW &&
      (cfg->beta1 < 0 || cfg->beta1 >= 1 || cfg->beta2 < 0 || cfg->beta2 >= 1 || cfg->eps <= 0))
    return gt_errorf(GT_EINVAL, "AdamW needs 0 <= beta1, beta2 < 1 and eps > 0 (got %g, %g, %g)", cfg->beta1,
                     cfg->beta2, cfg->eps);
  if (cfg->weight_decay < 0) return gt_errorf(GT_EINVAL, "weight decay must be >= 0, got %g", cfg->weight_decay);
  gt_optimizer *o = calloc(1, sizeof *o);
  if (!o) return gt_errorf(GT_ENOMEM, "out of memory creating an optimizer");
  o->m = m;
  o->cfg = *cfg;
  o->lo = lo;
  o->hi = hi;
  gt_backend *be = gt_model_state_backend(m);
  size_t bytes = (hi - lo ? hi - lo : 1) * sizeof(float);
  int nstate = cfg->kind == GT_OPTIM_ADAMW ? 2 : 1;
  for (int i = 0; i < nstate; i++) {
    gt_status s = gt_model_state_alloc(m, bytes, (void **)&o->state[i]);
    if (s == GT_OK) s = gt_backend_memset(be, o->state[i], 0, bytes, NULL);
    if (s != GT_OK) {
      gt_optimizer_destroy(o);
      return gt_error_context(s, "optimizer state");
    }
  }
  *out = o;
  return GT_OK;
}

void gt_optimizer_destroy(gt_optimizer *o) {
  if (!o) return;
  for (int i = 0; i < 2; i++) gt_model_state_free(o->m, o->state[i]);
  free(o);
}

int gt_optimizer_steps(const gt_optimizer *o) { return o->steps; }
int gt_optimizer_num_states(const gt_optimizer *o) { return o->cfg.kind == GT_OPTIM_ADAMW ? 2 : 1; }
float *gt_optimizer_state(gt_optimizer *o, int k) { return k >= 0 && k < 2 ? o->state[k] : NULL; }
void gt_optimizer_range(const gt_optimizer *o, size_t *lo, size_t *hi) { *lo = o->lo, *hi = o->hi; }
const gt_optim_config *gt_optimizer_get_config(const gt_optimizer *o) { return &o->cfg; }
void gt_optimizer_set_steps(gt_optimizer *o, int steps) { o->steps = steps; }

/* Per parameter, because weight decay applies to some and not others;
 * tied parameters share storage and are updated once, by their owner.
 * Only the part of each parameter inside [lo, hi) is this optimizer's. */
static gt_status update_param(gt_optimizer *o, int i, float lr, float grad_scale, const float *grads,
                              uint16_t *bf16) {
  gt_model *m = o->m;
  gt_backend *be = gt_model_state_backend(m);
  float *p = gt_model_params(m);
  const float *g = grads ? grads : gt_model_grads(m);
  const gt_param *pi = gt_model_param(m, i);
  if (pi->tied_to >= 0) return GT_OK;
  size_t a = pi->offset > o->lo ? pi->offset : o->lo;
  size_t b = pi->offset + pi->numel < o->hi ? pi->offset + pi->numel : o->hi;
  if (a >= b) return GT_OK;
  float wd = pi->decay ? o->cfg.weight_decay : 0.0f;
  float *m0 = o->state[0] + (a - o->lo), *m1 = o->state[1] ? o->state[1] + (a - o->lo) : NULL;
  if (o->cfg.kind == GT_OPTIM_ADAMW) {
    gt_adamw_args ar = {.lr = lr, .beta1 = o->cfg.beta1, .beta2 = o->cfg.beta2, .eps = o->cfg.eps,
                        .weight_decay = wd, .step = o->steps, .grad_scale = grad_scale};
    if (bf16) return gt_op_adamw_update_bf16(be, p + a, g + a, m0, m1, bf16 + a, b - a, &ar);
    return gt_op_adamw_update(be, p + a, g + a, m0, m1, b - a, &ar);
  }
  gt_sgd_args ar = {.lr = lr, .momentum = o->cfg.momentum, .weight_decay = wd, .nesterov = o->cfg.nesterov,
                    .grad_scale = grad_scale};
  return gt_op_sgd_update(be, p + a, g + a, m0, b - a, &ar);
}

gt_status gt_optimizer_step(gt_optimizer *o, float lr, float grad_scale) {
  return gt_optimizer_step_from(o, lr, grad_scale, NULL);
}

gt_status gt_optimizer_step_from(gt_optimizer *o, float lr, float grad_scale, const float *grads) {
  gt_model *m = o->m;
  o->steps++;
  gt_model_params_changed(m);
  /* Mixed precision: AdamW writes the bf16 twin in the same pass, which
   * saves the conversion over the whole buffer before the next forward,
   * when this optimizer updates all of it (a ZeRO-1 shard does not: the
   * gathered shards change after it). Every backend with mixed precision
   * has the operation. */
  uint16_t *bf16 = gt_model_params_bf16(m);
  bool whole = o->lo == 0 && o->hi == gt_model_buffer_floats(m);
  if (!whole || o->cfg.kind != GT_OPTIM_ADAMW) bf16 = NULL;
  for (int i = 0; i < gt_model_num_params(m); i++) GT_TRY(update_param(o, i, lr, grad_scale, grads, bf16));
  if (bf16) gt_model_bf16_written(m);
  return GT_OK;
}

void gt_optimizer_begin_step(gt_optimizer *o) { o->steps++; }

gt_status gt_optimizer_step_layer(gt_optimizer *o, int layer, float lr, float grad_scale) {
  return gt_optimizer_step_layer_from(o, layer, lr, grad_scale, NULL);
}

gt_status gt_optimizer_step_layer_from(gt_optimizer *o, int layer, float lr, float grad_scale, const float *grads) {
  gt_model *m = o->m;
  if (layer < 0 || layer >= gt_model_num_layers(m))
    return gt_errorf(GT_EINVAL, "layer %d is outside the model's %d layers", layer, gt_model_num_layers(m));
  const gt_layer *l = gt_model_layer(m, layer);
  gt_model_layer_params_changed(m, layer);
  for (int i = l->first_param; i < l->first_param + l->nparams; i++)
    GT_TRY(update_param(o, i, lr, grad_scale, grads, NULL));
  return GT_OK;
}
