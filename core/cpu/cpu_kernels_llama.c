/* The layers of the Llama family on the CPU: RMSNorm, rotary position
 * embeddings and SwiGLU, forward and backward.
 *
 * As in cpu_kernels_nn.c, gradients summed over rows (RMSNorm's weight) are
 * split by channel across threads, each thread adding the rows in order, so
 * the result does not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

gt_status GT_CPU_KERNEL(rmsnorm_forward)(gt_backend *be, float *out, float *rstd, const float *inp, const float *w,
                                         float eps, int N, int C) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * C >= GT_CPU_PAR_MIN)
  for (int i = 0; i < N; i++) {
    const float *x = inp + (int64_t)i * C;
    float *o = out + (int64_t)i * C;
    float s = 1.0f / sqrtf(gt_cpu_sumsq_dev(x, 0.0f, C) / (float)C + eps);
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
    rstd[i] = s;
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(rmsnorm_backward)(gt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                          const float *w, const float *rstd, int N, int C) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel num_threads(nt) if ((int64_t)N * C >= GT_CPU_PAR_MIN)
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < N; i++) {
      const float *x = inp + (int64_t)i * C, *d = dout + (int64_t)i * C;
      float *dx = dinp + (int64_t)i * C, s = rstd[i];
      /* dx = s w dout - x s^3 mean(w dout x): rstd depends on every x. */
      float k = gt_cpu_dot_dev(w, d, x, 0.0f, C) * s * s * s / (float)C;
      for (int c = 0; c < C; c++) dx[c] += s * w[c] * d[c] - x[c] * k;
    }
    int64_t c0, c1;
    gt_cpu_share(C, 16, &c0, &c1);
    for (int i = 0; i < N && c0 < c1; i++) {
      const float *x = inp + (int64_t)i * C, *d = dout + (int64_t)i * C;
      float s = rstd[i];
      for (int64_t c = c0; c < c1; c++) dw[c] += x[c] * s * d[c];
    }
  }
  return GT_OK;
}

/* cos and sin of every position's angles, (T, hs/2) each: a row's heads
 * share them, so they are computed once per call, in double, since t *
 * theta^(-2i/hs) for long sequences loses digits in float. */
static gt_status rope_table(gt_backend *be, int T, int hs, float theta, float scale, float **table) {
  int half = hs / 2, nt = gt_cpu_threads(be);
  float *tab = malloc((size_t)T * hs * sizeof *tab);
  if (!tab) return gt_errorf(GT_ENOMEM, "cpu: rope: out of memory for the angles of %d positions", T);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)T * half >= GT_CPU_PAR_MIN / 8)
  for (int t = 0; t < T; t++) {
    float *cs = tab + (int64_t)t * hs;
    for (int i = 0; i < half; i++) {
      double a = ((double)t / scale) * pow((double)theta, -2.0 * i / hs);
      cs[i] = (float)cos(a);
      cs[half + i] = (float)sin(a);
    }
  }
  *table = tab;
  return GT_OK;
}

/* out = R x (sign 1) or R^T x (sign -1) for the heads of every row; in
 * place is fine, each pair is read before it is written. */
static gt_status rope_apply(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld,
                            float theta, float scale, float sign) {
  if (B == 0 || T == 0 || NH == 0 || hs == 0) return GT_OK;
  float *tab;
  GT_TRY(rope_table(be, T, hs, theta, scale, &tab));
  int half = hs / 2, nt = gt_cpu_threads(be);
  int64_t rows = (int64_t)B * T;
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * NH * hs >= GT_CPU_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *cs = tab + (r % T) * hs, *sn = cs + half;
    for (int h = 0; h < NH; h++) {
      const float *x = inp + r * ld + (int64_t)h * hs;
      float *y = out + r * ld + (int64_t)h * hs;
      for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[half + i], c = cs[i], s = sign * sn[i];
        y[i] = x0 * c - x1 * s;
        y[half + i] = x1 * c + x0 * s;
      }
    }
  }
  free(tab);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(rope_forward)(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs,
                                      int ld, float theta, float scale) {
  return rope_apply(be, out, inp, B, T, NH, hs, ld, theta, scale, 1.0f);
}

gt_status GT_CPU_KERNEL(rope_backward)(gt_backend *be, float *dinp, const float *dout, int B, int T, int NH, int hs,
                                       int ld, float theta, float scale) {
  /* A rotation's transpose is the rotation back. */
  return rope_apply(be, dinp, dout, B, T, NH, hs, ld, theta, scale, -1.0f);
}

gt_status GT_CPU_KERNEL(swiglu_forward)(gt_backend *be, float *out, const float *gate, const float *up, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + gt_cpu_expf(-g)) * up[i];
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(swiglu_backward)(gt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                         const float *up, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float g = gate[i], s = 1.0f / (1.0f + gt_cpu_expf(-g)), d = dout[i];
    /* silu'(g) = s (1 + g (1 - s)) */
    dgate[i] += d * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] += d * g * s;
  }
  return GT_OK;
}
