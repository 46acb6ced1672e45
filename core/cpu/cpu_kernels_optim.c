/* Optimizer updates, element-wise, with PyTorch's semantics. */
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

/* AdamW as torch.optim.AdamW: decoupled weight decay, then Adam with bias
 * correction. */
gt_status gt_cpu_adamw_update(gt_backend *be, float *param, const float *grad, float *m, float *v,
                              size_t n, const gt_adamw_args *a) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
  float decay = 1.0f - a->lr * a->weight_decay;
  float b1 = a->beta1, b2 = a->beta2, gs = a->grad_scale, eps = a->eps;
  float step_size = (float)(a->lr / (1.0 - pow(a->beta1, a->step)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, a->step));
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float g = grad[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    param[i] = param[i] * decay - step_size * mi / denom;
  }
  return GT_OK;
}

/* SGD as torch.optim.SGD without dampening: weight decay joins the
 * gradient; a zeroed momentum buffer makes the first step's buffer the
 * gradient, as PyTorch's does. */
gt_status gt_cpu_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                            const gt_sgd_args *a) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
  float lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = a->grad_scale;
  if (mu == 0.0f) {
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
    for (int64_t i = 0; i < len; i++) param[i] -= lr * (grad[i] * gs + wd * param[i]);
    return GT_OK;
  }
  bool nesterov = a->nesterov;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float g = grad[i] * gs + wd * param[i];
    float b = mu * mom[i] + g;
    mom[i] = b;
    param[i] -= lr * (nesterov ? g + mu * b : b);
  }
  return GT_OK;
}
