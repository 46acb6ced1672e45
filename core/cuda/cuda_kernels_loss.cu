/* Softmax and cross-entropy over the vocabulary on CUDA, one block per row.
 *
 * Targets are checked on the host, by the model, before they are uploaded;
 * the device check that costs a stream synchronisation per call runs only
 * with GT_CUDA_CHECK_IDS=1 (see gt_cuda_check_ids). A target outside [0, V)
 * is otherwise an ignored row here, so it cannot make a kernel read past
 * its row.
 */
#include <math.h>

#include "core/cuda/cuda_internal.h"

#define XENT_THREADS 512

__global__ void softmax_xent_forward_kernel(float *losses, float *probs, const float *logits, const int32_t *targets,
                                            int V) {
  int64_t i = blockIdx.x;
  /* probs may alias logits: every element is read and written by one
   * thread only, and x[tgt] is read before the reductions' barriers, so
   * before any thread writes. */
  const float *x = logits + i * V;
  float *p = probs + i * V;
  int tgt = targets[i];
  if (tgt >= V) tgt = -1; /* see gt_cuda_check_ids */
  float x_tgt = tgt >= 0 ? x[tgt] : 0.0f;
  float mx, sum;
  gt_block_max_sumexp(x, V, &mx, &sum);
  float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - mx) * inv;
  /* log(sum) - (x_t - max) rather than -log(p_t): no log(0) when the
   * target's probability underflows. */
  if (threadIdx.x == 0 && losses) losses[i] = tgt >= 0 ? logf(sum) - (x_tgt - mx) : 0.0f;
}

__global__ void softmax_xent_backward_kernel(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                             int V) {
  int64_t i = blockIdx.x;
  const float *p = probs + i * V;
  float *d = dlogits + i * V;
  int tgt = targets[i];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float pj = p[j];
    d[j] = tgt < 0 || tgt >= V ? 0.0f : (j == tgt ? (pj - 1.0f) * dloss : pj * dloss);
  }
}

/* A target the kernel would index past the row with; the sizes were
 * checked by the gt_op_* wrapper. */
static gt_status check_targets(gt_backend *be, const char *op, const int32_t *targets, int N, int V) {
  int64_t row;
  int32_t val;
  /* Negative targets are ignored rows, not errors. */
  GT_TRY(gt_cuda_check_ids(be, targets, N, INT32_MIN, V, &row, &val));
  if (row >= 0)
    return gt_errorf(GT_ERANGE,
                     "%s: %s: target id %d at position %lld is not below the vocabulary size V=%d; "
                     "check that the data was tokenized for this model",
                     be->name, op, (int)val, (long long)row, V);
  return GT_OK;
}

gt_status gt_cuda_softmax_xent_forward(gt_backend *be, float *losses, float *probs, const float *logits,
                                       const int32_t *targets, int N, int V) {
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(check_targets(be, "softmax_xent_forward", targets, N, V));
  if (N == 0) return GT_OK;
  softmax_xent_forward_kernel<<<N, XENT_THREADS, 0, gt_cuda_stream(be)>>>(losses, probs, logits, targets, V);
  return gt_cuda_launched(be, "softmax_xent_forward");
}

gt_status gt_cuda_softmax_xent_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                        float dloss, int N, int V) {
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(check_targets(be, "softmax_xent_backward", targets, N, V));
  if (N == 0) return GT_OK;
  softmax_xent_backward_kernel<<<N, XENT_THREADS, 0, gt_cuda_stream(be)>>>(dlogits, probs, targets, dloss, V);
  return gt_cuda_launched(be, "softmax_xent_backward");
}
