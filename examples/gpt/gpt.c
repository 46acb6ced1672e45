/* The GPT model definition: a handful of gt_model_add calls. */
#include "gpt.h"

#include <stdio.h>

static gt_status add_layers(gt_model *m, const gpt_config *c) {
  gt_embedding_config emb = {.vocab_size = c->vocab_size, .C = c->C, .T_max = c->T_max, .positional = true};
  GT_TRY(gt_model_add(m, &gt_embedding_layer, "embed", &emb, NULL));
  for (int i = 0; i < c->L; i++) {
    char name[32];
    snprintf(name, sizeof name, "h%d", i);
    gt_block_config blk = {.C = c->C, .NH = c->NH, .n_layers_total = c->L};
    GT_TRY(gt_model_add(m, &gt_block_layer, name, &blk, NULL));
  }
  gt_layernorm_config lnf = {.C = c->C};
  GT_TRY(gt_model_add(m, &gt_layernorm_layer, "ln_f", &lnf, NULL));
  gt_lm_head_config head = {.C = c->C, .vocab_size = c->vocab_size, .tie_to = c->tie_weights ? "embed" : NULL};
  return gt_model_add(m, &gt_lm_head_layer, "lm_head", &head, NULL);
}

/* Annotations: the whole model is replicated over data-parallel ranks, and
 * every layer is split over tensor-parallel ranks (vocabulary-parallel
 * embedding and head, Megatron-style blocks). On one process, and at any
 * layout without tensor parallelism, the scopes change nothing. */
gt_status gpt_add_layers(gt_model *m, const gpt_config *c) {
  GT_TRY(gt_model_scope_begin(m, GT_SCOPE_REPLICATE, 0));
  GT_TRY(gt_model_scope_begin(m, GT_SCOPE_SPLIT, 0));
  GT_TRY(add_layers(m, c));
  GT_TRY(gt_model_scope_end(m));
  return gt_model_scope_end(m);
}
