/* Reductions, scaling and bf16 conversions on the CPU. */
#include <stdint.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

#define MAX_PARTIALS 256

gt_status GT_CPU_KERNEL(sum_squares)(gt_backend *be, double *out, const float *x, size_t n) {
  int nt = gt_cpu_threads(be);
  if (nt > MAX_PARTIALS) nt = MAX_PARTIALS;
  int64_t len = (int64_t)n;
  /* One partial per thread over a fixed share, summed in thread order: the
   * same bits every call for a given thread count. */
  double partial[MAX_PARTIALS] = {0};
  int used = 1;
#pragma omp parallel num_threads(nt) if (len >= GT_CPU_PAR_MIN)
  {
    int64_t lo, hi;
    gt_cpu_share(len, 16, &lo, &hi);
    double s = gt_cpu_sumsq_f64(x + lo, hi - lo);
    partial[omp_get_thread_num()] = s;
#pragma omp single
    used = omp_get_num_threads();
  }
  double total = 0.0;
  for (int t = 0; t < used; t++) total += partial[t];
  *out = total;
  return GT_OK;
}

gt_status GT_CPU_KERNEL(scale)(gt_backend *be, float *x, float s, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) x[i] *= s;
  return GT_OK;
}

/* Same rounding as gt_f32_to_bf16 (gt_cpu_bf16_round). */
gt_status GT_CPU_KERNEL(f32_to_bf16)(gt_backend *be, uint16_t *dst, const float *src, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) dst[i] = gt_cpu_bf16_round(src[i]);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(bf16_to_f32)(gt_backend *be, float *dst, const uint16_t *src, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    uint32_t u = (uint32_t)src[i] << 16;
    memcpy(&dst[i], &u, sizeof u);
  }
  return GT_OK;
}
