/* Matrix products on cuBLAS.
 *
 * cuBLAS is column-major; Giant is row-major. A row-major matrix read as
 * column-major is its transpose, so C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T: swap the operands (and m with n), keep the
 * transpose flags. The handle is bound to the compute stream and owns a
 * fixed workspace (cuda_backend.cu). fp32 GEMMs run in full fp32 (no TF32)
 * unless GT_CUDA_TF32=1; gemm_ex runs bf16 storage with fp32 accumulation.
 */
#include <cuda_bf16.h>

#include "core/cuda/cuda_internal.h"

static cublasOperation_t op_of(gt_transpose t) { return t == GT_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* k == 0: C = beta*C, and beta == 0 ignores what C held (BLAS convention),
 * done here rather than trusting every library version with empty sums. */
template <typename T>
__global__ void scale_c_kernel(T *c, int m, int n, int ldc, int64_t stride_c, int batch, float beta) {
  int64_t per = (int64_t)m * n, total = per * batch;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int64_t bi = idx / per, r = (idx % per) / n, j = idx % n;
    T *x = c + bi * stride_c + r * ldc + j;
    *x = beta == 0.0f ? (T)0.0f : (T)(beta * (float)*x);
  }
}

template <typename T>
static gt_status scale_c(gt_backend *be, T *c, int m, int n, int ldc, int64_t stride_c, int batch, float beta) {
  size_t total = (size_t)m * n * batch;
  scale_c_kernel<T><<<gt_cuda_blocks(total, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
      c, m, n, ldc, stride_c, batch, beta);
  return gt_cuda_launched(be, "gemm_scale_c");
}

/* Its callers are gt_op_gemm and gt_op_gemm_ex, which have checked the
 * arguments, and kernels whose own checked sizes make valid products. */
gt_status gt_cuda_gemm_rm(gt_backend *be, gt_transpose ta, gt_transpose tb, int m, int n, int k, float alpha,
                          const float *a, int lda, int64_t sa, const float *b, int ldb, int64_t sb, float beta,
                          float *c, int ldc, int64_t sc, int batch) {
  if (m == 0 || n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  if (k == 0) return scale_c(be, c, m, n, ldc, sc, batch, beta);
  cublasHandle_t h = gt_cuda_of(be)->blas;
  cublasStatus_t st;
  if (batch == 1)
    st = cublasSgemm(h, op_of(tb), op_of(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc);
  else
    st = cublasSgemmStridedBatched(h, op_of(tb), op_of(ta), n, m, k, &alpha, b, ldb, sb, a, lda, sa, &beta, c, ldc, sc,
                                   batch);
  return gt_cuda_blas_check(be, st, batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched");
}

gt_status gt_cuda_gemm(gt_backend *be, const gt_gemm_args *g) {
  return gt_cuda_gemm_rm(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->stride_a, g->b,
                         g->ldb, g->stride_b, g->beta, g->c, g->ldc, g->stride_c, g->batch);
}

/* gt_gemm_ex_check has admitted only f32 and bf16. */
static cudaDataType_t cuda_type(gt_dtype t) { return t == GT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* gt_op_gemm_ex has checked the arguments. */
gt_status gt_cuda_gemm_ex(gt_backend *be, const gt_gemm_ex_args *g) {
  if (g->m == 0 || g->n == 0) return GT_OK;
  cudaDataType_t at = cuda_type(g->a_type), bt = cuda_type(g->b_type), ct = cuda_type(g->c_type);
  /* fp32 operands (and so an fp32 result) are the plain gemm, bit for bit,
   * as on the CPU: cuBLAS documents no promise that GemmEx picks the kernel
   * Sgemm picks for the same fp32 problem. */
  if (g->a_type == GT_F32)
    return gt_cuda_gemm_rm(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, (const float *)g->a, g->lda,
                           g->stride_a, (const float *)g->b, g->ldb, g->stride_b, g->beta, (float *)g->c, g->ldc,
                           g->stride_c, g->batch);
  GT_TRY(gt_cuda_enter(be));
  if (g->k == 0) {
    if (g->c_type == GT_BF16)
      return scale_c(be, (__nv_bfloat16 *)g->c, g->m, g->n, g->ldc, g->stride_c, g->batch, g->beta);
    return scale_c(be, (float *)g->c, g->m, g->n, g->ldc, g->stride_c, g->batch, g->beta);
  }
  cublasHandle_t h = gt_cuda_of(be)->blas;
  /* bf16 operands, CUBLAS_COMPUTE_32F: fp32 accumulation (and fp32 alpha,
   * beta) whatever C's storage. */
  cublasStatus_t st;
  if (g->batch == 1)
    st = cublasGemmEx(h, op_of(g->trans_b), op_of(g->trans_a), g->n, g->m, g->k, &g->alpha, g->b, bt, g->ldb, g->a, at,
                      g->lda, &g->beta, g->c, ct, g->ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  else
    st = cublasGemmStridedBatchedEx(h, op_of(g->trans_b), op_of(g->trans_a), g->n, g->m, g->k, &g->alpha, g->b, bt,
                                    g->ldb, g->stride_b, g->a, at, g->lda, g->stride_a, &g->beta, g->c, ct, g->ldc,
                                    g->stride_c, g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return gt_cuda_blas_check(be, st, g->batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}
