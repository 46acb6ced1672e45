/* The built-in layer types and their configurations. */
#ifndef GIANT_LAYERS_H
#define GIANT_LAYERS_H

#include "giant/layer.h"

GT_API_BEGIN

/* Token embedding plus learned position embedding: tokens -> (B,T,C). */
typedef struct gt_embedding_config {
  int vocab_size, C, T_max;
  bool positional; /* add a learned (T_max, C) position embedding */
} gt_embedding_config;
extern const gt_layer_type gt_embedding_layer; /* params: "wte" (V,C), "wpe" (T_max,C) */

/* GPT-2 transformer block, pre-LayerNorm:
 *   x = x + proj(attn(ln1(x)));  x = x + fc2(gelu(fc1(ln2(x)))) */
typedef struct gt_block_config {
  int C, NH;
  int mlp_hidden;     /* 0 = 4*C */
  int n_layers_total; /* for GPT-2's 1/sqrt(2L) scaling of residual projections; 0 = none */
} gt_block_config;
extern const gt_layer_type gt_block_layer;

typedef struct gt_layernorm_config {
  int C;
} gt_layernorm_config;
extern const gt_layer_type gt_layernorm_layer; /* params "w", "b" */

typedef struct gt_linear_config {
  int in, out;
  bool bias;
} gt_linear_config;
extern const gt_layer_type gt_linear_layer; /* params "w" (out,in), "b" (out) */

/* Logits over the vocabulary and softmax cross-entropy against the targets.
 * With tie_to set to an embedding layer's name, the output matrix is that
 * layer's "wte" (weight tying). */
typedef struct gt_lm_head_config {
  int C, vocab_size;
  const char *tie_to; /* NULL = own weight matrix */
} gt_lm_head_config;
extern const gt_layer_type gt_lm_head_layer;

GT_API_END
#endif
