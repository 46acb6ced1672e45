/* Transformer layers on the CPU: embedding, layernorm, linear, GELU and
 * residual, forward and backward.
 *
 * Backward kernels accumulate. Gradients summed over rows (weights, biases,
 * embeddings) are split by channel across threads, each thread adding the
 * rows in order, so the result does not depend on the thread count.
 */
#include <cblas.h>
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

#define LN_EPS 1e-5f
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

gt_status GT_CPU_KERNEL(embedding_forward)(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                           const float *wpe, int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  for (int64_t i = 0; i < N; i++)
    if (tokens[i] < 0)
      return gt_errorf(GT_ERANGE, "embedding_forward: token id %d at position %lld is negative", tokens[i],
                       (long long)i);
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < N; i++) {
    float *o = out + i * C;
    const float *e = wte + (int64_t)tokens[i] * C;
    if (wpe) {
      const float *p = wpe + (i % T) * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else {
      for (int c = 0; c < C; c++) o[c] = e[c];
    }
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(embedding_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                            const int32_t *tokens, int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  for (int64_t i = 0; i < N; i++)
    if (tokens[i] < 0)
      return gt_errorf(GT_ERANGE, "embedding_backward: token id %d at position %lld is negative", tokens[i],
                       (long long)i);
  int nt = gt_cpu_threads(be);
  /* Repeated tokens add into the same row: split channels, not rows. */
#pragma omp parallel num_threads(nt) if (N * C >= GT_CPU_PAR_MIN)
  {
    int64_t c0, c1;
    gt_cpu_share(C, 16, &c0, &c1);
    for (int64_t i = 0; i < N && c0 < c1; i++) {
      const float *d = dout + i * C;
      float *e = dwte + (int64_t)tokens[i] * C;
      for (int64_t c = c0; c < c1; c++) e[c] += d[c];
      if (dwpe) {
        float *p = dwpe + (i % T) * C;
        for (int64_t c = c0; c < c1; c++) p[c] += d[c];
      }
    }
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(layernorm_forward)(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                           const float *w, const float *b, int N, int C) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * C >= GT_CPU_PAR_MIN)
  for (int i = 0; i < N; i++) {
    const float *x = inp + (int64_t)i * C;
    float *o = out + (int64_t)i * C;
    float m = gt_cpu_sum(x, C) / (float)C;
    float v = gt_cpu_sumsq_dev(x, m, C) / (float)C;
    float s = 1.0f / sqrtf(v + LN_EPS);
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    if (mean) mean[i] = m;
    if (rstd) rstd[i] = s;
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(layernorm_backward)(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                            const float *inp, const float *w, const float *mean, const float *rstd,
                                            int N, int C) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel num_threads(nt) if ((int64_t)N * C >= GT_CPU_PAR_MIN)
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < N; i++) {
      const float *x = inp + (int64_t)i * C, *d = dout + (int64_t)i * C;
      float *dx = dinp + (int64_t)i * C;
      float m = mean[i], s = rstd[i];
      /* mean of w*dout, and of w*dout*(x - mean): the rstd factor is
       * applied once outside the sum. */
      float dn_mean = gt_cpu_dot(w, d, C) / (float)C;
      float dn_n_mean = gt_cpu_dot_dev(w, d, x, m, C) * s / (float)C;
      for (int c = 0; c < C; c++) {
        float n = (x[c] - m) * s;
        dx[c] += (w[c] * d[c] - dn_mean - n * dn_n_mean) * s;
      }
    }
    int64_t c0, c1;
    gt_cpu_share(C, 16, &c0, &c1);
    for (int i = 0; i < N && c0 < c1; i++) {
      const float *x = inp + (int64_t)i * C, *d = dout + (int64_t)i * C;
      float m = mean[i], s = rstd[i];
      for (int64_t c = c0; c < c1; c++) {
        dw[c] += (x[c] - m) * s * d[c];
        db[c] += d[c];
      }
    }
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(linear_forward)(gt_backend *be, float *out, const float *inp, const float *w, const float *bias,
                                        int N, int C, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  int nt = gt_cpu_threads(be);
  if (bias) {
    /* Start from the bias and let sgemm add into it (beta = 1). */
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * OC >= GT_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) memcpy(out + (int64_t)i * OC, bias, (size_t)OC * sizeof(float));
  }
  if (C == 0) {
    if (!bias) memset(out, 0, (size_t)N * OC * sizeof(float));
    return GT_OK;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(linear_backward)(gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                         const float *inp, const float *w, int N, int C, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  (void)gt_cpu_threads(be); /* sizes OpenBLAS's team */
  if (C > 0) {
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
  }
  return dbias ? GT_CPU_KERNEL(bias_backward)(be, dbias, dout, N, OC) : GT_OK;
}

/* 0.5 x (1 + tanh u) = x * sigmoid(2u): one exp and one division per
 * element, and sech^2 u = 4 s (1 - s) for the backward. */
gt_status GT_CPU_KERNEL(gelu_forward)(gt_backend *be, float *out, const float *inp, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float x = inp[i];
    float u = GELU_K * (x + GELU_C * x * x * x);
    out[i] = x / (1.0f + gt_cpu_expf(-2.0f * u));
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(gelu_backward)(gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) {
    float x = inp[i];
    float u = GELU_K * (x + GELU_C * x * x * x);
    float s = 1.0f / (1.0f + gt_cpu_expf(-2.0f * u));
    float g = s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    dinp[i] += g * dout[i];
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(residual_forward)(gt_backend *be, float *out, const float *a, const float *b, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
  for (int64_t i = 0; i < len; i++) out[i] = a[i] + b[i];
  return GT_OK;
}

gt_status GT_CPU_KERNEL(residual_backward)(gt_backend *be, float *da, float *db, const float *dout, size_t n) {
  int nt = gt_cpu_threads(be);
  int64_t len = (int64_t)n;
  /* Either side may be NULL: a branch without a gradient. */
  for (int k = 0; k < 2; k++) {
    float *d = k ? db : da;
    if (!d) continue;
#pragma omp parallel for simd num_threads(nt) schedule(simd : static) if (len >= GT_CPU_PAR_MIN)
    for (int64_t i = 0; i < len; i++) d[i] += dout[i];
  }
  return GT_OK;
}
