/* The GPT model definition: a handful of gt_model_add calls, inside the
 * annotation scopes that describe its layout. */
#include "gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gt_status add_layer(gt_model *m, const gpt_config *c, int i) {
  char name[32];
  if (i == 0) {
    gt_embedding_config emb = {.vocab_size = c->vocab_size, .C = c->C, .T_max = c->T_max, .positional = true};
    return gt_model_add(m, &gt_embedding_layer, "embed", &emb, NULL);
  }
  if (i <= c->L) {
    snprintf(name, sizeof name, "h%d", i - 1);
    gt_block_config blk = {.C = c->C, .NH = c->NH, .n_layers_total = c->L};
    return gt_model_add(m, &gt_block_layer, name, &blk, NULL);
  }
  if (i == c->L + 1) {
    gt_layernorm_config lnf = {.C = c->C};
    return gt_model_add(m, &gt_layernorm_layer, "ln_f", &lnf, NULL);
  }
  gt_lm_head_config head = {.C = c->C, .vocab_size = c->vocab_size, .tie_to = c->tie_weights ? "embed" : NULL};
  return gt_model_add(m, &gt_lm_head_layer, "lm_head", &head, NULL);
}

/* The scopes, outermost first: replicate(n) around the model, offload(w),
 * zero(s) and pipeline(m) inside it, then stage(i) around each even share of the
 * layers, and in each stage a split(k) around its layers, except for the
 * embedding and first block when they form a replicated region (Whale's
 * replicated embedding before a split body; its weights cannot be tied to
 * the split head). At one process, and at any layout without tensor
 * parallelism, the scopes change nothing. */
gt_status gpt_add_layers(gt_model *m, const gpt_config *c) {
  const gpt_annotations *a = &c->ann;
  int n = c->L + 3;
  if (a->replicate_embed && c->tie_weights)
    return gt_errorf(GT_EINVAL,
                     "a replicated embedding (annotation 'embed') cannot share its weights with the split "
                     "head: untie them (--untied)");
  if (a->stages > n)
    return gt_errorf(GT_EINVAL, "stages=%d: the model has %d layers, and each stage needs one", a->stages, n);
  GT_TRY(gt_model_scope_begin(m, GT_SCOPE_REPLICATE, a->replicate));
  if (a->offload) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_OFFLOAD, a->offload));
  if (a->zero) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_ZERO, a->zero));
  if (a->pipeline) GT_TRY(gt_model_scope_begin(m, GT_SCOPE_PIPELINE, a->pipeline));
  int stage = -1;
  bool in_split = false, in_region = false;
  for (int i = 0; i < n; i++) {
    int s = a->stages ? (int)((long)i * a->stages / n) : -1;
    bool region = a->replicate_embed && i <= 1;
    if (s != stage || region != in_region) { /* close what is open inside the stage */
      if (in_split || in_region) GT_TRY(gt_model_scope_end(m));
      in_split = in_region = false;
    }
    if (s != stage) {
      if (stage >= 0) GT_TRY(gt_model_scope_end(m));
      GT_TRY(gt_model_scope_begin(m, GT_SCOPE_STAGE, s));
      stage = s;
    }
    if (region && !in_region) {
      GT_TRY(gt_model_scope_begin(m, GT_SCOPE_REPLICATE, 0));
      in_region = true;
    }
    if (!region && !in_split) {
      GT_TRY(gt_model_scope_begin(m, GT_SCOPE_SPLIT, a->split));
      in_split = true;
    }
    GT_TRY(add_layer(m, c, i));
  }
  int open = (in_split || in_region) + (stage >= 0) + (a->pipeline > 0) + (a->offload > 0) + (a->zero > 0) + 1;
  for (int k = 0; k < open; k++) GT_TRY(gt_model_scope_end(m));
  return GT_OK;
}

gt_status gpt_parse_annotations(const char *text, gpt_annotations *out) {
  memset(out, 0, sizeof *out);
  if (!text || !*text) return GT_OK;
  const char *p = text;
  while (*p) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    if (len == 5 && !strncmp(p, "embed", 5)) {
      out->replicate_embed = true;
    } else {
      static const char *const keys[] = {"replicate", "split", "stages", "pipeline", "offload", "zero"};
      int *vals[] = {&out->replicate, &out->split, &out->stages, &out->pipeline, &out->offload, &out->zero};
      int k = -1;
      for (int j = 0; eq && j < 6; j++)
        if ((size_t)(eq - p) == strlen(keys[j]) && !strncmp(p, keys[j], strlen(keys[j]))) k = j;
      char *end = NULL;
      long v = eq ? strtol(eq + 1, &end, 10) : -1;
      if (k < 0)
        return gt_errorf(GT_EINVAL,
                         "annotations '%s': unknown '%.*s' (use replicate=, split=, stages=, "
                         "pipeline=, offload=, zero= and embed)",
                         text, (int)len, p);
      if (end != p + len || v < 0 || v > 1 << 20)
        return gt_errorf(GT_EINVAL, "annotations '%s': '%.*s' needs a count of 0 or more", text, (int)len, p);
      *vals[k] = (int)v;
    }
    p += len;
    if (*p) p++;
  }
  return GT_OK;
}
