/* Model construction: layers, parameter layout, build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "giant/log.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

gt_status gt_model_create(gt_backend *be, const gt_model_config *cfg, gt_model **out) {
  *out = NULL;
  if (!be || !cfg) return gt_errorf(GT_EINVAL, "gt_model_create needs a backend and a config");
  if (cfg->B_max <= 0 || cfg->T_max <= 0)
    return gt_errorf(GT_EINVAL, "model B_max and T_max must be positive (got B_max=%d, T_max=%d)", cfg->B_max,
                     cfg->T_max);
  if ((unsigned)cfg->recompute > GT_RECOMPUTE_BLOCK)
    return gt_errorf(GT_EINVAL, "unknown recomputation mode %d: use GT_RECOMPUTE_NONE, _ATTENTION or _BLOCK",
                     (int)cfg->recompute);
  if (cfg->attention != GT_ATTENTION_TILED && cfg->attention != GT_ATTENTION_FULL)
    return gt_errorf(GT_EINVAL, "unknown attention kind %d: use GT_ATTENTION_TILED or GT_ATTENTION_FULL",
                     (int)cfg->attention);
  gt_model *m = calloc(1, sizeof *m);
  if (!m) return gt_errorf(GT_ENOMEM, "out of memory creating a model");
  m->be = be;
  m->cfg = *cfg;
  gt_status s = gt_arena_create(be, cfg->budget_bytes, &m->arena);
  if (s != GT_OK) {
    free(m);
    return s;
  }
  *out = m;
  return GT_OK;
}

void gt_model_destroy(gt_model *m) {
  if (!m) return;
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (l->type->destroy) l->type->destroy(l);
    free(l);
  }
  free(m->layers);
  free(m->params);
  free(m->cut);
  free(m->host_losses);
  gt_model_annotations_destroy(m);
  gt_offload_destroy(m);
  gt_zero_destroy(m);
  gt_zero3_destroy(m);
  gt_model_state_free(m, m->param_buf);
  gt_model_state_free(m, m->grad_buf);
  gt_arena_free(m->arena, m->scratch);
  gt_model_recompute_free(m);
  gt_model_precision_destroy(m);
  gt_arena_destroy(m->arena);
  free(m);
}

gt_status gt_model_add(gt_model *m, const gt_layer_type *type, const char *name, const void *config, gt_layer **out) {
  if (out) *out = NULL;
  if (m->built) return gt_errorf(GT_ESTATE, "layer '%s' added after gt_model_build", name);
  if (!type || !type->build || !type->forward || !type->backward || !type->acts_floats)
    return gt_errorf(GT_EINVAL, "layer '%s': its type must define build, forward, backward and acts_floats",
                     name ? name : "?");
  if (!name || !*name || strlen(name) >= sizeof(((gt_layer *)0)->name))
    return gt_errorf(GT_EINVAL, "a layer needs a name of 1 to %zu characters", sizeof(((gt_layer *)0)->name) - 1);
  if (gt_model_find_layer(m, name)) return gt_errorf(GT_EEXIST, "two layers are named '%s'", name);
  gt_layer *prev = m->nlayers ? m->layers[m->nlayers - 1] : NULL;
  if (prev && prev->is_loss)
    return gt_errorf(GT_EINVAL, "layer '%s' added after the loss layer '%s'; the loss layer must be last", name,
                     prev->name);
  if (m->nlayers == m->cap_layers) {
    int cap = m->cap_layers ? 2 * m->cap_layers : 16;
    gt_layer **l = realloc(m->layers, (size_t)cap * sizeof *l);
    if (!l) return gt_errorf(GT_ENOMEM, "out of memory adding layer '%s'", name);
    m->layers = l;
    m->cap_layers = cap;
  }
  gt_layer *l = calloc(1, sizeof *l);
  if (!l) return gt_errorf(GT_ENOMEM, "out of memory adding layer '%s'", name);
  l->type = type;
  snprintf(l->name, sizeof l->name, "%s", name);
  l->index = m->nlayers;
  l->model = m;
  l->first_param = m->nparams;
  gt_model_annotate_layer(m, l);
  if (l->split && m->par.tp && m->par.tp->size > 1) l->tp = m->par.tp;
  gt_status s = type->build(l, config);
  if (s != GT_OK) {
    if (type->destroy) type->destroy(l);
    m->nparams = l->first_param; /* drop what it declared */
    free(l);
    return gt_error_context(s, "layer '%s' (%s)", name, type->name);
  }
  /* The shape contract between neighbours. */
  const char *why = NULL;
  if (!prev && l->in_dim != 0) why = "the first layer must read token ids (in_dim 0)";
  if (prev && l->in_dim == 0) why = "only the first layer may read token ids";
  if (prev && l->in_dim != prev->out_dim) {
    if (type->destroy) type->destroy(l);
    m->nparams = l->first_param;
    gt_status e = gt_errorf(GT_EINVAL,
                            "shape mismatch: layer '%s' (%s) takes %d features per token, but the "
                            "previous layer '%s' (%s) produces %d",
                            name, type->name, l->in_dim, prev->name, prev->type->name, prev->out_dim);
    free(l);
    return e;
  }
  if (why || l->out_dim <= 0) {
    if (type->destroy) type->destroy(l);
    m->nparams = l->first_param;
    free(l);
    return gt_errorf(GT_EINVAL, "layer '%s': %s", name, why ? why : "out_dim must be positive");
  }
  m->layers[m->nlayers++] = l;
  if (out) *out = l;
  return GT_OK;
}

int gt_model_vocab_size(const gt_model *m) { return m->vocab_in < m->vocab_out ? m->vocab_in : m->vocab_out; }

int gt_model_num_layers(const gt_model *m) { return m->nlayers; }
gt_layer *gt_model_layer(const gt_model *m, int i) { return i >= 0 && i < m->nlayers ? m->layers[i] : NULL; }

gt_layer *gt_model_find_layer(const gt_model *m, const char *name) {
  for (int i = 0; i < m->nlayers; i++)
    if (!strcmp(m->layers[i]->name, name)) return m->layers[i];
  return NULL;
}

int gt_model_num_params(const gt_model *m) { return m->nparams; }
const gt_param *gt_model_param(const gt_model *m, int i) { return &m->params[i]; }
size_t gt_model_param_count(const gt_model *m) { return m->ntrainable; }
size_t gt_model_buffer_floats(const gt_model *m) { return m->nfloats; }

size_t gt_model_param_count_whole(const gt_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->nparams; i++) {
    const gt_param *p = &m->params[i];
    if (p->tied_to >= 0 || p->mirror_of >= 0) continue;
    size_t k = 1;
    for (int d = 0; d < p->ndim; d++) k *= (size_t)p->global_shape[d];
    n += k;
  }
  return n;
}
float *gt_model_params(const gt_model *m) { return m->zero3 ? NULL : m->param_buf; }
float *gt_model_grads(const gt_model *m) { return m->zero ? NULL : m->grad_buf; }
gt_backend *gt_model_backend(const gt_model *m) { return m->be; }
gt_arena *gt_model_arena(const gt_model *m) { return m->arena; }
const gt_model_config *gt_model_get_config(const gt_model *m) { return &m->cfg; }

double gt_model_flops(const gt_model *m, int B, int T) {
  double f = 0;
  for (int i = 0; i < m->nlayers; i++) /* this rank's layers: every layer until build */
    if (m->layers[i]->type->flops && (m->layers[i]->local || !m->built))
      f += m->layers[i]->type->flops(m->layers[i], B, T);
  return f;
}

/* ---- parameters ---- */

static gt_status push_param(gt_model *m, gt_param *p) {
  if (m->nparams == m->cap_params) {
    int cap = m->cap_params ? 2 * m->cap_params : 64;
    gt_param *np = realloc(m->params, (size_t)cap * sizeof *np);
    if (!np) return gt_errorf(GT_ENOMEM, "out of memory declaring parameter %s", p->name);
    m->params = np;
    m->cap_params = cap;
  }
  m->params[m->nparams++] = *p;
  return GT_OK;
}

gt_status gt_layer_declare_param(gt_layer *self, const gt_param_spec *spec, int *index) {
  gt_model *m = self->model;
  gt_param p = {0};
  if (snprintf(p.name, sizeof p.name, "%s.%s", self->name, spec->name) >= (int)sizeof p.name)
    return gt_errorf(GT_EINVAL, "parameter name %s.%s is too long", self->name, spec->name);
  if (spec->ndim < 1 || spec->ndim > 4)
    return gt_errorf(GT_EINVAL, "parameter %s has rank %d (1 to 4 allowed)", p.name, spec->ndim);
  p.ndim = spec->ndim;
  p.numel = 1;
  p.split_dim = -1;
  p.split_parts = 1;
  int parts = gt_layer_tp_size(self);
  if (spec->split && parts > 1) {
    if (spec->split_dim < 0 || spec->split_dim >= spec->ndim)
      return gt_errorf(GT_EINVAL, "parameter %s: split dimension %d out of range", p.name, spec->split_dim);
    if (spec->shape[spec->split_dim] % parts)
      return gt_errorf(GT_EINVAL,
                       "tensor parallelism tp=%d does not divide dimension %d (size %lld) of parameter %s; "
                       "choose a tp that divides it",
                       parts, spec->split_dim, (long long)spec->shape[spec->split_dim], p.name);
    p.split_dim = spec->split_dim;
    p.split_parts = parts;
    p.split_rank = gt_layer_tp_rank(self);
  }
  for (int i = 0; i < spec->ndim; i++) {
    if (spec->shape[i] <= 0)
      return gt_errorf(GT_EINVAL, "parameter %s has dimension %d of size %lld", p.name, i, (long long)spec->shape[i]);
    p.global_shape[i] = spec->shape[i];
    p.shape[i] = i == p.split_dim ? spec->shape[i] / parts : spec->shape[i];
    p.numel *= (size_t)p.shape[i];
  }
  p.init = spec->init;
  p.std = spec->std;
  p.decay = spec->decay;
  p.matmul_only = spec->matmul_only;
  p.layer = self->index;
  p.tied_to = -1;
  p.mirror_of = -1;
  p.local = true;
  GT_TRY(push_param(m, &p));
  if (index) *index = self->nparams;
  self->nparams++;
  return GT_OK;
}

gt_status gt_layer_tie_param(gt_layer *self, const char *local_name, const char *layer_name, const char *param,
                             int *index) {
  gt_model *m = self->model;
  gt_layer *src = gt_model_find_layer(m, layer_name);
  if (!src)
    return gt_errorf(GT_ENOTFOUND, "cannot tie to layer '%s': no such layer before '%s'", layer_name, self->name);
  char full[128];
  snprintf(full, sizeof full, "%s.%s", layer_name, param);
  int target = -1;
  for (int i = src->first_param; i < src->first_param + src->nparams; i++)
    if (!strcmp(m->params[i].name, full)) target = i;
  if (target < 0)
    return gt_errorf(GT_ENOTFOUND, "cannot tie to '%s': layer '%s' has no such parameter", full, layer_name);
  gt_param p = m->params[target];
  snprintf(p.name, sizeof p.name, "%s.%s", self->name, local_name);
  p.layer = self->index;
  p.tied_to = target;
  p.mirror_of = -1;
  p.matmul_only = false; /* the owner's use says nothing of this layer's */
  GT_TRY(push_param(m, &p));
  if (index) *index = self->nparams;
  self->nparams++;
  return GT_OK;
}

gt_status gt_layer_param_matmul_only(gt_layer *self, int i) {
  if (self->model->built) return gt_errorf(GT_ESTATE, "layer '%s': mark parameters before gt_model_build", self->name);
  if (i < 0 || i >= self->nparams)
    return gt_errorf(GT_EINVAL, "layer '%s' has no parameter %d (it has %d)", self->name, i, self->nparams);
  self->model->params[self->first_param + i].matmul_only = true;
  return GT_OK;
}

/* Offloaded, a layer's parameters and gradients are in its device slots
 * while it runs (offload.c); sharded (ZeRO-3), its parameters are in a
 * slot of their own (zero3.c). */
float *gt_layer_param(const gt_layer *self, int i) {
  if (self->model->off) return gt_offload_param(self, i);
  if (self->model->zero3) return gt_zero3_param(self, i);
  return self->model->param_buf + self->model->params[self->first_param + i].offset;
}
float *gt_layer_grad(const gt_layer *self, int i) {
  if (self->model->off) return gt_offload_grad(self, i);
  if (self->model->zero) return gt_zero_grad(self, i);
  return self->model->grad_buf + self->model->params[self->first_param + i].offset;
}
gt_status gt_layer_grads_final(const gt_layer *self, int first, int n) {
  if (first < 0 || n < 0 || first > self->nparams - n)
    return gt_errorf(GT_EINVAL, "layer '%s': parameters [%d, %d) of its %d have no gradients", self->name, first,
                     first + n, self->nparams);
  return self->model->off ? gt_offload_grads_final(self->model, self->index, first, n) : GT_OK;
}
const gt_param *gt_layer_param_info(const gt_layer *self, int i) { return &self->model->params[self->first_param + i]; }

bool gt_param_in_norm(const gt_param *p) { return p->tied_to < 0 && p->local && p->mirror_of < 0 && p->numel > 0; }

int gt_layer_tp_size(const gt_layer *self) { return self->tp ? self->tp->size : 1; }
bool gt_layer_seq_parallel(const gt_layer *self) { return self->tp && self->model->par.seq_parallel; }
int gt_layer_tp_rank(const gt_layer *self) { return self->tp ? self->tp->rank : 0; }

size_t gt_param_global_index(const gt_param *p, size_t i) {
  if (p->split_dim < 0) return i;
  /* Local coordinates, shifted along the split dimension, re-flattened. */
  size_t coord[4], g = 0;
  for (int d = p->ndim - 1; d >= 0; d--) {
    coord[d] = i % (size_t)p->shape[d];
    i /= (size_t)p->shape[d];
  }
  coord[p->split_dim] += (size_t)p->split_rank * (size_t)p->shape[p->split_dim];
  for (int d = 0; d < p->ndim; d++) g = g * (size_t)p->global_shape[d] + coord[d];
  return g;
}

/* ---- parallel context and annotations ---- */

gt_status gt_model_set_parallel(gt_model *m, const gt_model_parallel *p) {
  if (m->nlayers > 0) return gt_errorf(GT_ESTATE, "set the parallel context before adding layers");
  if (p->seq_parallel && !(p->tp && p->tp->size > 1))
    return gt_errorf(GT_EINVAL, "sequence parallelism needs tensor parallelism (tp > 1)");
  m->par = *p;
  return GT_OK;
}

const gt_model_parallel *gt_model_get_parallel(const gt_model *m) { return &m->par; }

/* ---- build ---- */

static gt_status init_params(gt_model *m) {
  float *host = malloc((m->nfloats ? m->nfloats : 1) * sizeof *host);
  if (!host) return gt_errorf(GT_ENOMEM, "out of host memory initialising %zu parameters", m->nfloats);
  for (int i = 0; i < m->nparams; i++) {
    const gt_param *p = &m->params[i];
    if (p->tied_to >= 0 || !p->local) continue;
    /* A mirror starts from its owner's values: the owner's name seeds them. */
    const char *name = p->mirror_of >= 0 ? m->params[p->mirror_of].name : p->name;
    for (size_t j = 0; j < p->numel; j++)
      host[p->offset + j] = gt_init_value(m->cfg.seed, name, gt_param_global_index(p, j), p->init, p->std);
  }
  /* Sharded (ZeRO-3), this rank keeps its range only. */
  size_t lo, hi;
  gt_model_param_range(m, &lo, &hi);
  gt_status s = gt_backend_upload(gt_model_state_backend(m), m->param_buf, host + lo, (hi - lo) * sizeof *host);
  free(host);
  return s;
}

/* Stages: the annotations when they make exactly the stages the pipeline
 * needs, else an even cut by layer count (uneven counts allowed, no layer
 * dropped). Without pipelining every layer is this rank's. */
static gt_status assign_stages(gt_model *m) {
  int P = m->par.pp_size > 0 ? m->par.pp_size : 1, V = m->par.pp_chunks > 0 ? m->par.pp_chunks : 1;
  int S = P * V;
  m->pp_stages = S;
  if (m->par.pp_rank < 0 || m->par.pp_rank >= P)
    return gt_errorf(GT_EINVAL, "pipeline rank %d is outside 0..%d", m->par.pp_rank, P - 1);
  if (S > m->nlayers)
    return gt_errorf(GT_EINVAL, "the pipeline needs %d stages (pp=%d x %d chunks) but the model has only %d layers", S,
                     P, V, m->nlayers);
  bool annotated = m->stages == S && S > 1;
  m->stages_used = annotated;
  if (!annotated && m->cut && m->ncut != S)
    return gt_errorf(GT_EINVAL, "the stage cut has %d stages, the pipeline %d", m->ncut, S);
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (!annotated && m->cut) {
      int st = 0;
      while (st + 1 < S && i >= m->cut[st + 1]) st++;
      l->stage = S > 1 ? st : 0;
    } else if (!annotated) {
      l->stage = S > 1 ? (int)((long)i * S / m->nlayers) : 0;
    }
    if (i > 0 && l->stage < m->layers[i - 1]->stage)
      return gt_errorf(GT_EINVAL, "stage of layer '%s' goes backwards", l->name);
    l->local = l->stage % P == m->par.pp_rank;
  }
  for (int s = 0; s < S; s++) {
    bool any = false;
    for (int i = 0; i < m->nlayers; i++) any |= m->layers[i]->stage == s;
    if (!any) return gt_errorf(GT_EINVAL, "pipeline stage %d has no layer", s);
  }
  return GT_OK;
}

gt_status gt_model_set_stage_cut(gt_model *m, const int *first, int n) {
  if (m->built) return gt_errorf(GT_ESTATE, "set the stage cut before gt_model_build");
  if (n < 1 || first[0] != 0 || first[n] != m->nlayers)
    return gt_errorf(GT_EINVAL, "a stage cut must run from layer 0 to the last layer (%d)", m->nlayers);
  for (int s = 0; s < n; s++)
    if (first[s + 1] <= first[s]) return gt_errorf(GT_EINVAL, "stage %d of the cut holds no layer", s);
  int *c = malloc((size_t)(n + 1) * sizeof *c);
  if (!c) return gt_errorf(GT_ENOMEM, "out of memory");
  memcpy(c, first, (size_t)(n + 1) * sizeof *c);
  free(m->cut);
  m->cut = c;
  m->ncut = n;
  return GT_OK;
}

int gt_model_num_pipeline_stages(const gt_model *m) { return m->pp_stages > 0 ? m->pp_stages : 1; }

gt_status gt_model_stage_layers(const gt_model *m, int stage, int *first, int *last) {
  *first = -1;
  *last = -1;
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i]->stage == stage) {
      if (*first < 0) *first = i;
      *last = i;
    }
  return *first < 0 ? gt_errorf(GT_EINVAL, "no layer in pipeline stage %d", stage) : GT_OK;
}

gt_status gt_model_build(gt_model *m) {
  if (m->built) return gt_errorf(GT_ESTATE, "gt_model_build called twice");
  if (m->nlayers == 0) return gt_errorf(GT_EINVAL, "the model has no layers");
  GT_TRY(gt_model_finish_annotations(m));
  gt_layer *first = m->layers[0], *last = m->layers[m->nlayers - 1];
  if (!last->is_loss)
    return gt_errorf(GT_EINVAL, "the model must end in a loss layer (such as gt_lm_head_layer); the last is '%s' (%s)",
                     last->name, last->type->name);
  if (first->vocab <= 0 || last->vocab <= 0)
    return gt_errorf(GT_EINVAL, "the first layer ('%s') and the loss layer ('%s') must set their vocabulary size",
                     first->name, last->name);
  if (m->par.seq_parallel && m->par.tp && m->par.tp->size > 1) {
    for (int i = 0; i < m->nlayers; i++) {
      gt_layer *l = m->layers[i];
      if (!l->tp || !l->type->supports_seq_parallel)
        return gt_errorf(GT_EINVAL,
                         "sequence parallelism needs every layer split and able to run on sequence shards; "
                         "layer '%s' (%s) %s",
                         l->name, l->type->name, l->tp ? "cannot run on shards" : "is outside every split scope");
    }
  }
  m->vocab_in = first->vocab;
  m->vocab_out = last->vocab;
  GT_TRY(assign_stages(m));
  /* Parameter layout: declaration order, this rank's layers only; tied
   * parameters share storage, or, when the owner is on another stage, get
   * storage of their own that mirrors it. */
  size_t off = 0;
  for (int i = 0; i < m->nparams; i++) {
    gt_param *p = &m->params[i];
    p->local = m->layers[p->layer]->local;
    if (!p->local) {
      p->offset = SIZE_MAX;
      continue;
    }
    if (p->tied_to >= 0 && !m->params[p->tied_to].local) {
      p->mirror_of = p->tied_to;
      p->tied_to = -1;
    }
    if (p->tied_to >= 0) {
      p->offset = m->params[p->tied_to].offset;
      continue;
    }
    p->offset = off;
    off += (p->numel + 15) & ~(size_t)15; /* 64-byte aligned starts */
    m->ntrainable += p->numel;
  }
  GT_TRY(gt_model_check_regions(m));
  size_t mult = m->par.buffer_multiple;
  if (mult > 1) off = (off + mult - 1) / mult * mult;
  m->nfloats = off;
  int B = m->cfg.B_max, T = m->cfg.T_max;
  m->max_dim = 1;
  m->scratch_floats = 0;
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (!l->local) continue;
    if (l->out_dim > m->max_dim) m->max_dim = l->out_dim;
    if (l->in_dim > m->max_dim) m->max_dim = l->in_dim;
    size_t sc = l->type->scratch_floats ? l->type->scratch_floats(l, B, T) : 0;
    if (sc > m->scratch_floats) m->scratch_floats = sc;
  }
  size_t bytes = (m->nfloats ? m->nfloats : 1) * sizeof(float), held;
  GT_TRY(gt_zero3_create(m, &held)); /* ZeRO-3: the parameters' shard is all this rank holds */
  GT_TRY(gt_model_state_alloc_as(m, GT_MEM_PARAMS, (held ? held : 1) * sizeof(float), (void **)&m->param_buf));
  GT_TRY(gt_zero_create(m)); /* ZeRO-2: the gradients' shard and staging */
  if (!m->zero) GT_TRY(gt_model_state_alloc_as(m, GT_MEM_GRADS, bytes, (void **)&m->grad_buf));
  GT_TRY(gt_offload_create(m));
  GT_TRY(gt_arena_alloc_as(m->arena, GT_MEM_SCRATCH, (m->scratch_floats ? m->scratch_floats : 1) * sizeof(float),
                           (void **)&m->scratch));
  GT_TRY(gt_model_recompute_alloc(m));
  m->host_losses = malloc((size_t)B * (size_t)T * sizeof(float));
  if (!m->host_losses) return gt_errorf(GT_ENOMEM, "out of host memory for the loss buffer");
  m->built = true;
  if (m->cfg.no_init)
    GT_TRY(gt_backend_memset(gt_model_state_backend(m), m->param_buf, 0, held * sizeof(float), NULL));
  else
    GT_TRY(init_params(m));
  return gt_model_zero_grads(m);
}

gt_status gt_model_set_grad_hook(gt_model *m, gt_status (*hook)(void *ctx, int layer), void *ctx) {
  m->grad_hook = hook;
  m->grad_hook_ctx = ctx;
  return GT_OK;
}

gt_status gt_model_zero_grads(gt_model *m) {
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  gt_offload_grads_zeroed(m);
  if (m->zero) return gt_zero_zero_grads(m);
  return gt_backend_memset(gt_model_state_backend(m), m->grad_buf, 0, m->nfloats * sizeof(float), NULL);
}

bool gt_model_offloaded(const gt_model *m) { return m->cfg.offload_window > 0; }

gt_backend *gt_model_state_backend(const gt_model *m) { return m->host_be ? m->host_be : m->be; }

gt_status gt_model_state_alloc(gt_model *m, size_t bytes, void **ptr) {
  return gt_model_state_alloc_as(m, GT_MEM_OTHER, bytes, ptr);
}

gt_status gt_model_state_alloc_as(gt_model *m, gt_mem_kind kind, size_t bytes, void **ptr) {
  if (!gt_model_offloaded(m)) return gt_arena_alloc_as(m->arena, kind, bytes, ptr);
  gt_status s = gt_backend_host_alloc(m->be, bytes ? bytes : 1, ptr);
  return s == GT_OK ? s : gt_error_context(s, "host memory for offloaded state (%zu bytes)", bytes);
}

void gt_model_state_free(gt_model *m, void *ptr) {
  if (!gt_model_offloaded(m))
    gt_arena_free(m->arena, ptr);
  else
    gt_backend_host_free(m->be, ptr);
}

static gt_status check_n(const gt_model *m, size_t n) {
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  if (n != m->nfloats)
    return gt_errorf(GT_EINVAL, "parameter buffer holds %zu floats, caller passed %zu", m->nfloats, n);
  return GT_OK;
}

gt_status gt_model_get_params(gt_model *m, float *host, size_t n) {
  GT_TRY(check_n(m, n));
  if (m->zero3) return gt_zero3_get_params(m, host);
  return gt_backend_download(gt_model_state_backend(m), host, m->param_buf, n * sizeof(float));
}

gt_status gt_model_set_params(gt_model *m, const float *host, size_t n) {
  GT_TRY(check_n(m, n));
  gt_model_params_changed(m);
  size_t lo, hi;
  gt_model_param_range(m, &lo, &hi);
  return gt_backend_upload(gt_model_state_backend(m), m->param_buf, host + lo, (hi - lo) * sizeof(float));
}

gt_status gt_model_get_grads(gt_model *m, float *host, size_t n) {
  GT_TRY(check_n(m, n));
  if (m->zero) {
    size_t lo, hi;
    gt_model_grad_range(m, &lo, &hi);
    return gt_errorf(GT_EUNSUPPORTED,
                     "the gradients are sharded (ZeRO-%d): this rank holds floats [%zu, %zu) of %zu only", m->par.zero,
                     lo, hi, m->nfloats);
  }
  return gt_backend_download(gt_model_state_backend(m), host, m->grad_buf, n * sizeof(float));
}
