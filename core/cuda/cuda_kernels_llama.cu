/* The layers of the Llama family on CUDA: RMSNorm, rotary position
 * embeddings and SwiGLU, forward and backward, with the CPU backend's
 * semantics (cpu_kernels_llama.c).
 *
 * RMSNorm's weight gradient, a sum over rows, uses no atomics: fixed row
 * chunks are summed first, one thread per column, and then the chunks in
 * order, so results are bit-identical from run to run.
 */
#include <math.h>

#include "core/cuda/cuda_internal.h"

/* Rows are cut into at most this many chunks for the weight gradient. */
#define RMS_CHUNKS 64

/* ---- RMSNorm ---- */

__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *w, float eps, int C) {
  int64_t row = blockIdx.x;
  const float *x = inp + row * C;
  float *o = out + row * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  float r = 1.0f / sqrtf(gt_block_sum(ss) / (float)C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * r * w[c];
  if (threadIdx.x == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                             const float *rstd, int C) {
  int64_t row = blockIdx.x;
  const float *x = inp + row * C, *d = dout + row * C;
  float *dx = dinp + row * C, r = rstd[row];
  float a = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) a += w[c] * d[c] * x[c];
  /* rstd depends on every x: dx = r w dout - x r^3 mean(w dout x) */
  float k = gt_block_sum(a) * r * r * r / (float)C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += r * w[c] * d[c] - x[c] * k;
}

/* Chunk j's sum of x * rstd * dout over its rows, column c. */
__global__ void rmsnorm_dw_partial_kernel(float *partial, const float *dout, const float *inp, const float *rstd, int N,
                                          int C, int rows_per) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
  if (c >= C) return;
  int r0 = j * rows_per, r1 = min(N, r0 + rows_per);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) {
    int64_t i = (int64_t)r * C + c;
    s += inp[i] * rstd[r] * dout[i];
  }
  partial[(int64_t)j * C + c] = s;
}

__global__ void rmsnorm_dw_finish_kernel(float *dw, const float *partial, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int j = 0; j < chunks; j++) s += partial[(int64_t)j * C + c];
  dw[c] += s;
}

gt_status gt_cuda_rmsnorm_forward(gt_backend *be, float *out, float *rstd, const float *inp, const float *w, float eps,
                                  int N, int C) {
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  rmsnorm_forward_kernel<<<N, GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(out, rstd, inp, w, eps, C);
  return gt_cuda_launched(be, "rmsnorm_forward");
}

gt_status gt_cuda_rmsnorm_backward(gt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                   const float *w, const float *rstd, int N, int C) {
  if (N == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  cudaStream_t st = gt_cuda_stream(be);
  rmsnorm_backward_dinp_kernel<<<N, GT_CUDA_THREADS, 0, st>>>(dinp, dout, inp, w, rstd, C);
  GT_TRY(gt_cuda_launched(be, "rmsnorm_backward_dinp"));
  int chunks = N < RMS_CHUNKS ? N : RMS_CHUNKS, rows_per = (N + chunks - 1) / chunks;
  float *partial;
  GT_TRY(gt_cuda_scratch(be, (size_t)chunks * C * sizeof(float), (void **)&partial));
  unsigned blocks = (C + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS;
  dim3 grid(blocks, chunks);
  rmsnorm_dw_partial_kernel<<<grid, GT_CUDA_THREADS, 0, st>>>(partial, dout, inp, rstd, N, C, rows_per);
  GT_TRY(gt_cuda_launched(be, "rmsnorm_dw_partial"));
  rmsnorm_dw_finish_kernel<<<blocks, GT_CUDA_THREADS, 0, st>>>(dw, partial, chunks, C);
  return gt_cuda_launched(be, "rmsnorm_dw_finish");
}

/* ---- rotary position embeddings ---- */

/* One thread per pair (row, head, i): out = R x, or R^T x with sign -1.
 * The angle in double, as on the CPU: t * theta^(-2i/hs) for long
 * sequences loses digits in float. In place is fine: a thread reads its
 * pair before writing it, and no other thread touches it. */
__global__ void rope_kernel(float *out, const float *inp, int64_t rows, int T, int NH, int hs, int ld, double theta,
                            double scale, float sign) {
  int half = hs / 2;
  int64_t total = rows * NH * half;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int i = (int)(idx % half);
    int64_t rh = idx / half, r = rh / NH;
    int h = (int)(rh % NH);
    double a = (double)(r % T) / scale * pow(theta, -2.0 * i / hs), sd, cd;
    sincos(a, &sd, &cd);
    float c = (float)cd, s = sign * (float)sd;
    const float *x = inp + r * ld + (int64_t)h * hs;
    float *y = out + r * ld + (int64_t)h * hs;
    float x0 = x[i], x1 = x[half + i];
    y[i] = x0 * c - x1 * s;
    y[half + i] = x1 * c + x0 * s;
  }
}

static gt_status rope_launch(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld,
                             float theta, float scale, float sign, const char *name) {
  if (B == 0 || T == 0 || NH == 0 || hs == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  int64_t rows = (int64_t)B * T;
  size_t pairs = (size_t)rows * NH * (hs / 2);
  rope_kernel<<<gt_cuda_blocks(pairs, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      out, inp, rows, T, NH, hs, ld, (double)theta, (double)scale, sign);
  return gt_cuda_launched(be, name);
}

gt_status gt_cuda_rope_forward(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld,
                               float theta, float scale) {
  return rope_launch(be, out, inp, B, T, NH, hs, ld, theta, scale, 1.0f, "rope_forward");
}

gt_status gt_cuda_rope_backward(gt_backend *be, float *dinp, const float *dout, int B, int T, int NH, int hs, int ld,
                                float theta, float scale) {
  /* A rotation's transpose is the rotation back. */
  return rope_launch(be, dinp, dout, B, T, NH, hs, ld, theta, scale, -1.0f, "rope_backward");
}

/* ---- SwiGLU ---- */

__global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                       size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i], s = 1.0f / (1.0f + expf(-g)), d = dout[i];
    /* silu'(g) = s (1 + g (1 - s)) */
    dgate[i] += d * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] += d * g * s;
  }
}

gt_status gt_cuda_swiglu_forward(gt_backend *be, float *out, const float *gate, const float *up, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  swiglu_forward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(out, gate, up,
                                                                                                        n);
  return gt_cuda_launched(be, "swiglu_forward");
}

gt_status gt_cuda_swiglu_backward(gt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                  const float *up, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  swiglu_backward_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      dgate, dup, dout, gate, up, n);
  return gt_cuda_launched(be, "swiglu_backward");
}
