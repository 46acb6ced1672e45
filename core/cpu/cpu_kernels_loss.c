/* Softmax and cross-entropy over the vocabulary, forward and backward. */
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

/* A target the kernel would index past the row with; the sizes were
 * checked by the gt_op_* wrapper. */
static gt_status check_targets(const char *op, const int32_t *targets, int N, int V) {
  for (int i = 0; i < N; i++)
    if (targets[i] >= V)
      return gt_errorf(GT_ERANGE,
                       "%s: target id %d at position %d is not below the vocabulary size V=%d; "
                       "check that the data was tokenized for this model",
                       op, targets[i], i, V);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(softmax_xent_forward)(gt_backend *be, float *losses, float *probs, const float *logits,
                                              const int32_t *targets, int N, int V) {
  GT_TRY(check_targets("softmax_xent_forward", targets, N, V));
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * V >= GT_CPU_PAR_MIN)
  for (int i = 0; i < N; i++) {
    /* probs may alias logits: read what is needed before overwriting. */
    const float *x = logits + (int64_t)i * V;
    float *p = probs + (int64_t)i * V;
    int tgt = targets[i];
    float x_tgt = tgt >= 0 ? x[tgt] : 0.0f;
    float mx = gt_cpu_max(x, V);
    for (int j = 0; j < V; j++) p[j] = gt_cpu_expf(x[j] - mx);
    float sum = gt_cpu_sum(p, V);
    float inv = 1.0f / sum;
    for (int j = 0; j < V; j++) p[j] *= inv;
    /* log(sum) - (x_t - max) rather than -log(p_t): no log(0) when the
     * target's probability underflows. */
    if (losses) losses[i] = tgt >= 0 ? logf(sum) - (x_tgt - mx) : 0.0f;
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(softmax_xent_backward)(gt_backend *be, float *dlogits, const float *probs,
                                               const int32_t *targets, float dloss, int N, int V) {
  GT_TRY(check_targets("softmax_xent_backward", targets, N, V));
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * V >= GT_CPU_PAR_MIN)
  for (int i = 0; i < N; i++) {
    const float *p = probs + (int64_t)i * V;
    float *d = dlogits + (int64_t)i * V;
    int tgt = targets[i];
    if (tgt < 0) {
      memset(d, 0, (size_t)V * sizeof(float));
      continue;
    }
    float p_tgt = p[tgt]; /* before d, which may be p, overwrites it */
    for (int j = 0; j < V; j++) d[j] = p[j] * dloss;
    d[tgt] = (p_tgt - 1.0f) * dloss;
  }
  return GT_OK;
}
