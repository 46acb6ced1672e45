/* Starting a model from a safetensors file: every rank reads the whole
 * tensors its parameters are cut from and keeps its own box of each, so
 * one file serves every layout (dp, tp, pp) as a checkpoint does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/hf.h"
#include "ckpt/hf_names.h"
#include "core/data/json.h"
#include "giant/engine/model.h"
#include "giant/layer.h"
#include "giant/layers.h"

gt_status ck_hf_check_names(const char *names) {
  const ck_hf_naming *n;
  return ck_hf_naming_find(names, &n);
}

static void shape_text(int ndim, const int64_t *shape, char *out, size_t cap) {
  out[0] = '\0';
  for (int d = 0; d < ndim; d++)
    snprintf(out + strlen(out), cap - strlen(out), "%s%lld", d ? "x" : "", (long long)shape[d]);
  if (!ndim) snprintf(out, cap, "a scalar");
}

/* The file's tensor for a map: its name, else without the "transformer."
 * prefix (a GPT2Model's own file), else the fallback. */
static const ck_st_tensor *find(const ck_st *st, const ck_hf_map *map) {
  static const char prefix[] = "transformer.";
  const char *names[2] = {map->name, map->fallback};
  for (int i = 0; i < 2; i++) {
    if (!names[i][0]) continue;
    const ck_st_tensor *t = ck_st_find(st, names[i]);
    if (!t && !strncmp(names[i], prefix, sizeof prefix - 1)) t = ck_st_find(st, names[i] + sizeof prefix - 1);
    if (t) return t;
  }
  return NULL;
}

typedef struct copy_ctx {
  const float *src;
  float *dst;
} copy_ctx;

static gt_status copy_run(void *ctx, uint64_t src, uint64_t dst, uint64_t n) {
  copy_ctx *c = ctx;
  memcpy(c->dst + dst, c->src + src, n * sizeof(float));
  return GT_OK;
}

/* Parameter p (its values named after `owner`) into host, its own box. */
static gt_status import_param(ck_st *st, const char *file, const ck_hf_naming *n, const gt_param *p,
                              const gt_param *owner, float *host) {
  ck_hf_map map;
  GT_TRY(ck_hf_map_param(n, owner->name, &map));
  const ck_st_tensor *t = find(st, &map);
  if (!t)
    return gt_errorf(GT_ENOTFOUND, "%s has no tensor %s%s%s for the model's parameter %s", file, map.name,
                     map.fallback[0] ? " (nor " : "", map.fallback[0] ? map.fallback : "", owner->name);
  int64_t want[CK_ST_MAXDIM];
  int nd = ck_hf_shape(map.layout, p->ndim, p->global_shape, want);
  bool same = nd == t->ndim;
  for (int d = 0; same && d < nd; d++) same = want[d] == t->shape[d];
  if (!same) {
    char a[128], b[128];
    shape_text(t->ndim, t->shape, a, sizeof a);
    shape_text(nd, want, b, sizeof b);
    return gt_errorf(GT_EFORMAT,
                     "%s: tensor %s is %s and the model's %s needs %s: the file is of a model of another "
                     "configuration (layers, channels, vocabulary, sequence length)",
                     file, t->name, a, owner->name, b);
  }
  float *raw = malloc((t->numel ? t->numel : 1) * sizeof(float));
  float *whole = malloc((t->numel ? t->numel : 1) * sizeof(float));
  gt_status s = raw && whole ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory reading %s of %s", t->name, file);
  if (s == GT_OK) s = ck_st_read(st, t, raw);
  if (s == GT_OK) {
    ck_hf_convert(map.layout, false, p->ndim, p->global_shape, raw, whole);
    ck_box all = {.ndim = p->ndim}, blk = ck_param_box(p);
    for (int d = 0; d < p->ndim; d++) all.hi[d] = p->global_shape[d];
    copy_ctx c = {.src = whole, .dst = host + p->offset};
    s = ck_box_runs(&all, &blk, copy_run, &c);
  }
  free(raw);
  free(whole);
  return s;
}

static const gt_json *member(const gt_json *cfg, const char *key, gt_json_type type) {
  const gt_json *v = gt_json_get(cfg, key);
  return v && v->type == type ? v : NULL;
}

static bool near(double a, double b) { return a >= b * (1 - 1e-6) && a <= b * (1 + 1e-6); }

/* A number of the config or its default in transformers' LlamaConfig. */
static double number(const gt_json *cfg, const char *key, double dflt) {
  const gt_json *v = member(cfg, key, GT_JSON_NUMBER);
  return v ? v->number : dflt;
}

/* Hugging Face's Llama configuration against the model's blocks: heads,
 * key/value heads, RMSNorm epsilon, rotary base and scaling all change the
 * function while leaving every tensor's shape as it is. */
static gt_status check_llama(const gt_json *cfg, const char *path, const gt_model *m) {
  gt_llama_block_config b = {0};
  bool found = false;
  for (int i = 0; !found && i < gt_model_num_layers(m); i++) {
    const gt_layer *l = gt_model_layer(m, i);
    found = l->type == &gt_llama_block_layer && gt_llama_block_settings(l, &b) == GT_OK;
  }
  const gt_json *v;
  if ((v = member(cfg, "model_type", GT_JSON_STRING)) && strcmp(v->str, "llama"))
    return gt_errorf(GT_EFORMAT, "%s: model_type is %.64s; hf-llama reads llama", path, v->str);
  if ((v = member(cfg, "hidden_act", GT_JSON_STRING)) && strcmp(v->str, "silu"))
    return gt_errorf(GT_EFORMAT, "%s: hidden_act %.64s is not Giant's SwiGLU (silu)", path, v->str);
  static const char *const biases[] = {"attention_bias", "mlp_bias"};
  for (int i = 0; i < 2; i++)
    if ((v = member(cfg, biases[i], GT_JSON_BOOL)) && v->boolean)
      return gt_errorf(GT_EFORMAT, "%s: %s is true and Giant's Llama block has no biases", path, biases[i]);
  if (!found) return GT_OK; /* a pipeline stage without blocks: the shapes are checked */
  double nh = number(cfg, "num_attention_heads", b.NH), nkv = number(cfg, "num_key_value_heads", nh);
  double eps = number(cfg, "rms_norm_eps", 1e-6), theta = number(cfg, "rope_theta", 10000.0), scale = 1.0;
  const gt_json *rs = member(cfg, "rope_scaling", GT_JSON_OBJECT);
  if (rs) {
    const gt_json *t = member(rs, "rope_type", GT_JSON_STRING);
    if (!t) t = member(rs, "type", GT_JSON_STRING);
    if (!t || strcmp(t->str, "linear"))
      return gt_errorf(GT_EFORMAT, "%s: rope_scaling of type %.64s; Giant's rotary scaling is linear", path,
                       t ? t->str : "(none)");
    scale = number(rs, "factor", 1.0);
  }
  if (nh != b.NH || nkv != b.n_kv_heads)
    return gt_errorf(GT_EFORMAT,
                     "%s: %g attention heads and %g key/value heads, and the model has %d and %d: build it with "
                     "those (--heads, --kv-heads)",
                     path, nh, nkv, b.NH, b.n_kv_heads);
  if (!near(eps, b.eps))
    return gt_errorf(GT_EFORMAT, "%s: rms_norm_eps %g, and the model's RMSNorm epsilon is %g", path, eps,
                     (double)b.eps);
  if (!near(theta, b.rope_theta) || !near(scale, b.rope_scale))
    return gt_errorf(GT_EFORMAT,
                     "%s: rope_theta %g (scaling %g), and the model's is %g (%g): build it with those "
                     "(--rope-theta, --rope-scale)",
                     path, theta, scale, (double)b.rope_theta, (double)b.rope_scale);
  return GT_OK;
}

/* A config.json beside the file must describe the model's block: a model
 * that computes another function would load without complaint and then be
 * wrong. GPT-2's is checked against Giant's fixed block, Llama's against
 * the model's settings. */
static gt_status check_config(const char *path, const ck_hf_naming *n, const gt_model *m) {
  FILE *f = fopen(path, "rb");
  if (!f) return GT_OK; /* optional */
  char *text = malloc(1 << 20);
  size_t len = text ? fread(text, 1, 1 << 20, f) : 0;
  bool whole = text && feof(f);
  fclose(f);
  if (!whole) {
    free(text);
    return gt_errorf(GT_EFORMAT, "%s: unreadable or larger than 1 MiB", path);
  }
  gt_json_doc *doc;
  const gt_json *cfg;
  gt_status s = gt_json_parse(text, len, path, &doc, &cfg);
  if (s != GT_OK) {
    free(text);
    return s;
  }
  const gt_json *v;
  if (cfg->type != GT_JSON_OBJECT) s = gt_errorf(GT_EFORMAT, "%s is no JSON object", path);
  if (s == GT_OK && ck_hf_naming_is_llama(n)) {
    s = check_llama(cfg, path, m);
    gt_json_free(doc);
    free(text);
    return s;
  }
  if (s == GT_OK && (v = member(cfg, "model_type", GT_JSON_STRING)) && strcmp(v->str, "gpt2"))
    s = gt_errorf(GT_EFORMAT, "%s: model_type is %.64s; Giant reads gpt2", path, v->str);
  if (s == GT_OK && (v = member(cfg, "activation_function", GT_JSON_STRING)) && strcmp(v->str, "gelu_new") &&
      strcmp(v->str, "gelu_pytorch_tanh"))
    s = gt_errorf(GT_EFORMAT, "%s: activation_function %.64s is not Giant's GELU, the tanh approximation (gelu_new)",
                  path, v->str);
  if (s == GT_OK && (v = member(cfg, "layer_norm_epsilon", GT_JSON_NUMBER)) &&
      (v->number < 0.99e-5 || v->number > 1.01e-5))
    s = gt_errorf(GT_EFORMAT, "%s: layer_norm_epsilon %g is not Giant's 1e-5", path, v->number);
  if (s == GT_OK && (v = member(cfg, "scale_attn_by_inverse_layer_idx", GT_JSON_BOOL)) && v->boolean)
    s = gt_errorf(GT_EFORMAT, "%s: scale_attn_by_inverse_layer_idx is not Giant's attention", path);
  if (s == GT_OK && (v = member(cfg, "scale_attn_weights", GT_JSON_BOOL)) && !v->boolean)
    s = gt_errorf(GT_EFORMAT, "%s: unscaled attention (scale_attn_weights false) is not Giant's", path);
  gt_json_free(doc);
  free(text);
  return s;
}

/* A model whose output matrix is its embedding cannot take a file whose
 * two differ: it would compute another function. (The other way round,
 * an untied model takes a tied file's embedding for both.) */
static gt_status check_tied(ck_st *st, const char *file, const gt_model *m, const ck_hf_naming *n) {
  const gt_param *head = NULL;
  for (int i = 0; i < gt_model_num_params(m); i++)
    if (gt_model_param(m, i)->tied_to >= 0 || gt_model_param(m, i)->mirror_of >= 0) head = gt_model_param(m, i);
  if (!head) return GT_OK;
  ck_hf_map hm, em;
  const gt_param *owner = gt_model_param(m, head->tied_to >= 0 ? head->tied_to : head->mirror_of);
  if (ck_hf_map_param(n, head->name, &hm) != GT_OK || ck_hf_map_param(n, owner->name, &em) != GT_OK) return GT_OK;
  const ck_st_tensor *h = ck_st_find(st, hm.name), *e = find(st, &em);
  if (!h || !e || h == e) return GT_OK;
  if (h->numel != e->numel) return GT_OK; /* import_param names the shape */
  float *a = malloc((h->numel ? h->numel : 1) * sizeof *a), *b = malloc((h->numel ? h->numel : 1) * sizeof *b);
  gt_status s = a && b ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory reading %s", file);
  if (s == GT_OK) s = ck_st_read(st, h, a);
  if (s == GT_OK) s = ck_st_read(st, e, b);
  if (s == GT_OK && memcmp(a, b, h->numel * sizeof *a))
    s = gt_errorf(GT_EFORMAT,
                  "%s holds an output matrix %s apart from its embedding %s, and the model ties them: build "
                  "the model untied (examples/gpt: --untied)",
                  file, h->name, e->name);
  free(a);
  free(b);
  return s;
}

gt_status ck_hf_import(gt_model *m, const char *path, const char *names) {
  const ck_hf_naming *n;
  GT_TRY(ck_hf_naming_find(names, &n));
  char file[4200];
  struct stat sb;
  snprintf(file, sizeof file, "%s", path);
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (ck_hf_naming_is_gpt2(n) || ck_hf_naming_is_llama(n)) GT_TRY(check_config(cfg, n, m));
    snprintf(file, sizeof file, "%s/model.safetensors", path);
  }
  ck_st *st;
  GT_TRY(ck_st_open(file, &st));
  size_t nbuf = gt_model_buffer_floats(m);
  float *host = malloc((nbuf ? nbuf : 1) * sizeof *host);
  gt_status s = host ? check_tied(st, file, m, n) : gt_errorf(GT_ENOMEM, "out of memory loading %s", file);
  if (s == GT_OK) s = gt_model_get_params(m, host, nbuf);
  for (int i = 0; s == GT_OK && i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    if (p->tied_to >= 0 || !p->local || !p->numel) continue;
    const gt_param *owner = p->mirror_of >= 0 ? gt_model_param(m, p->mirror_of) : p;
    s = import_param(st, file, n, p, owner, host);
  }
  if (s == GT_OK) s = gt_model_set_params(m, host, nbuf);
  free(host);
  ck_st_close(st);
  return s;
}
