/* A GPT-2 style model written against Giant's public API: embedding, L
 * transformer blocks, final LayerNorm, tied LM head. The example trainer,
 * the benchmarks and the tests all build their GPT with this one function. */
#ifndef GIANT_EXAMPLE_GPT_H
#define GIANT_EXAMPLE_GPT_H

#include <stdbool.h>

#include "giant/giant.h"

typedef struct gpt_config {
  int vocab_size, T_max, C, NH, L;
  bool tie_weights;
} gpt_config;

/* Adds the GPT's layers to an empty model (the caller then builds it). */
gt_status gpt_add_layers(gt_model *m, const gpt_config *c);

#endif
