/* The namings. A row maps a parameter name, with %d for a layer's number,
 * to the file's name; a new model family (Llama's q, k and v, its gate and
 * up projections) is one more table of rows, and a layout kind if its
 * tensors are stored in an order none of these gives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_names.h"

typedef struct row {
  const char *giant, *file, *fallback;
  ck_hf_layout layout;
} row;

struct ck_hf_naming {
  const char *name;
  const row *rows; /* NULL: Giant's own names */
  int nrows;
};

/* Hugging Face's GPT2LMHeadModel. Its Conv1D layers keep their weights as
 * [in, out], the transpose of Giant's [out, in]; c_attn fuses q, k and v
 * along its output, as Giant's qkv.w (3, C, C) does along its rows. */
static const row gpt2[] = {
    {"embed.wte", "transformer.wte.weight", NULL, CK_HF_SAME},
    {"embed.wpe", "transformer.wpe.weight", NULL, CK_HF_SAME},
    {"h%d.ln1.w", "transformer.h.%d.ln_1.weight", NULL, CK_HF_SAME},
    {"h%d.ln1.b", "transformer.h.%d.ln_1.bias", NULL, CK_HF_SAME},
    {"h%d.qkv.w", "transformer.h.%d.attn.c_attn.weight", NULL, CK_HF_TRANSPOSE},
    {"h%d.qkv.b", "transformer.h.%d.attn.c_attn.bias", NULL, CK_HF_FLAT},
    {"h%d.proj.w", "transformer.h.%d.attn.c_proj.weight", NULL, CK_HF_TRANSPOSE},
    {"h%d.proj.b", "transformer.h.%d.attn.c_proj.bias", NULL, CK_HF_SAME},
    {"h%d.ln2.w", "transformer.h.%d.ln_2.weight", NULL, CK_HF_SAME},
    {"h%d.ln2.b", "transformer.h.%d.ln_2.bias", NULL, CK_HF_SAME},
    {"h%d.fc1.w", "transformer.h.%d.mlp.c_fc.weight", NULL, CK_HF_TRANSPOSE},
    {"h%d.fc1.b", "transformer.h.%d.mlp.c_fc.bias", NULL, CK_HF_SAME},
    {"h%d.fc2.w", "transformer.h.%d.mlp.c_proj.weight", NULL, CK_HF_TRANSPOSE},
    {"h%d.fc2.b", "transformer.h.%d.mlp.c_proj.bias", NULL, CK_HF_SAME},
    {"ln_f.w", "transformer.ln_f.weight", NULL, CK_HF_SAME},
    {"ln_f.b", "transformer.ln_f.bias", NULL, CK_HF_SAME},
    /* Tied, transformers saves the embedding alone. */
    {"lm_head.w", "lm_head.weight", "transformer.wte.weight", CK_HF_SAME},
};

/* Hugging Face's LlamaForCausalLM. Giant's Llama block already carries its
 * names and nn.Linear's [out, in] layout (docs/llama.md); only the
 * embedding and the head are named otherwise. Its q and k are stored for
 * rotate-half RoPE, Giant's layout, so nothing is permuted. */
static const row llama[] = {
    {"model.embed_tokens.wte", "model.embed_tokens.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.input_layernorm.weight", "model.layers.%d.input_layernorm.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.self_attn.q_proj.weight", "model.layers.%d.self_attn.q_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.self_attn.k_proj.weight", "model.layers.%d.self_attn.k_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.self_attn.v_proj.weight", "model.layers.%d.self_attn.v_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.self_attn.o_proj.weight", "model.layers.%d.self_attn.o_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.post_attention_layernorm.weight", "model.layers.%d.post_attention_layernorm.weight", NULL,
     CK_HF_SAME},
    {"model.layers.%d.mlp.gate_proj.weight", "model.layers.%d.mlp.gate_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.mlp.up_proj.weight", "model.layers.%d.mlp.up_proj.weight", NULL, CK_HF_SAME},
    {"model.layers.%d.mlp.down_proj.weight", "model.layers.%d.mlp.down_proj.weight", NULL, CK_HF_SAME},
    {"model.norm.weight", "model.norm.weight", NULL, CK_HF_SAME},
    /* Tied (tie_word_embeddings), transformers saves the embedding alone. */
    {"lm_head.w", "lm_head.weight", "model.embed_tokens.weight", CK_HF_SAME},
};

static const ck_hf_naming namings[] = {
    {"giant", NULL, 0},
    {"hf-gpt2", gpt2, (int)(sizeof gpt2 / sizeof gpt2[0])},
    {"hf-llama", llama, (int)(sizeof llama / sizeof llama[0])},
};

gt_status ck_hf_naming_find(const char *names, const ck_hf_naming **out) {
  for (size_t i = 0; i < sizeof namings / sizeof namings[0]; i++)
    if (names && !strcmp(names, namings[i].name)) {
      *out = &namings[i];
      return GT_OK;
    }
  return gt_errorf(GT_EINVAL, "unknown tensor names '%s': use giant, hf-gpt2 or hf-llama", names ? names : "(none)");
}

const char *ck_hf_naming_name(const ck_hf_naming *n) { return n->name; }
bool ck_hf_naming_is_gpt2(const ck_hf_naming *n) { return n->rows == gpt2; }
bool ck_hf_naming_is_llama(const ck_hf_naming *n) { return n->rows == llama; }

/* name matches pattern (at most one %d, a layer number): *layer gets it. */
static bool match(const char *pattern, const char *name, int *layer) {
  const char *d = strstr(pattern, "%d");
  *layer = -1;
  if (!d) return !strcmp(pattern, name);
  size_t pre = (size_t)(d - pattern);
  if (strncmp(pattern, name, pre)) return false;
  const char *p = name + pre;
  if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return false;
  char *end;
  long v = strtol(p, &end, 10);
  if (v > 1000000 || strcmp(end, d + 2)) return false;
  *layer = (int)v;
  return true;
}

gt_status ck_hf_map_param(const ck_hf_naming *n, const char *param, ck_hf_map *out) {
  memset(out, 0, sizeof *out);
  if (!n->rows) {
    snprintf(out->name, sizeof out->name, "%s", param);
    out->layout = CK_HF_SAME;
    return GT_OK;
  }
  for (int i = 0; i < n->nrows; i++) {
    int layer;
    if (!match(n->rows[i].giant, param, &layer)) continue;
      /* The patterns are the table's own, with one %d where the layer has one. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(out->name, sizeof out->name, n->rows[i].file, layer);
#pragma GCC diagnostic pop
    if (n->rows[i].fallback) snprintf(out->fallback, sizeof out->fallback, "%s", n->rows[i].fallback);
    out->layout = n->rows[i].layout;
    return GT_OK;
  }
  return gt_errorf(GT_ENOTFOUND,
                   "parameter %s has no name under %s: that naming is for a %s model built as "
                   "examples/%s builds it (the naming giant takes any model)",
                   param, n->name, n->rows == llama ? "Llama" : "GPT-2", n->rows == llama ? "llama" : "gpt");
}

int ck_hf_shape(ck_hf_layout l, int ndim, const int64_t *shape, int64_t *out) {
  int64_t rows = 1, numel = 1;
  for (int d = 0; d < ndim; d++) numel *= shape[d];
  for (int d = 0; d + 1 < ndim; d++) rows *= shape[d];
  switch (l) {
    case CK_HF_FLAT: out[0] = numel; return 1;
    case CK_HF_TRANSPOSE:
      if (ndim < 2) break;
      out[0] = shape[ndim - 1];
      out[1] = rows;
      return 2;
    case CK_HF_SAME: break;
  }
  for (int d = 0; d < ndim; d++) out[d] = shape[d];
  return ndim;
}

void ck_hf_convert(ck_hf_layout l, bool to_file, int ndim, const int64_t *shape, const float *src, float *dst) {
  size_t numel = 1, rows = 1, cols = ndim > 0 ? (size_t)shape[ndim - 1] : 1;
  for (int d = 0; d < ndim; d++) numel *= (size_t)shape[d];
  for (int d = 0; d + 1 < ndim; d++) rows *= (size_t)shape[d];
  if (l != CK_HF_TRANSPOSE || ndim < 2) {
    memcpy(dst, src, numel * sizeof *dst);
    return;
  }
  /* Giant's (rows, cols) and the file's (cols, rows). */
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      if (to_file)
        dst[c * rows + r] = src[r * cols + c];
      else
        dst[r * cols + c] = src[c * rows + r];
    }
}
