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

/* Zeroes nfloats floats on the compute stream. */
#define GT_ZERO(be, ptr, nfloats) gt_backend_memset((be), (ptr), 0, (size_t)(nfloats) * sizeof(float), NULL)

/* Token rows this rank holds between layers: N, or N/p on sequence shards. */
static inline gt_status gt_layer_rows(const gt_layer *self, const gt_layer_ctx *ctx, int *rows) {
  int N = ctx->B * ctx->T;
  if (!gt_layer_seq_parallel(self)) {
    *rows = N;
    return GT_OK;
  }
  if (N % self->tp->size)
    return gt_errorf(GT_EINVAL,
                     "sequence parallelism needs B*T (%d) divisible by tp=%d; change the batch or "
                     "sequence length",
                     N, self->tp->size);
  *rows = N / self->tp->size;
  return GT_OK;
}

/* LayerNorm backward on a sequence shard: the weight and bias gradients of
 * one shard are partial sums, completed over the tensor-parallel group
 * before they are added, so the replicated LayerNorm stays identical on
 * every rank. tmp holds 2*C floats. */
static inline gt_status gt_layernorm_backward_shard(gt_layer *self, const gt_layer_ctx *ctx, float *din, float *dw,
                                                    float *db, const float *dout, const float *inp, const float *w,
                                                    const float *mean, const float *rstd, int rows, int C, float *tmp) {
  gt_backend *be = ctx->be;
  if (!gt_layer_seq_parallel(self)) return gt_op_layernorm_backward(be, din, dw, db, dout, inp, w, mean, rstd, rows, C);
  GT_TRY(GT_ZERO(be, tmp, 2 * (size_t)C));
  GT_TRY(gt_op_layernorm_backward(be, din, tmp, tmp + C, dout, inp, w, mean, rstd, rows, C));
  GT_TRY(self->tp->allreduce_sum(self->tp, tmp, 2 * (size_t)C));
  GT_TRY(gt_op_residual_backward(be, dw, NULL, tmp, (size_t)C));
  return gt_op_residual_backward(be, db, NULL, tmp + C, (size_t)C);
}

#endif
