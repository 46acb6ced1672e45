/* Embedding and cross-entropy over a slice of the vocabulary on CUDA (see
 * the CPU version, core/cpu/cpu_kernels_vocab.c, for the scheme): one thread per
 * element for the embedding, one block per row for the loss. No atomics, so
 * results repeat bit for bit. */
#include <math.h>

#include "core/cuda/cuda_internal.h"

#define SLICE_THREADS 256

__global__ void embedding_slice_forward_kernel(float *out, const int32_t *tokens, const float *wte, int v0, int V,
                                               const float *wpe, int T, int C, int64_t n) {
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = k / C;
    int c = (int)(k % C);
    int64_t tok = (int64_t)tokens[i] - v0;
    float v = tok >= 0 && tok < V ? wte[tok * C + c] : 0.0f;
    if (wpe) v += wpe[(i % T) * C + c];
    out[k] = v;
  }
}

/* One thread per channel walks every token in order: deterministic sums. */
__global__ void embedding_slice_backward_kernel(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                                int v0, int V, int64_t N, int T, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t i = 0; i < N; i++) {
    float d = dout[i * C + c];
    int64_t tok = (int64_t)tokens[i] - v0;
    if (tok >= 0 && tok < V) dwte[tok * C + c] += d;
    if (dwpe) dwpe[(i % T) * C + c] += d;
  }
}

__global__ void xent_slice_stats_kernel(float *stats, float *tlogit, const float *logits, const int32_t *targets,
                                        int v0, int N, int V) {
  int64_t i = blockIdx.x;
  const float *x = logits + i * V;
  float mx, sum;
  gt_block_max_sumexp(x, V, &mx, &sum);
  if (threadIdx.x == 0) {
    stats[i] = mx;
    stats[N + i] = sum;
    int64_t t = (int64_t)targets[i] - v0;
    tlogit[i] = targets[i] >= 0 && t >= 0 && t < V ? x[t] : 0.0f;
  }
}

__global__ void xent_slice_finish_kernel(float *losses, float *probs, const float *logits, const float *stats_all,
                                         int P, const float *tlogit, const int32_t *targets, int N, int V) {
  int64_t i = blockIdx.x;
  float M = -INFINITY;
  for (int r = 0; r < P; r++) M = fmaxf(M, stats_all[(int64_t)r * 2 * N + i]);
  double S = 0;
  for (int r = 0; r < P; r++)
    S += (double)stats_all[(int64_t)r * 2 * N + N + i] * exp((double)stats_all[(int64_t)r * 2 * N + i] - M);
  float inv = (float)(1.0 / S);
  const float *x = logits + i * V;
  float *p = probs + i * V;
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - M) * inv;
  if (threadIdx.x == 0) losses[i] = targets[i] < 0 ? 0.0f : (float)(log(S) + M - tlogit[i]);
}

__global__ void softmax_xent_slice_backward_kernel(float *dlogits, const float *probs, const int32_t *targets, int v0,
                                                   float dloss, int V) {
  int64_t i = blockIdx.x;
  const float *p = probs + i * V;
  float *d = dlogits + i * V;
  int64_t t = (int64_t)targets[i] - v0;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    d[j] = targets[i] < 0 ? 0.0f : (j == t ? (p[j] - 1.0f) * dloss : p[j] * dloss);
}

/* lo == 0 checks token ids (negative is the error); otherwise targets, where
 * a negative id is an ignored row and hi is the whole vocabulary. */
static gt_status check_tokens(gt_backend *be, const char *op, const int32_t *ids, int64_t n, int64_t lo, int64_t hi) {
  int64_t row;
  int32_t val;
  GT_TRY(gt_cuda_check_ids(be, ids, n, lo, hi, &row, &val));
  if (row >= 0 && lo == 0)
    return gt_errorf(GT_ERANGE, "%s: %s: token id %d at position %lld is negative", be->name, op, (int)val,
                     (long long)row);
  if (row >= 0)
    return gt_errorf(GT_ERANGE,
                     "%s: %s: target id %d at position %lld is not below the vocabulary size %lld; "
                     "check that the data was tokenized for this model",
                     be->name, op, (int)val, (long long)row, (long long)hi);
  return GT_OK;
}

gt_status gt_cuda_embedding_slice_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0,
                                          int V, const float *wpe, int B, int T, int C) {
  GT_TRY(gt_cuda_enter(be));
  int64_t n = (int64_t)B * T * C;
  GT_TRY(check_tokens(be, "embedding_slice_forward", tokens, (int64_t)B * T, 0, INT64_MAX));
  if (n == 0) return GT_OK;
  embedding_slice_forward_kernel<<<gt_cuda_blocks((size_t)n, SLICE_THREADS), SLICE_THREADS, 0, gt_cuda_stream(be)>>>(
      out, tokens, wte, v0, V, wpe, T, C, n);
  return gt_cuda_launched(be, "embedding_slice_forward");
}

gt_status gt_cuda_embedding_slice_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                           const int32_t *tokens, int v0, int V, int B, int T, int C) {
  GT_TRY(gt_cuda_enter(be));
  if (C == 0 || B * T == 0) return GT_OK;
  embedding_slice_backward_kernel<<<(C + SLICE_THREADS - 1) / SLICE_THREADS, SLICE_THREADS, 0, gt_cuda_stream(be)>>>(
      dwte, dwpe, dout, tokens, v0, V, (int64_t)B * T, T, C);
  return gt_cuda_launched(be, "embedding_slice_backward");
}

gt_status gt_cuda_xent_slice_stats(gt_backend *be, float *stats, float *tlogit, const float *logits,
                                   const int32_t *targets, int v0, int N, int V) {
  GT_TRY(gt_cuda_enter(be));
  if (N == 0) return GT_OK;
  xent_slice_stats_kernel<<<N, SLICE_THREADS, 0, gt_cuda_stream(be)>>>(stats, tlogit, logits, targets, v0, N, V);
  return gt_cuda_launched(be, "xent_slice_stats");
}

gt_status gt_cuda_xent_slice_finish(gt_backend *be, float *losses, float *probs, const float *logits,
                                    const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                    int vocab_total, int N, int V) {
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(check_tokens(be, "xent_slice_finish", targets, N, INT32_MIN, vocab_total));
  if (N == 0) return GT_OK;
  xent_slice_finish_kernel<<<N, SLICE_THREADS, 0, gt_cuda_stream(be)>>>(losses, probs, logits, stats_all, P, tlogit,
                                                                        targets, N, V);
  return gt_cuda_launched(be, "xent_slice_finish");
}

gt_status gt_cuda_softmax_xent_slice_backward(gt_backend *be, float *dlogits, const float *probs,
                                              const int32_t *targets, int v0, float dloss, int N, int V) {
  GT_TRY(gt_cuda_enter(be));
  if (N == 0) return GT_OK;
  softmax_xent_slice_backward_kernel<<<N, SLICE_THREADS, 0, gt_cuda_stream(be)>>>(dlogits, probs, targets, v0, dloss,
                                                                                  V);
  return gt_cuda_launched(be, "softmax_xent_slice_backward");
}
