/* CUDA backend: device selection, creation and teardown, error reporting,
 * and the device-side checks of token and target ids.
 *
 * Two non-blocking streams: compute, where every kernel runs in order, and
 * copy, for transfers that overlap compute. Non-blocking means neither
 * synchronises with the legacy default stream, so only the engine's own
 * events order them. Besides the arena-managed memory the backend holds a
 * fixed cuBLAS workspace and a small grow-only scratch buffer for
 * reductions (cuda_internal.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda_internal.h"

/* cuBLAS needs a workspace; a fixed one keeps GEMMs free of allocations
 * and their results reproducible. 32 MiB is what NVIDIA advises for Hopper. */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* ---- errors ---- */

gt_status gt_cuda_check(gt_backend *be, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return GT_OK;
  /* Clear a non-sticky error so it does not resurface in an unrelated call. */
  (void)cudaGetLastError();
  gt_status code = e == cudaErrorMemoryAllocation ? GT_ENOMEM : GT_EBACKEND;
  return gt_errorf(code, "%s: %s failed: %s (%s)", be ? be->name : "cuda", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

static const char *blas_status_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

gt_status gt_cuda_blas_check(gt_backend *be, cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return GT_OK;
  gt_status code = st == CUBLAS_STATUS_ALLOC_FAILED ? GT_ENOMEM : GT_EBACKEND;
  return gt_errorf(code, "%s: %s failed: %s (%d)", be ? be->name : "cuda", what, blas_status_name(st), (int)st);
}

gt_status gt_cuda_launched(gt_backend *be, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return GT_OK;
  return gt_errorf(GT_EBACKEND, "%s: launching kernel %s failed: %s (%s)", be->name, kernel, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

gt_status gt_cuda_enter(gt_backend *be) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == be->device) return GT_OK;
  return gt_cuda_check(be, cudaSetDevice(be->device), "cudaSetDevice");
}

/* ---- device selection ---- */

/* Why cudaGetDeviceCount failed, in words a user can act on: the runtime's
 * own message for a missing driver speaks of an "insufficient" one. */
static void count_failure(cudaError_t e, char *buf, size_t n) {
  int len = snprintf(buf, n, "no CUDA device found: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                     cudaGetErrorName(e));
  if (e == cudaErrorInsufficientDriver && len > 0 && (size_t)len < n) {
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    if (drv == 0)
      snprintf(buf + len, n - (size_t)len, "; no NVIDIA driver is loaded on this machine");
    else
      snprintf(buf + len, n - (size_t)len,
               "; the driver supports CUDA %d.%d but this build needs %d.%d: update the driver", drv / 1000,
               drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  }
  (void)cudaGetLastError();
}

bool gt_cuda_available(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    char buf[256];
    count_failure(e, buf, sizeof buf);
    if (why) snprintf(why, why_len, "%s", buf);
    return false;
  }
  if (n == 0) {
    if (why) snprintf(why, why_len, "no CUDA device found: the driver reports 0 devices (check CUDA_VISIBLE_DEVICES)");
    return false;
  }
  return true;
}

/* cfg->device, or GT_LOCAL_RANK (set by the launcher, one process per GPU)
 * when it is -1, or 0. */
static gt_status pick_device(const gt_backend_config *cfg, int *dev) {
  int d = cfg ? cfg->device : -1;
  if (d < -1) return gt_errorf(GT_EINVAL, "CUDA device index %d is negative; use cuda:N with N >= 0", d);
  if (d == -1) {
    const char *env = getenv("GT_LOCAL_RANK");
    d = 0;
    if (env && *env) {
      char *end;
      long v = strtol(env, &end, 10);
      if (*end != '\0' || v < 0 || v > INT_MAX)
        return gt_errorf(GT_EINVAL,
                         "GT_LOCAL_RANK='%s' is not a device index (a non-negative integer); "
                         "unset it or choose the device with cuda:N",
                         env);
      d = (int)v;
    }
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    char buf[256];
    count_failure(e, buf, sizeof buf);
    return gt_errorf(GT_EBACKEND, "%s; or run with --device cpu", buf);
  }
  if (n == 0)
    return gt_errorf(GT_EBACKEND,
                     "no CUDA device found: the driver reports 0 devices "
                     "(check CUDA_VISIBLE_DEVICES), or run with --device cpu");
  if (d >= n) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return gt_errorf(GT_EINVAL,
                     "CUDA device %d requested but only %d device%s visible "
                     "(CUDA_VISIBLE_DEVICES=%s); use cuda:0 .. cuda:%d or fix GT_LOCAL_RANK",
                     d, n, n == 1 ? " is" : "s are", vis ? vis : "<unset>", n - 1);
  }
  *dev = d;
  return GT_OK;
}

__global__ void reset_flag_kernel(unsigned long long *flag) { *flag = GT_CUDA_NO_ERROR; }

gt_status gt_cuda_backend_create(const gt_backend_config *cfg, gt_backend **out) {
  *out = NULL;
  int dev = 0;
  GT_TRY(pick_device(cfg, &dev));
  gt_backend *be = (gt_backend *)calloc(1, sizeof *be);
  gt_cuda *cu = (gt_cuda *)calloc(1, sizeof *cu);
  if (!be || !cu) {
    free(be);
    free(cu);
    return gt_errorf(GT_ENOMEM, "cuda: out of host memory creating the backend");
  }
  be->ops = &gt_cuda_ops;
  be->kind = GT_DEVICE_CUDA;
  be->device = dev;
  be->num_threads = 1;
  be->impl = cu;
  snprintf(be->name, sizeof be->name, "cuda:%d", dev);
  snprintf(be->kernels, sizeof be->kernels, "cublas+cuda");

  gt_status s = gt_cuda_check(be, cudaSetDevice(dev), "cudaSetDevice");
  if (s == GT_OK) s = gt_cuda_stream_create(be, &be->compute);
  if (s == GT_OK) s = gt_cuda_stream_create(be, &be->copy);
  if (s == GT_OK) s = gt_cuda_blas_check(be, cublasCreate(&cu->blas), "cublasCreate");
  if (s == GT_OK) s = gt_cuda_blas_check(be, cublasSetStream(cu->blas, be->compute->s), "cublasSetStream");
  if (s == GT_OK) {
    s = gt_cuda_check(be, cudaMalloc(&cu->blas_ws, BLAS_WORKSPACE_BYTES), "cudaMalloc (cuBLAS workspace)");
    if (s == GT_OK) cu->blas_ws_bytes = BLAS_WORKSPACE_BYTES;
  }
  if (s == GT_OK)
    s = gt_cuda_blas_check(be, cublasSetWorkspace(cu->blas, cu->blas_ws, cu->blas_ws_bytes), "cublasSetWorkspace");
  if (s == GT_OK) {
    /* fp32 GEMMs stay fp32 (no TF32) so results match the CPU backend;
     * GT_CUDA_TF32=1 trades that for tensor-core speed. */
    const char *tf32 = getenv("GT_CUDA_TF32");
    bool fast = tf32 && !strcmp(tf32, "1");
    s = gt_cuda_blas_check(be, cublasSetMathMode(cu->blas, fast ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                           "cublasSetMathMode");
  }
  if (s == GT_OK) s = gt_cuda_check(be, cudaMalloc((void **)&cu->err, sizeof *cu->err), "cudaMalloc (error slot)");
  if (s == GT_OK)
    s = gt_cuda_check(be, cudaMallocHost((void **)&cu->err_host, sizeof *cu->err_host), "cudaMallocHost (error slot)");
  const char *ids = getenv("GT_CUDA_CHECK_IDS");
  cu->check_ids = ids && !strcmp(ids, "1");
  if (s == GT_OK) {
    reset_flag_kernel<<<1, 1, 0, be->compute->s>>>(cu->err);
    s = gt_cuda_launched(be, "reset_flag");
  }
  if (s == GT_OK) s = gt_cuda_stream_sync(be, be->compute);
  if (s != GT_OK) {
    gt_cuda_destroy(be);
    return s;
  }
  *out = be;
  return GT_OK;
}

void gt_cuda_destroy(gt_backend *be) {
  if (!be) return;
  gt_cuda *cu = gt_cuda_of(be);
  (void)cudaSetDevice(be->device);
  /* Let queued work finish before its memory goes away. */
  if (be->compute) (void)cudaStreamSynchronize(be->compute->s);
  if (be->copy) (void)cudaStreamSynchronize(be->copy->s);
  if (cu) {
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->blas_ws) cudaFree(cu->blas_ws);
    if (cu->err) cudaFree(cu->err);
    if (cu->err_host) cudaFreeHost(cu->err_host);
    if (cu->scratch) cudaFree(cu->scratch);
    free(cu);
  }
  gt_cuda_stream_destroy(be, be->compute);
  gt_cuda_stream_destroy(be, be->copy);
  (void)cudaGetLastError();
  free(be);
}

/* ---- scratch and the target check ---- */

gt_status gt_cuda_scratch(gt_backend *be, size_t bytes, void **ptr) {
  gt_cuda *cu = gt_cuda_of(be);
  if (bytes > cu->scratch_bytes) {
    /* Earlier kernels may still read the old buffer. */
    GT_TRY(gt_cuda_check(be, cudaStreamSynchronize(gt_cuda_stream(be)), "cudaStreamSynchronize"));
    if (cu->scratch) cudaFree(cu->scratch);
    cu->scratch = NULL;
    cu->scratch_bytes = 0;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    GT_TRY(gt_cuda_check(be, cudaMalloc(&cu->scratch, want), "cudaMalloc (scratch)"));
    cu->scratch_bytes = want;
  }
  *ptr = cu->scratch;
  return GT_OK;
}

__global__ void check_ids_kernel(const int32_t *ids, int64_t n, int64_t lo, int64_t hi, unsigned long long *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t v = ids[i];
    if (v < lo || v >= hi) atomicMin(flag, (unsigned long long)i);
  }
}

gt_status gt_cuda_check_ids(gt_backend *be, const int32_t *ids, int64_t n, int64_t lo, int64_t hi, int64_t *bad_row,
                            int32_t *bad_val) {
  *bad_row = -1;
  *bad_val = 0;
  gt_cuda *cu = gt_cuda_of(be);
  if (n <= 0 || !cu->check_ids) return GT_OK;
  cudaStream_t st = gt_cuda_stream(be);
  check_ids_kernel<<<gt_cuda_blocks((size_t)n, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, st>>>(ids, n, lo, hi, cu->err);
  GT_TRY(gt_cuda_launched(be, "check_ids"));
  GT_TRY(gt_cuda_check(be, cudaMemcpyAsync(cu->err_host, cu->err, sizeof *cu->err, cudaMemcpyDeviceToHost, st),
                       "cudaMemcpyAsync (error slot)"));
  GT_TRY(gt_cuda_check(be, cudaStreamSynchronize(st), "cudaStreamSynchronize"));
  unsigned long long row = *cu->err_host;
  if (row == GT_CUDA_NO_ERROR) return GT_OK;
  reset_flag_kernel<<<1, 1, 0, st>>>(cu->err);
  GT_TRY(gt_cuda_launched(be, "reset_flag"));
  int32_t *val = (int32_t *)cu->err_host;
  GT_TRY(gt_cuda_check(be, cudaMemcpyAsync(val, ids + row, sizeof *val, cudaMemcpyDeviceToHost, st),
                       "cudaMemcpyAsync (bad id)"));
  GT_TRY(gt_cuda_check(be, cudaStreamSynchronize(st), "cudaStreamSynchronize"));
  *bad_row = (int64_t)row;
  *bad_val = *val;
  return GT_OK;
}
