/* CUDA backend internals: the device state behind a gt_backend, error
 * helpers every .cu file shares, and the functions behind the ops table,
 * the kernels declared from the kernel list (core/backend_kernels.h).
 * Arguments arrive checked by the gt_op_* wrappers (core/backend_impl.h).
 *
 * Threading: the compute stream and the cuBLAS handle belong to the thread
 * that issues kernels (the training thread). Memory, copies, streams and
 * events may be used from other threads; every entry point binds the
 * calling thread to the backend's device first, because a fresh thread
 * starts on device 0. */
#ifndef GIANT_CUDA_INTERNAL_H
#define GIANT_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/backend_impl.h"
#include "core/backend_engine.h"

struct gt_stream {
  cudaStream_t s;
};

struct gt_event {
  cudaEvent_t e;
  bool recorded; /* CUDA treats a never-recorded event as complete; we report it */
};

typedef struct gt_cuda {
  cublasHandle_t blas;
  void *blas_ws; /* cuBLAS workspace: fixed, so GEMMs never allocate */
  size_t blas_ws_bytes;
  /* First position of an out-of-range token or target (GT_CUDA_NO_ERROR
   * when none), written by check_ids_kernel and read back after it. */
  unsigned long long *err;
  bool check_ids;               /* GT_CUDA_CHECK_IDS=1: see gt_cuda_check_ids */
  unsigned long long *err_host; /* pinned */
  /* Scratch for multi-pass reductions. It only grows, and kernels that use
   * it run in order on the compute stream, so one buffer serves them all. */
  void *scratch;
  size_t scratch_bytes;
} gt_cuda;

#define GT_CUDA_NO_ERROR 0xffffffffffffffffull
#define GT_CUDA_THREADS 256

#ifdef __cplusplus
extern "C" {
#endif

/* The operation table (cuda_ops.c). */
extern const gt_backend_ops gt_cuda_ops;

gt_status gt_cuda_backend_create(const gt_backend_config *cfg, gt_backend **out);
bool gt_cuda_available(char *why, size_t why_len);

/* Error helpers: turn a CUDA or cuBLAS status into a gt_status with a
 * message naming the device and the call. */
gt_status gt_cuda_check(gt_backend *be, cudaError_t e, const char *what);
gt_status gt_cuda_blas_check(gt_backend *be, cublasStatus_t st, const char *what);
/* After a kernel launch: reports a bad launch configuration at once. */
gt_status gt_cuda_launched(gt_backend *be, const char *kernel);
/* Binds the calling thread to the backend's device. */
gt_status gt_cuda_enter(gt_backend *be);
/* Scratch of at least `bytes` on the device, valid until the next call. */
gt_status gt_cuda_scratch(gt_backend *be, size_t bytes, void **ptr);
/* Checks that ids[0..n) lie in [lo, hi) before a kernel indexes with them,
 * so a bad token or target fails cleanly and changes nothing. Sets *bad_row
 * to the first offending position (and *bad_val to its value), or to -1.
 * Only with GT_CUDA_CHECK_IDS=1, a debugging aid: the check synchronises
 * the compute stream (the answer is needed on the host), which would stall
 * every step, and the model already checks ids on the host before they are
 * uploaded (core/model/acts.c). Without it the kernels skip an id out of
 * their range instead of indexing with it, so a bad id gives wrong numbers,
 * never a stray write. */
gt_status gt_cuda_check_ids(gt_backend *be, const int32_t *ids, int64_t n, int64_t lo, int64_t hi, int64_t *bad_row,
                            int32_t *bad_val);

static inline cudaStream_t gt_cuda_stream(gt_backend *be) { return be->compute->s; }
static inline gt_cuda *gt_cuda_of(gt_backend *be) { return (gt_cuda *)be->impl; }
static inline unsigned gt_cuda_blocks(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  /* Elementwise kernels loop grid-stride, so a capped grid covers any n. */
  return (unsigned)(b > 65536u * 8u ? 65536u * 8u : (b ? b : 1));
}

/* Row-major GEMM on the compute stream (see gt_gemm_args). */
gt_status gt_cuda_gemm_rm(gt_backend *be, gt_transpose ta, gt_transpose tb, int m, int n, int k, float alpha,
                          const float *a, int lda, int64_t sa, const float *b, int ldb, int64_t sb, float beta,
                          float *c, int ldc, int64_t sc, int batch);

/* memory, streams, events (cuda_memory.cu); destroy (cuda_backend.cu) */
gt_status gt_cuda_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_cuda_free(gt_backend *be, void *ptr);
gt_status gt_cuda_host_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_cuda_host_free(gt_backend *be, void *ptr);
gt_status gt_cuda_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s);
gt_status gt_cuda_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
gt_status gt_cuda_stream_create(gt_backend *be, gt_stream **s);
void gt_cuda_stream_destroy(gt_backend *be, gt_stream *s);
gt_status gt_cuda_stream_sync(gt_backend *be, gt_stream *s);
gt_status gt_cuda_event_create(gt_backend *be, gt_event **e);
void gt_cuda_event_destroy(gt_backend *be, gt_event *e);
gt_status gt_cuda_event_record(gt_backend *be, gt_event *e, gt_stream *s);
gt_status gt_cuda_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e);
gt_status gt_cuda_event_sync(gt_backend *be, gt_event *e);
void gt_cuda_destroy(gt_backend *be);

/* The kernels, one for each entry of the list (core/backend_kernels.h), by
 * family: products (cuda_gemm.cu); embedding, layernorm, linear, bias, gelu
 * and residual (cuda_kernels_nn.cu); attention (cuda_attention.cu, in tiles
 * cuda_attention_tiled.cu); softmax
 * cross-entropy (cuda_kernels_loss.cu); a slice of the vocabulary
 * (cuda_kernels_vocab.cu); optimizers, reductions and conversions
 * (cuda_kernels_optim.cu). */
#define GT_CUDA_DECLARE(name, params) gt_status gt_cuda_##name params;
GT_BACKEND_KERNELS(GT_CUDA_DECLARE)
#undef GT_CUDA_DECLARE

#ifdef __cplusplus
}
#endif

/* Block-wide reductions for kernels (device code only). Every thread of the
 * block must call them; every thread gets the same result, and the order of
 * additions is fixed by the block size, so results are deterministic. */
#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T gt_warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__device__ __forceinline__ T gt_warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* blockDim.x must be a multiple of 32. */
template <typename T>
__device__ T gt_block_sum(T v) {
  __shared__ T buf[32];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = gt_warp_sum(v);
  __syncthreads(); /* an earlier call may still be reading buf */
  if (lane == 0) buf[wid] = v;
  __syncthreads();
  v = lane < nw ? buf[lane] : (T)0;
  return gt_warp_sum(v);
}

__device__ __forceinline__ float gt_block_max(float v) {
  __shared__ float buf[32];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = gt_warp_max(v);
  __syncthreads();
  if (lane == 0) buf[wid] = v;
  __syncthreads();
  v = lane < nw ? buf[lane] : -INFINITY;
  return gt_warp_max(v);
}

/* A softmax's two passes over the row x[0..V): its max, and the sum of
 * exp(x - max), both reduced over the block. */
__device__ __forceinline__ void gt_block_max_sumexp(const float *x, int V, float *mx, float *sum) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
  m = gt_block_max(m);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - m);
  *mx = m;
  *sum = gt_block_sum(s);
}
#endif

#endif
