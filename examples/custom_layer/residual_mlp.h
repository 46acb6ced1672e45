/* A layer type written outside the library, against the public layer
 * interface only: out = x + fc2(gelu(fc1(x))). */
#ifndef GIANT_EXAMPLE_RESIDUAL_MLP_H
#define GIANT_EXAMPLE_RESIDUAL_MLP_H

#include "giant/giant.h"

typedef struct residual_mlp_config {
  int C;      /* features in and out */
  int hidden; /* width of the hidden layer */
} residual_mlp_config;

extern const gt_layer_type residual_mlp_layer;

#endif
