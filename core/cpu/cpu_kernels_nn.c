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

/* Products with at most this many output rows run as one single-threaded
 * sgemm per thread over a share of the rows, inside one parallel region
 * that also does the bias: one fork and join instead of two or three, and
 * no waits between OpenBLAS's threads, at the price of each thread packing
 * the shared operand itself (2 threads, AMD EPYC AVX2, the GPT block's
 * products at N=1024, C=256..1024: forward up to 10% faster, backward even
 * within the noise; the LM head's 8192-row weight gradient was slower
 * split). Each element's sum runs over k in the same order either way. */
#define ROW_SPLIT_MAX 2048

static bool row_split(int nt, int m) { return nt > 1 && m <= ROW_SPLIT_MAX && m >= 64 * nt; }

/* Rows [r0, r1) of C (m x n) = alpha op(A) op(B) + beta C, row-major. */
static void sgemm_rows(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int64_t r0, int64_t r1, int n, int k,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (r0 >= r1) return;
  const float *ar = ta == CblasNoTrans ? a + r0 * lda : a + r0;
  cblas_sgemm(CblasRowMajor, ta, tb, (int)(r1 - r0), n, k, 1.0f, ar, lda, b, ldb, beta, c + r0 * ldc, ldc);
}

/* Rows [r0, r1) of out start from the bias, or are overwritten by sgemm. */
static void bias_rows(float *out, const float *bias, int64_t r0, int64_t r1, int OC) {
  for (int64_t i = r0; bias && i < r1; i++) memcpy(out + i * OC, bias, (size_t)OC * sizeof(float));
}

gt_status GT_CPU_KERNEL(linear_forward)(gt_backend *be, float *out, const float *inp, const float *w, const float *bias,
                                        int N, int C, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  int nt = gt_cpu_threads(be);
  if (C > 0 && row_split(nt, N)) {
#pragma omp parallel num_threads(nt)
    {
      int64_t r0, r1;
      gt_cpu_share(N, 16, &r0, &r1);
      bias_rows(out, bias, r0, r1, OC);
      sgemm_rows(CblasNoTrans, CblasTrans, r0, r1, OC, C, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
    }
    return GT_OK;
  }
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
  int nt = gt_cpu_threads(be); /* also sizes OpenBLAS's team */
  bool split_din = C > 0 && dinp && row_split(nt, N), split_dw = C > 0 && row_split(nt, OC);
  if (split_din || split_dw) {
    /* One region: each thread its rows of dinp, then its rows of dw and
     * the same channels of dbias, summed over rows in order as
     * bias_backward sums them. */
#pragma omp parallel num_threads(nt)
    {
      int64_t r0, r1;
      if (split_din) {
        gt_cpu_share(N, 16, &r0, &r1);
        sgemm_rows(CblasNoTrans, CblasNoTrans, r0, r1, C, OC, dout, OC, w, C, 1.0f, dinp, C);
      }
      if (split_dw) {
        gt_cpu_share(OC, 16, &r0, &r1);
        sgemm_rows(CblasTrans, CblasNoTrans, r0, r1, C, N, dout, OC, inp, C, 1.0f, dw, C);
        for (int i = 0; dbias && i < N && r0 < r1; i++) {
          const float *d = dout + (int64_t)i * OC;
          for (int64_t c = r0; c < r1; c++) dbias[c] += d[c];
        }
      }
    }
  }
  if (C > 0) {
    if (dinp && !split_din)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    if (!split_dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
  }
  return dbias && !split_dw ? GT_CPU_KERNEL(bias_backward)(be, dbias, dout, N, OC) : GT_OK;
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
