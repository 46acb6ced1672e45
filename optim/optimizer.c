/* AdamW and SGD with momentum over the model's flat parameter buffer. */
#include <stdlib.h>
#include <string.h>

#include "giant/optim.h"
#include "optim/disk_state.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "optim/optimizer_engine.h"

#define DEFAULT_STAGE_BYTES ((size_t)64 << 20)

struct gt_optimizer {
  gt_model *m;
  gt_optim_config cfg;
  float *state[2];  /* AdamW: m, v. SGD: momentum (state[1] unused). Index 0 = float lo. */
  disk_state *disk; /* instead, with cfg.state_dir */
  char *state_dir;  /* cfg.state_dir points here */
  size_t lo, hi;    /* the floats of the flat buffer this optimizer owns */
  int steps;
};

gt_optim_config gt_optim_defaults(gt_optim_kind kind) {
  gt_optim_config c = {.kind = kind,
                       .beta1 = 0.9f,
                       .beta2 = 0.95f,
                       .eps = 1e-8f,
                       .momentum = 0.9f,
                       .nesterov = false,
                       .weight_decay = kind == GT_OPTIM_ADAMW ? 0.1f : 0.0f};
  return c;
}

gt_status gt_optim_parse(const char *name, gt_optim_kind *kind) {
  if (!strcmp(name, "adamw"))
    *kind = GT_OPTIM_ADAMW;
  else if (!strcmp(name, "sgd"))
    *kind = GT_OPTIM_SGD;
  else
    return gt_errorf(GT_EINVAL, "unknown optimizer '%s': use adamw or sgd", name);
  return GT_OK;
}

/* Host memory to stage the state on disk: as configured, else 64 MiB, but
 * no more than half of what the host budget leaves (the rest is for what
 * else needs host memory: checkpoint buffers, a ZeRO shard). */
static size_t stage_bytes(gt_model *m, const gt_optim_config *cfg) {
  if (cfg->state_stage_bytes) return cfg->state_stage_bytes;
  size_t b = DEFAULT_STAGE_BYTES;
  gt_device_mem h = gt_backend_host_mem(gt_model_backend(m));
  size_t left = h.limit > h.in_use ? h.limit - h.in_use : 0;
  if (h.limit && b > left / 2) b = left / 2;
  return b;
}

gt_status gt_optimizer_create(gt_model *m, const gt_optim_config *cfg, gt_optimizer **out) {
  return gt_optimizer_create_range(m, cfg, 0, gt_model_buffer_floats(m), out);
}

gt_status gt_optimizer_create_range(gt_model *m, const gt_optim_config *cfg, size_t lo, size_t hi, gt_optimizer **out) {
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
  gt_backend *be = gt_model_state_backend(m);
  if (cfg->state_dir && gt_backend_kind(be) != GT_DEVICE_CPU)
    return gt_errorf(GT_EUNSUPPORTED,
                     "the optimizer state on disk (%s) is updated on the host, and this model's "
                     "state is on %s: offload the model (gt_model_config.offload_window)",
                     cfg->state_dir, gt_backend_name(be));
  gt_optimizer *o = calloc(1, sizeof *o);
  if (!o) return gt_errorf(GT_ENOMEM, "out of memory creating an optimizer");
  o->m = m;
  o->cfg = *cfg;
  o->lo = lo;
  o->hi = hi;
  int nstate = cfg->kind == GT_OPTIM_ADAMW ? 2 : 1;
  if (cfg->state_dir) {
    gt_status s = (o->state_dir = strdup(cfg->state_dir)) ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
    o->cfg.state_dir = o->state_dir;
    if (s == GT_OK)
      s = disk_state_open(gt_model_backend(m), cfg->state_dir, nstate, hi - lo, stage_bytes(m, cfg), &o->disk);
    if (s != GT_OK) {
      gt_optimizer_destroy(o);
      return s;
    }
    *out = o;
    return GT_OK;
  }
  size_t bytes = (hi - lo ? hi - lo : 1) * sizeof(float);
  for (int i = 0; i < nstate; i++) {
    gt_status s = gt_model_state_alloc_as(m, GT_MEM_OPTIMIZER, bytes, (void **)&o->state[i]);
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
  disk_state_close(o->disk);
  free(o->state_dir);
  free(o);
}

int gt_optimizer_steps(const gt_optimizer *o) { return o->steps; }
int gt_optimizer_num_states(const gt_optimizer *o) { return o->cfg.kind == GT_OPTIM_ADAMW ? 2 : 1; }
float *gt_optimizer_state(gt_optimizer *o, int k) { return k >= 0 && k < 2 ? o->state[k] : NULL; }
bool gt_optimizer_on_disk(const gt_optimizer *o) { return o->disk != NULL; }

static gt_status check_state_range(const gt_optimizer *o, int k, size_t at, size_t n) {
  if (k < 0 || k >= gt_optimizer_num_states(o) || at > o->hi - o->lo || n > o->hi - o->lo - at)
    return gt_errorf(GT_EINVAL, "optimizer state %d, floats [%zu, %zu): outside its %d x %zu floats", k, at, at + n,
                     gt_optimizer_num_states(o), o->hi - o->lo);
  return GT_OK;
}

gt_status gt_optimizer_read_state(gt_optimizer *o, int k, size_t at, size_t n, float *dst) {
  GT_TRY(check_state_range(o, k, at, n));
  if (o->disk) return disk_state_read(o->disk, k, at, n, dst);
  return gt_backend_download(gt_model_state_backend(o->m), dst, o->state[k] + at, n * sizeof(float));
}

gt_status gt_optimizer_write_state(gt_optimizer *o, int k, size_t at, size_t n, const float *src) {
  GT_TRY(check_state_range(o, k, at, n));
  if (o->disk) return disk_state_write(o->disk, k, at, n, src);
  return gt_backend_upload(gt_model_state_backend(o->m), o->state[k] + at, src, n * sizeof(float));
}

static gt_status check_on_disk(const gt_optimizer *o) {
  return o->disk ? GT_OK : gt_errorf(GT_EINVAL, "the optimizer's state is in memory, not on disk");
}

gt_status gt_optimizer_state_scratch(gt_optimizer *o, int *fd) {
  *fd = -1;
  GT_TRY(check_on_disk(o));
  return disk_state_scratch(o->disk, fd);
}

gt_status gt_optimizer_copy_state_out(gt_optimizer *o, int fd) {
  GT_TRY(check_on_disk(o));
  return disk_state_copy_out(o->disk, fd);
}

gt_status gt_optimizer_copy_state_in(gt_optimizer *o, int fd) {
  GT_TRY(check_on_disk(o));
  return disk_state_copy_in(o->disk, fd);
}

void gt_optimizer_range(const gt_optimizer *o, size_t *lo, size_t *hi) {
  *lo = o->lo;
  *hi = o->hi;
}
const gt_optim_config *gt_optimizer_get_config(const gt_optimizer *o) { return &o->cfg; }
void gt_optimizer_set_steps(gt_optimizer *o, int steps) { o->steps = steps; }

/* What one update applies: the step's numbers and where its inputs are. */
typedef struct update {
  gt_optimizer *o;
  float lr, grad_scale;
  const float *grads; /* NULL: the model's */
  uint16_t *bf16;     /* the bf16 twin to write in the same pass, or NULL */
  int first, last;    /* the parameters it covers: [first, last) */
} update;

/* Per parameter, because weight decay applies to some and not others;
 * tied parameters share storage and are updated once, by their owner.
 * Only the floats [lo, hi) of the flat buffer are updated (this
 * optimizer's share, or a chunk of it staged from disk); their state is
 * at m0 and m1, float lo's first. */
static gt_status update_param(const update *u, int i, size_t lo, size_t hi, float *m0, float *m1) {
  gt_optimizer *o = u->o;
  gt_model *m = o->m;
  gt_backend *be = gt_model_state_backend(m);
  float lr = u->lr, grad_scale = u->grad_scale;
  uint16_t *bf16 = u->bf16;
  const gt_param *pi = gt_model_param(m, i);
  if (pi->tied_to >= 0) return GT_OK;
  size_t a = pi->offset > lo ? pi->offset : lo;
  size_t b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
  if (a >= b) return GT_OK;
  /* The gradients given (a whole buffer), or the model's: sharded under
   * ZeRO-2, where the model holds those of this optimizer's range. */
  const float *g = u->grads ? u->grads + a : gt_model_grad_at(m, a);
  if (!g)
    return gt_errorf(GT_ESTATE, "the gradients of floats [%zu, %zu) are not on this rank (sharded elsewhere)", a, b);
  /* The parameters too are sharded under ZeRO-3: the model holds this
   * optimizer's range. */
  float *p = gt_model_param_at(m, a);
  if (!p)
    return gt_errorf(GT_ESTATE, "the parameters of floats [%zu, %zu) are not on this rank (sharded elsewhere)", a, b);
  float wd = pi->decay ? o->cfg.weight_decay : 0.0f;
  m0 += a - lo;
  if (m1) m1 += a - lo;
  if (o->cfg.kind == GT_OPTIM_ADAMW) {
    gt_adamw_args ar = {.lr = lr,
                        .beta1 = o->cfg.beta1,
                        .beta2 = o->cfg.beta2,
                        .eps = o->cfg.eps,
                        .weight_decay = wd,
                        .step = o->steps,
                        .grad_scale = grad_scale};
    if (bf16) return gt_op_adamw_update_bf16(be, p, g, m0, m1, bf16 + a, b - a, &ar);
    return gt_op_adamw_update(be, p, g, m0, m1, b - a, &ar);
  }
  gt_sgd_args ar = {
      .lr = lr, .momentum = o->cfg.momentum, .weight_decay = wd, .nesterov = o->cfg.nesterov, .grad_scale = grad_scale};
  return gt_op_sgd_update(be, p, g, m0, b - a, &ar);
}

/* A chunk of the state on disk, staged: the parameters that meet it. */
static gt_status update_chunk(void *ctx, size_t at, size_t n, float *const *state) {
  const update *u = ctx;
  size_t lo = u->o->lo + at;
  for (int i = u->first; i < u->last; i++)
    GT_TRY(update_param(u, i, lo, lo + n, state[0], u->o->cfg.kind == GT_OPTIM_ADAMW ? state[1] : NULL));
  return GT_OK;
}

/* Updates parameters [first, last): in memory, or streamed from disk over
 * the floats they span (a layer's parameters are laid out together). */
static gt_status apply(update *u) {
  gt_optimizer *o = u->o;
  gt_model *m = o->m;
  if (!o->disk) {
    for (int i = u->first; i < u->last; i++) GT_TRY(update_param(u, i, o->lo, o->hi, o->state[0], o->state[1]));
    return GT_OK;
  }
  size_t a = o->hi, b = o->lo;
  for (int i = u->first; i < u->last; i++) {
    const gt_param *pi = gt_model_param(m, i);
    if (pi->tied_to >= 0 || pi->numel == 0) continue;
    if (pi->offset < a) a = pi->offset;
    if (pi->offset + pi->numel > b) b = pi->offset + pi->numel;
  }
  if (a < o->lo) a = o->lo;
  if (b > o->hi) b = o->hi;
  if (a >= b) return GT_OK;
  return disk_state_stream(o->disk, a - o->lo, b - o->lo, update_chunk, u);
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
  update u = {.o = o,
              .lr = lr,
              .grad_scale = grad_scale,
              .grads = grads,
              .bf16 = bf16,
              .first = 0,
              .last = gt_model_num_params(m)};
  GT_TRY(apply(&u));
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
  /* Offloaded under bf16, the layer's bf16 twin is written in the same
   * pass, as by a whole step (without offloading a layer's change makes
   * the whole twin stale anyway). */
  uint16_t *bf16 = gt_model_offloaded(m) ? gt_model_params_bf16(m) : NULL;
  bool whole = o->lo == 0 && o->hi == gt_model_buffer_floats(m);
  if (!whole || o->cfg.kind != GT_OPTIM_ADAMW) bf16 = NULL;
  update u = {.o = o,
              .lr = lr,
              .grad_scale = grad_scale,
              .grads = grads,
              .bf16 = bf16,
              .first = l->first_param,
              .last = l->first_param + l->nparams};
  GT_TRY(apply(&u));
  if (bf16) gt_model_layer_bf16_written(m, layer);
  return GT_OK;
}
