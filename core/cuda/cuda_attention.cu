/* Causal multi-head self-attention on CUDA.
 *
 * The products run on cuBLAS, strided-batched over the NH heads of one
 * sequence: head h's queries start at column h*hs of rows 3C apart, its
 * keys C further on, its values 2C further, so consecutive heads are hs
 * elements apart and no permuted copy of q, k, v is needed. Sequences are
 * a loop of B such calls (the offset between sequences, T*3C, is not a
 * multiple of the head stride). The causal softmax and its backward are
 * one block per row of scores. Same operation order as the CPU backend:
 * the score scale goes into the QK^T product, and into dpre in backward.
 */
#include <math.h>

#include "core/cuda/cuda_internal.h"

/* Row t of a T x T score matrix keeps columns 0..t: softmax them in place,
 * zero the rest. One block per row of all B*NH matrices. */
__global__ void causal_softmax_kernel(float *att, int T) {
  int64_t r = blockIdx.x;
  int t = (int)(r % T);
  float *row = att + r * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = gt_block_max(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  sum = gt_block_sum(sum);
  float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? row[j] * inv : 0.0f;
}

/* In place: datt becomes the gradient of the pre-softmax scores times the
 * score scale, zero above the diagonal. */
__global__ void causal_softmax_backward_kernel(float *datt, const float *att, int T, float scale) {
  int64_t r = blockIdx.x;
  int t = (int)(r % T);
  float *d = datt + r * T;
  const float *p = att + r * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) dot += p[j] * d[j];
  dot = gt_block_sum(dot);
  for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? p[j] * (d[j] - dot) * scale : 0.0f;
}

static unsigned row_threads(int T) { return T <= 64 ? 32 : T <= 512 ? 128 : 256; }

gt_status gt_cuda_attention_full_forward(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                         int NH) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  int hs = C / NH;
  int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++) {
    const float *q = qkv + b * T * C3, *k = q + C;
    /* att = scale * q k^T for every head of sequence b */
    GT_TRY(gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_TRANS, T, T, hs, scale, q, (int)C3, hs, k, (int)C3, hs, 0.0f,
                           att + b * NH * TT, T, TT, NH));
  }
  causal_softmax_kernel<<<(unsigned)((int64_t)B * NH * T), row_threads(T), 0, gt_cuda_stream(be)>>>(att, T);
  GT_TRY(gt_cuda_launched(be, "causal_softmax"));
  for (int b = 0; b < B; b++) {
    const float *v = qkv + b * T * C3 + 2 * C;
    /* out = att v */
    GT_TRY(gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, att + b * NH * TT, T, TT, v, (int)C3, hs, 0.0f,
                           out + (int64_t)b * T * C, C, hs, NH));
  }
  return GT_OK;
}

gt_status gt_cuda_attention_full_backward(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                          const float *att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  int hs = C / NH;
  int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++) {
    int64_t off = b * T * C3;
    const float *v = qkv + off + 2 * C, *dy = dout + (int64_t)b * T * C, *a = att + b * NH * TT;
    float *dv = dqkv + off + 2 * C, *da = datt + b * NH * TT;
    /* datt = dy v^T; dv += att^T dy */
    GT_TRY(gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_TRANS, T, T, hs, 1.0f, dy, C, hs, v, (int)C3, hs, 0.0f, da, T, TT, NH));
    GT_TRY(gt_cuda_gemm_rm(be, GT_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, a, T, TT, dy, C, hs, 1.0f, dv, (int)C3, hs, NH));
  }
  causal_softmax_backward_kernel<<<(unsigned)((int64_t)B * NH * T), row_threads(T), 0, gt_cuda_stream(be)>>>(datt, att,
                                                                                                             T, scale);
  GT_TRY(gt_cuda_launched(be, "causal_softmax_backward"));
  for (int b = 0; b < B; b++) {
    int64_t off = b * T * C3;
    const float *q = qkv + off, *k = q + C, *da = datt + b * NH * TT;
    float *dq = dqkv + off, *dk = dq + C;
    /* dq += dpre k; dk += dpre^T q (the scale is already in dpre) */
    GT_TRY(gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, da, T, TT, k, (int)C3, hs, 1.0f, dq, (int)C3,
                           hs, NH));
    GT_TRY(gt_cuda_gemm_rm(be, GT_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, da, T, TT, q, (int)C3, hs, 1.0f, dk, (int)C3, hs,
                           NH));
  }
  return GT_OK;
}

/* ---- the causal softmax on its own (mixed-precision attention) ---- */

gt_status gt_cuda_causal_softmax_forward(gt_backend *be, float *att, int BH, int T) {
  if (BH == 0 || T == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  causal_softmax_kernel<<<(unsigned)((int64_t)BH * T), row_threads(T), 0, gt_cuda_stream(be)>>>(att, T);
  return gt_cuda_launched(be, "causal_softmax");
}

gt_status gt_cuda_causal_softmax_backward(gt_backend *be, float *datt, const float *att, int BH, int T, float scale) {
  if (BH == 0 || T == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  causal_softmax_backward_kernel<<<(unsigned)((int64_t)BH * T), row_threads(T), 0, gt_cuda_stream(be)>>>(datt, att, T,
                                                                                                         scale);
  return gt_cuda_launched(be, "causal_softmax_backward");
}
