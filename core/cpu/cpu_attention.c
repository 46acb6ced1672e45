/* Causal multi-head self-attention on the CPU on the whole score matrix
 * (attention_full_*), and the causal softmax on its own.
 *
 * Forward keeps the B*NH*T*T probabilities for backward, and backward
 * needs as much again as scratch: a model chooses these kernels with
 * GT_ATTENTION_FULL, and mixed-precision attention (core/attention_bf16.c)
 * is built on the same matrices and this file's softmax. The default,
 * GT_ATTENTION_TILED, is cpu_attention_tiled.c: the same function with a
 * log-sum-exp per row saved instead, the probabilities recomputed tile by
 * tile in backward.
 *
 * Each (batch, head) pair is a few small matrix products on strided views of
 * qkv: head h's queries start at column h*hs of rows 3C apart, its keys C
 * further on, its values 2C further. Pairs are spread over threads, each
 * running single-threaded sgemm, so heads never share output memory.
 *
 * Causality halves the work: rows are taken in blocks, and a block of rows
 * ending at row r1 only needs keys and values 0..r1-1.
 */
#include <cblas.h>
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

/* Rows per block: small enough to skip most of the masked half, large
 * enough that each sgemm stays efficient (measured: 32 rows at T=128, 64
 * at T=512). */
static int row_block(int T) {
  int rb = T / 8 / 32 * 32;
  return rb < 32 ? 32 : rb > 256 ? 256 : rb;
}

/* Row t of the scores keeps columns 0..t: softmax them, zero the rest. */
static void causal_softmax(float *a, int T, int r0, int r1) {
  for (int t = r0; t < r1; t++) {
    float *row = a + (int64_t)t * T;
    float mx = gt_cpu_max(row, t + 1);
    for (int j = 0; j <= t; j++) row[j] = gt_cpu_expf(row[j] - mx);
    float inv = 1.0f / gt_cpu_sum(row, t + 1);
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f;
  }
}

gt_status GT_CPU_KERNEL(attention_full_forward)(gt_backend *be, float *out, float *att, const float *qkv, int B, int T,
                                                int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int nt = gt_cpu_threads(be);
  int hs = C / NH, C3 = 3 * C, BH = B * NH;
  float scale = 1.0f / sqrtf((float)hs);
  int rb = row_block(T);
  /* Fewer pairs than threads: loop serially and let sgemm use the threads. */
#pragma omp parallel for num_threads(nt) schedule(static) if (BH >= nt)
  for (int bh = 0; bh < BH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (int64_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
    float *a = att + (int64_t)bh * T * T;
    float *y = out + (int64_t)b * T * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += rb) {
      int r1 = r0 + rb < T ? r0 + rb : T, rows = r1 - r0;
      float *ar = a + (int64_t)r0 * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale, q + (int64_t)r0 * C3, C3, k, C3, 0.0f,
                  ar, T);
      causal_softmax(a, T, r0, r1);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, ar, T, v, C3, 0.0f,
                  y + (int64_t)r0 * C, C);
    }
  }
  return GT_OK;
}

/* In place: datt becomes the gradient of the pre-softmax scores, times
 * the score scale, zero above the diagonal. */
static void causal_softmax_backward(float *da, const float *a, int T, int r0, int r1, float scale) {
  for (int t = r0; t < r1; t++) {
    float *d = da + (int64_t)t * T;
    const float *p = a + (int64_t)t * T;
    float dot = gt_cpu_dot(p, d, t + 1);
    for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot) * scale;
    for (int j = t + 1; j < T; j++) d[j] = 0.0f;
  }
}

gt_status GT_CPU_KERNEL(attention_full_backward)(gt_backend *be, float *dqkv, float *datt, const float *dout,
                                                 const float *qkv, const float *att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int nt = gt_cpu_threads(be);
  int hs = C / NH, C3 = 3 * C, BH = B * NH;
  float scale = 1.0f / sqrtf((float)hs);
  int rb = row_block(T);
#pragma omp parallel for num_threads(nt) schedule(static) if (BH >= nt)
  for (int bh = 0; bh < BH; bh++) {
    int b = bh / NH, h = bh % NH;
    int64_t off = (int64_t)b * T * C3 + h * hs;
    const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
    const float *a = att + (int64_t)bh * T * T;
    float *da = datt + (int64_t)bh * T * T;
    const float *dy = dout + (int64_t)b * T * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += rb) {
      int r1 = r0 + rb < T ? r0 + rb : T, rows = r1 - r0;
      const float *ar = a + (int64_t)r0 * T, *dyr = dy + (int64_t)r0 * C;
      float *dar = da + (int64_t)r0 * T;
      /* datt = dy v^T; dv += att^T dy */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, dyr, C, v, C3, 0.0f, dar, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, ar, T, dyr, C, 1.0f, dv, C3);
      causal_softmax_backward(da, a, T, r0, r1, scale);
      /* dq += dpre k; dk += dpre^T q (the scale is already in dpre) */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, dar, T, k, C3, 1.0f,
                  dq + (int64_t)r0 * C3, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, dar, T, q + (int64_t)r0 * C3, C3, 1.0f,
                  dk, C3);
    }
  }
  return GT_OK;
}

/* ---- the causal softmax on its own (mixed-precision attention) ---- */

gt_status GT_CPU_KERNEL(causal_softmax_forward)(gt_backend *be, float *att, int BH, int T) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)BH * T * T >= GT_CPU_PAR_MIN)
  for (int bh = 0; bh < BH; bh++) causal_softmax(att + (int64_t)bh * T * T, T, 0, T);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(causal_softmax_backward)(gt_backend *be, float *datt, const float *att, int BH, int T,
                                                 float scale) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)BH * T * T >= GT_CPU_PAR_MIN)
  for (int bh = 0; bh < BH; bh++)
    causal_softmax_backward(datt + (int64_t)bh * T * T, att + (int64_t)bh * T * T, T, 0, T, scale);
  return GT_OK;
}
