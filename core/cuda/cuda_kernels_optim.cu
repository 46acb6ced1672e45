/* Optimizer updates, reductions, scaling and bf16 conversions on CUDA, with
 * the CPU backend's (and PyTorch's) semantics. sum_squares reduces in
 * double over a grid whose size depends only on n, then sums the blocks'
 * partials in order: the same bits on every call.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "core/cuda/cuda_internal.h"
#include "core/backend_engine.h"

#define SUMSQ_BLOCKS 1024

/* AdamW as torch.optim.AdamW: decoupled weight decay, then Adam with bias
 * correction (step_size and bc2_sqrt computed on the host in double). */
struct adamw_k {
  float b1, b2, eps, gs, decay, step_size, bc2_sqrt;
};

static adamw_k adamw_factors(const gt_adamw_args *a) {
  adamw_k k;
  k.b1 = a->beta1;
  k.b2 = a->beta2;
  k.eps = a->eps;
  k.gs = a->grad_scale;
  k.decay = 1.0f - a->lr * a->weight_decay;
  k.step_size = (float)(a->lr / (1.0 - pow(a->beta1, a->step)));
  k.bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, a->step));
  return k;
}

/* One element, shared by both AdamW kernels so their fp32 results are the
 * same bits: updates *m and *v, returns the new parameter. */
__device__ __forceinline__ float adamw_elem(const adamw_k &k, float p, float grad, float *m, float *v) {
  float g = grad * k.gs;
  float mi = k.b1 * *m + (1.0f - k.b1) * g;
  float vi = k.b2 * *v + (1.0f - k.b2) * g * g;
  *m = mi;
  *v = vi;
  float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
  return p * k.decay - k.step_size * mi / denom;
}

/* Round to nearest even; a NaN stays a quiet NaN with its sign and top
 * payload bits, bit for bit as gt_f32_to_bf16 on the host. */
__device__ __forceinline__ uint16_t bf16_round(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n, adamw_k k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    param[i] = adamw_elem(k, param[i], grad[i], &m[i], &v[i]);
}

__global__ void adamw_bf16_kernel(float *param, const float *grad, float *m, float *v, uint16_t *param_bf16, size_t n,
                                  adamw_k k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float p = adamw_elem(k, param[i], grad[i], &m[i], &v[i]);
    param[i] = p;
    param_bf16[i] = bf16_round(p);
  }
}

gt_status gt_cuda_adamw_update(gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                               const gt_adamw_args *a) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  adamw_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(param, grad, m, v, n,
                                                                                               adamw_factors(a));
  return gt_cuda_launched(be, "adamw");
}

gt_status gt_cuda_adamw_update_bf16(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                    uint16_t *param_bf16, size_t n, const gt_adamw_args *a) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  adamw_bf16_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      param, grad, m, v, param_bf16, n, adamw_factors(a));
  return gt_cuda_launched(be, "adamw_update_bf16");
}

/* SGD as torch.optim.SGD without dampening; a zeroed momentum buffer makes
 * the first step's buffer the gradient, as PyTorch's does. */
__global__ void sgd_kernel(float *param, const float *grad, float *mom, size_t n, float lr, float mu, float wd,
                           float gs, bool nesterov) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if (mu == 0.0f) {
      param[i] -= lr * (grad[i] * gs + wd * param[i]);
    } else {
      float g = grad[i] * gs + wd * param[i];
      float b = mu * mom[i] + g;
      mom[i] = b;
      param[i] -= lr * (nesterov ? g + mu * b : b);
    }
  }
}

gt_status gt_cuda_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                             const gt_sgd_args *a) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  sgd_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      param, grad, mom, n, a->lr, a->momentum, a->weight_decay, a->grad_scale, a->nesterov);
  return gt_cuda_launched(be, "sgd");
}

__global__ void sum_squares_partial_kernel(double *partial, const float *x, size_t n) {
  double s = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    double xi = x[i];
    s += xi * xi;
  }
  s = gt_block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_finish_kernel(double *out, const double *partial, int blocks) {
  double s = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[i];
  s = gt_block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

gt_status gt_cuda_sum_squares(gt_backend *be, double *out, const float *x, size_t n) {
  GT_TRY(gt_cuda_enter(be));
  cudaStream_t st = gt_cuda_stream(be);
  if (n == 0) return gt_cuda_check(be, cudaMemsetAsync(out, 0, sizeof *out, st), "cudaMemsetAsync");
  size_t want = (n + GT_CUDA_THREADS * 4 - 1) / (GT_CUDA_THREADS * 4);
  int blocks = (int)(want < SUMSQ_BLOCKS ? want : SUMSQ_BLOCKS);
  double *partial;
  GT_TRY(gt_cuda_scratch(be, (size_t)blocks * sizeof(double), (void **)&partial));
  sum_squares_partial_kernel<<<blocks, GT_CUDA_THREADS, 0, st>>>(partial, x, n);
  GT_TRY(gt_cuda_launched(be, "sum_squares_partial"));
  sum_squares_finish_kernel<<<1, GT_CUDA_THREADS, 0, st>>>(out, partial, blocks);
  return gt_cuda_launched(be, "sum_squares_finish");
}

__global__ void scale_kernel(float *x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= s;
}

gt_status gt_cuda_scale(gt_backend *be, float *x, float s, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  scale_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(x, s, n);
  return gt_cuda_launched(be, "scale");
}

/* bf16_round: the rounding adamw_update_bf16 writes too. */
__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = bf16_round(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

gt_status gt_cuda_f32_to_bf16(gt_backend *be, uint16_t *dst, const float *src, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  f32_to_bf16_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(dst, src, n);
  return gt_cuda_launched(be, "f32_to_bf16");
}

gt_status gt_cuda_bf16_to_f32(gt_backend *be, float *dst, const uint16_t *src, size_t n) {
  if (n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  bf16_to_f32_kernel<<<gt_cuda_blocks(n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(dst, src, n);
  return gt_cuda_launched(be, "bf16_to_f32");
}
