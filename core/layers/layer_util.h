/* Small helpers shared by the built-in layers. */
#ifndef GIANT_LAYER_UTIL_H
#define GIANT_LAYER_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "giant/layer.h"

/* Copies a layer's config into self->state so the caller's struct may go. */
static inline gt_status gt_layer_keep_config(gt_layer *self, const void *config, size_t size) {
  if (!config) return gt_errorf(GT_EINVAL, "a configuration is required");
  self->state = malloc(size);
  if (!self->state) return gt_errorf(GT_ENOMEM, "out of memory");
  memcpy(self->state, config, size);
  return GT_OK;
}

static inline void gt_layer_free_state(gt_layer *self) {
  free(self->state);
  self->state = NULL;
}

#define GT_ZERO(be, ptr, nfloats) \
  (be)->ops->memset((be), (ptr), 0, (size_t)(nfloats) * sizeof(float), (be)->compute)

#endif
