/* Transformer layers on CUDA: embedding, layernorm, linear, bias, GELU and
 * residual, forward and backward, with the CPU backend's semantics.
 *
 * Gradients summed over rows (embedding tables, layernorm weights, biases)
 * never use atomics: each thread owns a column and adds rows in a fixed
 * order, so results are bit-identical from run to run. Embedding rows are
 * added in token order, exactly as the CPU backend does; layernorm and bias
 * gradients sum fixed row chunks first and then the chunks in order.
 */
#include <math.h>

#include "core/cuda/cuda_internal.h"

#define LN_EPS 1e-5f
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f
/* Column sums over rows: rows are cut into at most this many chunks. */
#define COLSUM_CHUNKS 64

/* ---- embedding ---- */

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                         int64_t N, int T, int C) {
  int64_t total = N * C;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = idx / C;
    int c = (int)(idx - i * C);
    int64_t tok = tokens[i];
    float v = tok >= 0 ? wte[tok * C + c] : 0.0f; /* see gt_cuda_check_ids */
    if (wpe) v += wpe[(i % T) * C + c];
    out[idx] = v;
  }
}

/* One thread per channel walks every token in order: repeated tokens add
 * into the same row without races, in the CPU backend's order. */
__global__ void embedding_backward_wte_kernel(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t i = 0; i < N; i++)
    if (tokens[i] >= 0) dwte[(int64_t)tokens[i] * C + c] += dout[i * C + c];
}

__global__ void embedding_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
  int64_t total = (int64_t)T * C;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += dout[(int64_t)b * total + idx];
    dwpe[idx] = acc;
  }
}

static gt_status check_tokens(gt_backend *be, const char *op, const int32_t *tokens, int64_t N) {
  int64_t row;
  int32_t val;
  GT_TRY(gt_cuda_check_ids(be, tokens, N, 0, INT64_MAX, &row, &val));
  if (row >= 0)
    return gt_errorf(GT_ERANGE, "%s: %s: token id %d at position %lld is negative", be->name, op, (int)val,
                     (long long)row);
  return GT_OK;
}

gt_status gt_cuda_embedding_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(check_tokens(be, "embedding_forward", tokens, N));
  embedding_forward_kernel<<<gt_cuda_blocks((size_t)(N * C), GT_CUDA_THREADS), GT_CUDA_THREADS, 0,
                             gt_cuda_stream(be)>>>(out, tokens, wte, wpe, N, T, C);
  return gt_cuda_launched(be, "embedding_forward");
}

gt_status gt_cuda_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                     int B, int T, int C) {
  int64_t N = (int64_t)B * T;
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(check_tokens(be, "embedding_backward", tokens, N));
  cudaStream_t st = gt_cuda_stream(be);
  unsigned threads = 128;
  embedding_backward_wte_kernel<<<(C + threads - 1) / threads, threads, 0, st>>>(dwte, dout, tokens, N, C);
  GT_TRY(gt_cuda_launched(be, "embedding_backward_wte"));
  if (dwpe) {
    embedding_backward_wpe_kernel<<<gt_cuda_blocks((size_t)T * C, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, st>>>(
        dwpe, dout, B, T, C);
    GT_TRY(gt_cuda_launched(be, "embedding_backward_wpe"));
  }
  return GT_OK;
}

/* ---- deterministic column sums ---- */

static int colsum_chunks(int N) { return N < COLSUM_CHUNKS ? N : COLSUM_CHUNKS; }

/* partial[j*C + c] = sum of column c over chunk j's rows, in row order. */
__global__ void colsum_partial_kernel(float *partial, const float *x, int N, int C, int rows_per) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y;
  if (c >= C) return;
  int r0 = j * rows_per, r1 = min(N, r0 + rows_per);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) s += x[(int64_t)r * C + c];
  partial[(int64_t)j * C + c] = s;
}

/* out0[c] += the chunks' partials of column c, in chunk order; out1, when
 * given, likewise from the chunks*C partials that follow (layernorm sums
 * dw and db in one pass). */
__global__ void colsum_finish_kernel(float *out0, float *out1, const float *partial, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s0 = 0.0f, s1 = 0.0f;
  for (int j = 0; j < chunks; j++) s0 += partial[(int64_t)j * C + c];
  out0[c] += s0;
  if (out1) {
    const float *p1 = partial + (int64_t)chunks * C;
    for (int j = 0; j < chunks; j++) s1 += p1[(int64_t)j * C + c];
    out1[c] += s1;
  }
}

/* ---- layernorm ---- */

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, int C) {
  int64_t row = blockIdx.x;
  const float *x = inp + row * C;
  float *o = out + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  float m = gt_block_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = x[c] - m;
    v += d * d;
  }
  v = gt_block_sum(v) / (float)C;
  float r = 1.0f / sqrtf(v + LN_EPS);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float y = (x[c] - m) * r * w[c];
    o[c] = b ? y + b[c] : y;
  }
  if (threadIdx.x == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                               const float *mean, const float *rstd, int C) {
  int64_t row = blockIdx.x;
  const float *x = inp + row * C, *d = dout + row * C;
  float *dx = dinp + row * C;
  float m = mean[row], r = rstd[row];
  float a = 0.0f, bsum = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dn = w[c] * d[c];
    a += dn;
    bsum += dn * (x[c] - m) * r;
  }
  float dn_mean = gt_block_sum(a) / (float)C;
  float dn_n_mean = gt_block_sum(bsum) / (float)C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float n = (x[c] - m) * r;
    dx[c] += (w[c] * d[c] - dn_mean - n * dn_n_mean) * r;
  }
}

/* Chunk j's sums of norm*dout (for dw) and dout (for db), column c. */
__global__ void layernorm_backward_partial_kernel(float *partial, const float *dout, const float *inp,
                                                  const float *mean, const float *rstd, int N, int C, int chunks,
                                                  int rows_per) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y;
  if (c >= C) return;
  int r0 = j * rows_per, r1 = min(N, r0 + rows_per);
  float sw = 0.0f, sb = 0.0f;
  for (int r = r0; r < r1; r++) {
    int64_t i = (int64_t)r * C + c;
    float d = dout[i];
    sw += (inp[i] - mean[r]) * rstd[r] * d;
    sb += d;
  }
  partial[(int64_t)j * C + c] = sw;
  partial[(int64_t)(chunks + j) * C + c] = sb;
}

gt_status gt_cuda_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C) {
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  layernorm_forward_kernel<<<N, GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(out, mean, rstd, inp, w, b, C);
  return gt_cuda_launched(be, "layernorm_forward");
}

gt_status gt_cuda_layernorm_backward(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                     const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                     int C) {
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  cudaStream_t st = gt_cuda_stream(be);
  if (dinp) {
    layernorm_backward_dinp_kernel<<<N, GT_CUDA_THREADS, 0, st>>>(dinp, dout, inp, w, mean, rstd, C);
    GT_TRY(gt_cuda_launched(be, "layernorm_backward_dinp"));
  }
  if (!dw && !db) return GT_OK;
  int chunks = colsum_chunks(N), rows_per = (N + chunks - 1) / chunks;
  float *partial;
  GT_TRY(gt_cuda_scratch(be, (size_t)2 * chunks * C * sizeof(float), (void **)&partial));
  dim3 grid((C + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS, chunks);
  layernorm_backward_partial_kernel<<<grid, GT_CUDA_THREADS, 0, st>>>(partial, dout, inp, mean, rstd, N, C, chunks,
                                                                      rows_per);
  GT_TRY(gt_cuda_launched(be, "layernorm_backward_partial"));
  unsigned blocks = (C + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS;
  if (dw && db) {
    colsum_finish_kernel<<<blocks, GT_CUDA_THREADS, 0, st>>>(dw, db, partial, chunks, C);
  } else if (dw) {
    colsum_finish_kernel<<<blocks, GT_CUDA_THREADS, 0, st>>>(dw, NULL, partial, chunks, C);
  } else {
    colsum_finish_kernel<<<blocks, GT_CUDA_THREADS, 0, st>>>(db, NULL, partial + (size_t)chunks * C, chunks, C);
  }
  return gt_cuda_launched(be, "layernorm_backward_finish");
}

/* ---- linear ---- */

__global__ void fill_rows_kernel(float *out, const float *row, int64_t N, int C) {
  int64_t total = N * C;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x)
    out[idx] = row ? row[idx % C] : 0.0f;
}

gt_status gt_cuda_linear_forward(gt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,
                                 int C, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  if (bias || C == 0) {
    /* Start from the bias and let the GEMM add into it (beta = 1), as the
     * CPU backend does. */
    fill_rows_kernel<<<gt_cuda_blocks((size_t)N * OC, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
        out, bias, N, OC);
    GT_TRY(gt_cuda_launched(be, "linear_forward_bias"));
  }
  if (C == 0) return GT_OK;
  return gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_TRANS, N, OC, C, 1.0f, inp, C, 0, w, C, 0, bias ? 1.0f : 0.0f, out, OC, 0,
                         1);
}

gt_status gt_cuda_linear_backward(gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                  const float *inp, const float *w, int N, int C, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  if (C > 0) {
    if (dinp)
      GT_TRY(gt_cuda_gemm_rm(be, GT_NO_TRANS, GT_NO_TRANS, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 1.0f, dinp, C, 0, 1));
    GT_TRY(gt_cuda_gemm_rm(be, GT_TRANS, GT_NO_TRANS, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1));
  }
  return dbias ? gt_cuda_bias_backward(be, dbias, dout, N, OC) : GT_OK;
}

/* ---- biases on their own (for products done by gemm or gemm_ex) ---- */

__global__ void bias_add_kernel(float *out, const float *bias, int64_t N, int OC) {
  int64_t total = N * OC;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x)
    out[idx] += bias[idx % OC];
}

gt_status gt_cuda_bias_add(gt_backend *be, float *out, const float *bias, int N, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  bias_add_kernel<<<gt_cuda_blocks((size_t)N * OC, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      out, bias, N, OC);
  return gt_cuda_launched(be, "bias_add");
}

/* A column sum in a fixed order: rows cut into chunks summed in order, then
 * the chunks added in order, so the result does not depend on scheduling.
 * linear_backward's bias gradient is this too. */
gt_status gt_cuda_bias_backward(gt_backend *be, float *dbias, const float *dout, int N, int OC) {
  if (N == 0 || OC == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  cudaStream_t st = gt_cuda_stream(be);
  int chunks = colsum_chunks(N), rows_per = (N + chunks - 1) / chunks;
  float *partial;
  GT_TRY(gt_cuda_scratch(be, (size_t)chunks * OC * sizeof(float), (void **)&partial));
  dim3 grid((OC + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS, chunks);
  colsum_partial_kernel<<<grid, GT_CUDA_THREADS, 0, st>>>(partial, dout, N, OC, rows_per);
  GT_TRY(gt_cuda_launched(be, "bias_backward_partial"));
  colsum_finish_kernel<<<(OC + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS, GT_CUDA_THREADS, 0, st>>>(dbias, NULL, partial,
                                                                                                 chunks, OC);
  return gt_cuda_launched(be, "bias_backward");
}

/* ---- GELU (tanh approximation) and residual ---- */

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_K * (x + GELU_C * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_K * (x + GELU_C * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    dinp[i] += g * dout[i];
  }
}

__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float *da, float *db, const float *dout, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float d = dout[i];
    /* Either side may be NULL: a branch without a gradient (the skip
     * connection of a transformer block passes NULL for db). */
    if (da) da[i] += d;
    if (db) db[i] += d;
  }
}

gt_status gt_cuda_gelu_forward(gt_backend *be, float *out, const float *inp, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  gelu_forward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(out, inp, n);
  return gt_cuda_launched(be, "gelu_forward");
}

gt_status gt_cuda_gelu_backward(gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  gelu_backward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(dinp, inp, dout,
                                                                                                       n);
  return gt_cuda_launched(be, "gelu_backward");
}

gt_status gt_cuda_residual_forward(gt_backend *be, float *out, const float *a, const float *b, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  residual_forward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(out, a, b, n);
  return gt_cuda_launched(be, "residual_forward");
}

gt_status gt_cuda_residual_backward(gt_backend *be, float *da, float *db, const float *dout, size_t n) {
  if (n == 0 || (!da && !db)) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  residual_backward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(da, db, dout,
                                                                                                           n);
  return gt_cuda_launched(be, "residual_backward");
}
