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

/* The Llama family's decoder block, pre-RMSNorm, without biases:
 *   x = x + o(gqa(rope(q(n)), rope(k(n)), v(n))), n = rmsnorm(x)
 *   x = x + down(silu(gate(n)) * up(n)),          n = rmsnorm(x)
 * Grouped-query attention (n_kv_heads key/value heads, each for
 * NH/n_kv_heads query heads), rotary position embeddings in Hugging Face's
 * layout. Parameters, with Hugging Face LlamaForCausalLM's names within a
 * decoder layer and its shapes (out, in): "input_layernorm.weight" (C),
 * "self_attn.q_proj.weight" (C,C), "self_attn.k_proj.weight" and
 * "self_attn.v_proj.weight" (KV,C) with KV = n_kv_heads*C/NH,
 * "self_attn.o_proj.weight" (C,C), "post_attention_layernorm.weight" (C),
 * "mlp.gate_proj.weight" and "mlp.up_proj.weight" (mlp_hidden,C),
 * "mlp.down_proj.weight" (C,mlp_hidden). Split over tp ranks, tp must
 * divide NH, n_kv_heads and mlp_hidden; no sequence parallelism. */
typedef struct gt_llama_block_config {
  int C, NH;
  int n_kv_heads;   /* 0 = NH (multi-head attention) */
  int mlp_hidden;   /* the MLP's intermediate size */
  float eps;        /* RMSNorm's; 0 = 1e-5 */
  float rope_theta; /* the rotary base; 0 = 10000 */
  float rope_scale; /* linear position scaling (positions divided by it); 0 = 1, none */
  float init_std;   /* the matrices' N(0, std) init; 0 = 0.02 */
} gt_llama_block_config;
extern const gt_layer_type gt_llama_block_layer;
/* A built llama block's settings, defaults filled in (the whole block's,
 * not a rank's share; init_std is not kept): what a file's configuration
 * is checked against. GT_EINVAL for any other layer. */
gt_status gt_llama_block_settings(const gt_layer *l, gt_llama_block_config *out);

/* RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight. */
typedef struct gt_rmsnorm_config {
  int C;
  float eps; /* 0 = 1e-5 */
} gt_rmsnorm_config;
extern const gt_layer_type gt_rmsnorm_layer; /* param "weight" (C) */

GT_API_END
#endif
