/* A checkpoint's parameters as one safetensors file under a naming, with
 * the config.json Hugging Face's transformers builds the model from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/hf_names.h"
#include "giant/ckpt.h"

#define PARAM_PREFIX "param/"

typedef struct exported {
  ck_st_out *t;
  char (*names)[160];
  int n;
} exported;

static void exported_free(exported *e) {
  for (int i = 0; i < e->n; i++) free((void *)e->t[i].data);
  free(e->t);
  free(e->names);
}

/* Tensor i of the checkpoint, whole, in the file's layout. */
static gt_status export_tensor(const char *path, const ck_manifest *m, int i, const ck_hf_naming *n, exported *e) {
  const ck_tensor *t = &m->tensors[i];
  ck_hf_map map;
  GT_TRY(ck_hf_map_param(n, t->name + strlen(PARAM_PREFIX), &map));
  ck_box b = {.ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++) b.hi[d] = t->shape[d];
  size_t numel = (size_t)ck_box_volume(&b);
  float *x = malloc((numel ? numel : 1) * sizeof *x), *y = malloc((numel ? numel : 1) * sizeof *y);
  gt_status s = x && y ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory exporting %s", t->name);
  if (s == GT_OK) s = ck_fill_box(path, m, i, &b, x, NULL);
  if (s == GT_OK) {
    ck_hf_convert(map.layout, true, t->ndim, t->shape, x, y);
    ck_st_out *o = &e->t[e->n];
    snprintf(e->names[e->n], sizeof e->names[0], "%s", map.name);
    o->name = e->names[e->n];
    o->ndim = ck_hf_shape(map.layout, t->ndim, t->shape, o->shape);
    o->data = y;
    y = NULL;
    e->n++;
  }
  free(x);
  free(y);
  return s;
}

static const ck_tensor *tensor(const ck_manifest *m, const char *name) {
  int i = ck_manifest_tensor(m, name);
  return i >= 0 ? &m->tensors[i] : NULL;
}

/* GPT2LMHeadModel's configuration, read off the tensors' shapes. */
static gt_status write_config(const char *path, const ck_manifest *m, int heads, const char *out_dir) {
  const ck_tensor *wte = tensor(m, PARAM_PREFIX "embed.wte"), *wpe = tensor(m, PARAM_PREFIX "embed.wpe");
  const ck_tensor *fc1 = tensor(m, PARAM_PREFIX "h0.fc1.w");
  if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
    return gt_errorf(GT_EFORMAT, "%s holds no GPT-2 embedding (embed.wte, embed.wpe): it is of another model", path);
  int layers = 0;
  char name[CK_NAME];
  for (;; layers++) {
    snprintf(name, sizeof name, PARAM_PREFIX "h%d.qkv.w", layers);
    if (!tensor(m, name)) break;
  }
  int64_t C = wte->shape[1];
  if (heads <= 0 || C % heads)
    return gt_errorf(GT_EINVAL, "hf-gpt2 needs the model's head count, which divides %lld channels (--heads N)",
                     (long long)C);
  bool tied = !tensor(m, PARAM_PREFIX "lm_head.w");
  char inner[32] = "null";
  if (fc1 && fc1->shape[0] != 4 * C) snprintf(inner, sizeof inner, "%lld", (long long)fc1->shape[0]);
  char text[2048];
  int len = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
                     "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %s,\n"
                     "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                     "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                     "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
                     (long long)wte->shape[0], (long long)wpe->shape[0], (long long)wpe->shape[0], (long long)C, layers,
                     heads, inner, tied ? "true" : "false");
  return ck_write_durable(out_dir, "config.json", text, (size_t)len);
}

/* LlamaForCausalLM's configuration, read off the tensors' shapes. The
 * checkpoint keeps no RMSNorm epsilon nor rotary base: those written are
 * examples/llama's defaults (1e-5, 10000). Giant's rotary embedding has
 * no table, so max_position_embeddings only bounds transformers' use. */
static gt_status write_llama_config(const char *path, const ck_manifest *m, int heads, const char *out_dir) {
  const ck_tensor *emb = tensor(m, PARAM_PREFIX "model.embed_tokens.wte");
  const ck_tensor *k = tensor(m, PARAM_PREFIX "model.layers.0.self_attn.k_proj.weight");
  const ck_tensor *gate = tensor(m, PARAM_PREFIX "model.layers.0.mlp.gate_proj.weight");
  if (!emb || !k || !gate || emb->ndim != 2 || k->ndim != 2 || gate->ndim != 2)
    return gt_errorf(GT_EFORMAT,
                     "%s holds no Llama model (model.embed_tokens.wte, model.layers.0's k_proj and gate_proj): it "
                     "is of another model",
                     path);
  int layers = 0;
  char name[CK_NAME];
  for (;; layers++) {
    snprintf(name, sizeof name, PARAM_PREFIX "model.layers.%d.input_layernorm.weight", layers);
    if (!tensor(m, name)) break;
  }
  int64_t C = emb->shape[1], hs = heads > 0 ? C / heads : 0;
  if (heads <= 0 || C % heads || k->shape[0] % hs)
    return gt_errorf(GT_EINVAL,
                     "hf-llama needs the model's query head count, which divides %lld channels and makes the "
                     "key/value width %lld a whole number of heads (--heads N)",
                     (long long)C, (long long)k->shape[0]);
  bool tied = !tensor(m, PARAM_PREFIX "lm_head.w");
  char text[2048];
  int len = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                     "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
                     "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
                     "  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n  \"rope_scaling\": null,\n"
                     "  \"max_position_embeddings\": 2048,\n  \"attention_bias\": false,\n"
                     "  \"mlp_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
                     (long long)emb->shape[0], (long long)C, (long long)gate->shape[0], layers, heads,
                     (long long)(k->shape[0] / hs), (long long)hs, tied ? "true" : "false");
  return ck_write_durable(out_dir, "config.json", text, (size_t)len);
}

gt_status gt_ckpt_export_safetensors(const char *path, const char *names, int heads, const char *out_dir) {
  const ck_hf_naming *n;
  GT_TRY(ck_hf_naming_find(names, &n));
  if ((ck_hf_naming_is_gpt2(n) || ck_hf_naming_is_llama(n)) && heads <= 0) /* before any tensor is read */
    return gt_errorf(GT_EINVAL, "%s's config.json needs the model's head count (--heads N)", names);
  ck_manifest m;
  GT_TRY(ck_manifest_read(path, &m));
  exported e = {.t = calloc((size_t)m.ntensors + 1, sizeof *e.t), .names = calloc((size_t)m.ntensors + 1, 160)};
  gt_status s = e.t && e.names ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory exporting %s", path);
  /* The parameters alone: optimizer state has no place in the file. */
  for (int i = 0; s == GT_OK && i < m.ntensors; i++)
    if (!strncmp(m.tensors[i].name, PARAM_PREFIX, strlen(PARAM_PREFIX))) s = export_tensor(path, &m, i, n, &e);
  if (s == GT_OK && e.n == 0) s = gt_errorf(GT_EFORMAT, "%s holds no parameters", path);
  if (s == GT_OK) s = ck_mkdir(out_dir);
  if (s == GT_OK && ck_hf_naming_is_gpt2(n)) s = write_config(path, &m, heads, out_dir);
  if (s == GT_OK && ck_hf_naming_is_llama(n)) s = write_llama_config(path, &m, heads, out_dir);
  if (s == GT_OK) s = ck_st_write(out_dir, "model.safetensors", e.t, e.n);
  exported_free(&e);
  ck_manifest_free(&m);
  return s;
}
