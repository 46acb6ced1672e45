/* The Llama model definition: a handful of gt_model_add calls, inside the
 * annotation scopes that describe its layout. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int llama_mlp_hidden(const llama_config *c) {
  if (c->mlp_hidden > 0) return c->mlp_hidden;
  int h = 2 * (4 * c->C) / 3;
  return (h + 31) / 32 * 32;
}

static gt_status add_layer(gt_model *m, const llama_config *c, int i) {
  char name[48];
  if (i == 0) {
    gt_embedding_config emb = {.vocab_size = c->vocab_size, .C = c->C, .T_max = c->T_max, .positional = false};
    return gt_model_add(m, &gt_embedding_layer, "model.embed_tokens", &emb, NULL);
  }
  if (i <= c->L) {
    snprintf(name, sizeof name, "model.layers.%d", i - 1);
    gt_llama_block_config blk = {.C = c->C,
                                 .NH = c->NH,
                                 .n_kv_heads = c->n_kv_heads,
                                 .mlp_hidden = llama_mlp_hidden(c),
                                 .eps = c->eps,
                                 .rope_theta = c->rope_theta,
                                 .rope_scale = c->rope_scale,
                                 .init_std = c->init_std};
    return gt_model_add(m, &gt_llama_block_layer, name, &blk, NULL);
  }
  if (i == c->L + 1) {
    gt_rmsnorm_config norm = {.C = c->C, .eps = c->eps};
    return gt_model_add(m, &gt_rmsnorm_layer, "model.norm", &norm, NULL);
  }
  gt_lm_head_config head = {.C = c->C, .vocab_size = c->vocab_size, .tie_to = NULL};
  return gt_model_add(m, &gt_lm_head_layer, "lm_head", &head, NULL);
}

/* The scopes, outermost first: replicate(n) around the model, offload(w),
 * zero(s) and pipeline(m) inside it, then stage(i) around each even share
 * of the layers, and in each stage a split(k) around its layers. At one
 * process, and at any layout without tensor parallelism, the scopes change
 * nothing. */
gt_status llama_add_layers(gt_model *m, const llama_config *c) {
  const llama_annotations *a = &c->ann;
  int n = c->L + 3;
  if (a->stages > n)
    return gt_errorf(GT_EINVAL, "stages=%d: the model has %d layers, and each stage needs one", a->stages, n);
  GT_TRY(gt_model_scope_begin(m, GT_SCOPE_REPLICATE, a->replicate));
  if (a->offload) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_OFFLOAD, a->offload));
  if (a->zero) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_ZERO, a->zero));
  if (a->pipeline) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_PIPELINE, a->pipeline));
  int stage = -1;
  for (int i = 0; i < n; i++) {
    int s = a->stages ? (int)((long)i * a->stages / n) : -1;
    if (s != stage || i == 0) {
      if (i > 0) GT_TRY(gt_model_scope_end(m)); /* the split */
      if (s != stage && stage >= 0) GT_TRY(gt_model_scope_end(m));
      if (s != stage) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_STAGE, s));
      stage = s;
      GT_TRY(gt_model_scope_begin(m, GT_SCOPE_SPLIT, a->split));
    }
    GT_TRY(add_layer(m, c, i));
  }
  int open = 1 + (stage >= 0) + (a->pipeline > 0) + (a->zero > 0) + (a->offload > 0) + 1;
  for (int k = 0; k < open; k++) GT_TRY(gt_model_scope_end(m));
  return GT_OK;
}

gt_status llama_parse_annotations(const char *text, llama_annotations *out) {
  memset(out, 0, sizeof *out);
  if (!text || !*text) return GT_OK;
  static const char *const keys[] = {"replicate", "split", "stages", "pipeline", "offload", "zero"};
  int *vals[] = {&out->replicate, &out->split, &out->stages, &out->pipeline, &out->offload, &out->zero};
  const char *p = text;
  while (*p) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    int k = -1;
    for (int j = 0; eq && j < 6; j++)
      if ((size_t)(eq - p) == strlen(keys[j]) && !strncmp(p, keys[j], strlen(keys[j]))) k = j;
    char *end = NULL;
    long v = eq ? strtol(eq + 1, &end, 10) : -1;
    if (k < 0)
      return gt_errorf(GT_EINVAL,
                       "annotations '%s': unknown '%.*s' (use replicate=, split=, stages=, pipeline=, offload= "
                       "and zero=)",
                       text, (int)len, p);
    if (end != p + len || v < 0 || v > 1 << 20)
      return gt_errorf(GT_EINVAL, "annotations '%s': '%.*s' needs a count of 0 or more", text, (int)len, p);
    *vals[k] = (int)v;
    p += len;
    if (*p) p++;
  }
  return GT_OK;
}
