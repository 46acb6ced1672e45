/* A GPT-2 style model written against Giant's public API: embedding, L
 * transformer blocks, final LayerNorm, tied LM head. The example trainer,
 * the benchmarks and the tests all build their GPT with this one function. */
#ifndef GIANT_EXAMPLE_GPT_H
#define GIANT_EXAMPLE_GPT_H

#include <stdbool.h>

#include "giant/giant.h"

/* The model's annotations (docs/annotations.md). Zero-initialised they are
 * the GPT's defaults: the whole model replicated and every layer split, as
 * many ways as the plan says. */
typedef struct gpt_annotations {
  int replicate;        /* replicate(n) around the model; 0: as the plan says */
  int split;            /* split(k) around the layers; 0: as the plan says */
  int stages;           /* stage(0) .. stage(stages-1), cutting the layers evenly; 0: none */
  int pipeline;         /* pipeline(m) around the stages; 0: none */
  int offload;          /* offload(w) around the model; 0: none */
  int zero;             /* zero(s) around the model, the ZeRO stage; 0: none */
  bool replicate_embed; /* the embedding and the first block in a replicated region, outside the split */
} gpt_annotations;

typedef struct gpt_config {
  int vocab_size, T_max, C, NH, L;
  bool tie_weights;
  gpt_annotations ann;
} gpt_config;

/* Adds the GPT's layers to an empty model (the caller then builds it). */
gt_status gpt_add_layers(gt_model *m, const gpt_config *c);
/* "replicate=2,split=2,stages=4,pipeline=8,offload=2,zero=2,embed" (any subset;
 * "embed" alone is replicate_embed) into *out. */
gt_status gpt_parse_annotations(const char *text, gpt_annotations *out);

#endif
