/* A Llama-family model written against Giant's public API: token
 * embedding, L decoder blocks (RMSNorm, grouped-query attention with
 * rotary embeddings, SwiGLU MLP), final RMSNorm and an untied LM head. The
 * example trainer and the tests build their Llama with this one function.
 *
 * Layer names follow Hugging Face LlamaForCausalLM, so parameter names map
 * onto its state dict (docs/llama.md):
 *   model.embed_tokens.wte      model.embed_tokens.weight
 *   model.layers.N.<name>       model.layers.N.<name>, the same
 *   model.norm.weight           model.norm.weight
 *   lm_head.w                   lm_head.weight */
#ifndef GIANT_EXAMPLE_LLAMA_H
#define GIANT_EXAMPLE_LLAMA_H

#include "giant/giant.h"

/* The model's annotations (docs/annotations.md), zero-initialised the
 * defaults: the whole model replicated and every layer split, as many ways
 * as the plan says. */
typedef struct llama_annotations {
  int replicate; /* replicate(n) around the model; 0: as the plan says */
  int split;     /* split(k) around the layers; 0: as the plan says */
  int stages;    /* stage(0) .. stage(stages-1), cutting the layers evenly; 0: none */
  int pipeline;  /* pipeline(m) around the stages; 0: none */
  int offload;   /* offload(w) around the model; 0: none */
  int zero;      /* zero(s) around the model, the ZeRO stage; 0: none */
} llama_annotations;

typedef struct llama_config {
  int vocab_size, T_max, C, NH, L;
  int n_kv_heads;   /* 0 = NH */
  int mlp_hidden;   /* 0 = Llama's rule: 2/3 of 4C, rounded up to a multiple of 32 */
  float eps;        /* RMSNorm's; 0 = 1e-5 */
  float rope_theta; /* 0 = 10000 */
  float rope_scale; /* linear position scaling; 0 = 1, none */
  float init_std;   /* the blocks' matrices' N(0, std) init; 0 = 0.02 */
  llama_annotations ann;
} llama_config;

/* The MLP width the config gives. */
int llama_mlp_hidden(const llama_config *c);
/* Adds the Llama's layers to an empty model (the caller then builds it). */
gt_status llama_add_layers(gt_model *m, const llama_config *c);
/* "replicate=2,split=2,stages=4,pipeline=8,offload=2,zero=2" (any subset)
 * into *out. */
gt_status llama_parse_annotations(const char *text, llama_annotations *out);

#endif
