/* Optimizer updates, element-wise, with PyTorch's semantics. */
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"
#include "core/backend_engine.h"

/* AdamW as torch.optim.AdamW: decoupled weight decay, then Adam with bias
 * correction. The per-call factors are computed once, in double as
 * PyTorch's are, outside the loop. */
typedef struct adamw_k {
  float decay, b1, b2, gs, eps, step_size, bc2_sqrt;
} adamw_k;

static adamw_k adamw_factors(const gt_adamw_args *a) {
  return (adamw_k){
      .decay = 1.0f - a->lr * a->weight_decay,
      .b1 = a->beta1,
      .b2 = a->beta2,
      .gs = a->grad_scale,
      .eps = a->eps,
      .step_size = (float)(a->lr / (1.0 - pow(a->beta1, a->step))),
      .bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, a->step)),
  };
}

/* One element: updates *m and *v and returns the new parameter. Both
 * AdamW kernels inline this one expression, so their fp32 results are the
 * same bits; the file is compiled without FMA contraction (CMakeLists.txt)
 * so that every instruction-set level gives those bits too. */
static inline float adamw_elem(adamw_k k, float p, float grad, float *m, float *v) {
  float g = grad * k.gs;
  float mi = k.b1 * *m + (1.0f - k.b1) * g;
  float vi = k.b2 * *v + (1.0f - k.b2) * g * g;
  *m = mi;
  *v = vi;
  float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
  return p * k.decay - k.step_size * mi / denom;
}

gt_status GT_CPU_KERNEL(adamw_update)(gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                                      const gt_adamw_args *a) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
  adamw_k k = adamw_factors(a);
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) param[i] = adamw_elem(k, param[i], grad[i], &m[i], &v[i]);
  return GT_OK;
}

/* The bf16 copy is rounded from the new value while it is in a register:
 * one pass over the state instead of the update and then f32_to_bf16. */
gt_status GT_CPU_KERNEL(adamw_update_bf16)(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                           uint16_t *param_bf16, size_t n, const gt_adamw_args *a) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
  adamw_k k = adamw_factors(a);
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float p = adamw_elem(k, param[i], grad[i], &m[i], &v[i]);
    param[i] = p;
    param_bf16[i] = gt_cpu_bf16_round(p);
  }
  return GT_OK;
}

/* SGD as torch.optim.SGD without dampening: weight decay joins the
 * gradient; a zeroed momentum buffer makes the first step's buffer the
 * gradient, as PyTorch's does. */
gt_status GT_CPU_KERNEL(sgd_update)(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
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
