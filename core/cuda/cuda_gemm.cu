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

/* Row-major shape checks, the same as the CPU backend's. */
static gt_status check_shape(gt_backend *be, gt_transpose ta, gt_transpose tb, int m, int n, int k,
                             const void *a, int lda, const void *b, int ldb, const void *c, int ldc,
                             int batch) {
  if ((ta != GT_NO_TRANS && ta != GT_TRANS) || (tb != GT_NO_TRANS && tb != GT_TRANS))
    return gt_errorf(GT_EINVAL, "%s: gemm: transpose flags must be GT_NO_TRANS or GT_TRANS",
                     be->name);
  if (m < 0 || n < 0 || k < 0 || batch < 1)
    return gt_errorf(GT_EINVAL,
                     "%s: gemm: need m, n, k >= 0 and batch >= 1, got m=%d n=%d k=%d batch=%d",
                     be->name, m, n, k, batch);
  if (m == 0 || n == 0) return GT_OK;
  if (!c || (k > 0 && (!a || !b)))
    return gt_errorf(GT_EINVAL, "%s: gemm: a, b and c must not be NULL", be->name);
  int a_cols = ta == GT_TRANS ? m : k; /* row-major A is m x k, or k x m when transposed */
  int b_cols = tb == GT_TRANS ? k : n;
  if (k > 0 && (lda < a_cols || lda < 1))
    return gt_errorf(GT_EINVAL, "%s: gemm: lda=%d is less than the %d columns of A as stored",
                     be->name, lda, a_cols);
  if (k > 0 && (ldb < b_cols || ldb < 1))
    return gt_errorf(GT_EINVAL, "%s: gemm: ldb=%d is less than the %d columns of B as stored",
                     be->name, ldb, b_cols);
  if (ldc < n) return gt_errorf(GT_EINVAL, "%s: gemm: ldc=%d is less than n=%d", be->name, ldc, n);
  return GT_OK;
}

/* Outputs of a public batched GEMM must not overlap (the kernels inside the
 * backend interleave heads on purpose, and skip this). */
static gt_status check_batch_overlap(gt_backend *be, int m, int n, int ldc, int64_t stride_c,
                                     int batch) {
  if (batch <= 1 || m == 0 || n == 0) return GT_OK;
  /* Outputs stacked one after another, or side by side in shared rows
   * (attention's heads); anything else could overlap. */
  int64_t span = (int64_t)(m - 1) * ldc + n;
  int64_t sc = stride_c < 0 ? -stride_c : stride_c;
  bool side_by_side = stride_c >= n && (int64_t)(batch - 1) * stride_c + n <= ldc;
  if (sc < span && !side_by_side)
    return gt_errorf(
        GT_EINVAL,
        "%s: gemm: stride_c=%lld makes the %d outputs of the batch overlap (each spans "
        "%lld elements)",
        be->name, (long long)stride_c, batch, (long long)span);
  return GT_OK;
}

/* k == 0: C = beta*C, and beta == 0 ignores what C held (BLAS convention),
 * done here rather than trusting every library version with empty sums. */
template <typename T>
__global__ void scale_c_kernel(T *c, int m, int n, int ldc, int64_t stride_c, int batch,
                               float beta) {
  int64_t per = (int64_t)m * n, total = per * batch;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int64_t bi = idx / per, r = (idx % per) / n, j = idx % n;
    T *x = c + bi * stride_c + r * ldc + j;
    *x = beta == 0.0f ? (T)0.0f : (T)(beta * (float)*x);
  }
}

template <typename T>
static gt_status scale_c(gt_backend *be, T *c, int m, int n, int ldc, int64_t stride_c, int batch,
                         float beta) {
  size_t total = (size_t)m * n * batch;
  scale_c_kernel<T>
      <<<gt_cuda_blocks(total, GT_CUDA_THREADS), GT_CUDA_THREADS, 0, gt_cuda_stream(be)>>>(
          c, m, n, ldc, stride_c, batch, beta);
  return gt_cuda_launched(be, "gemm_scale_c");
}

gt_status gt_cuda_gemm_rm(gt_backend *be, gt_transpose ta, gt_transpose tb, int m, int n, int k,
                          float alpha, const float *a, int lda, int64_t sa, const float *b, int ldb,
                          int64_t sb, float beta, float *c, int ldc, int64_t sc, int batch) {
  GT_TRY(check_shape(be, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, batch));
  if (m == 0 || n == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  if (k == 0) return scale_c(be, c, m, n, ldc, sc, batch, beta);
  cublasHandle_t h = gt_cuda_of(be)->blas;
  cublasStatus_t st;
  if (batch == 1)
    st = cublasSgemm(h, op_of(tb), op_of(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc);
  else
    st = cublasSgemmStridedBatched(h, op_of(tb), op_of(ta), n, m, k, &alpha, b, ldb, sb, a, lda, sa,
                                   &beta, c, ldc, sc, batch);
  return gt_cuda_blas_check(be, st, batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched");
}

gt_status gt_cuda_gemm(gt_backend *be, const gt_gemm_args *g) {
  GT_TRY(check_shape(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c,
                     g->ldc, g->batch));
  GT_TRY(check_batch_overlap(be, g->m, g->n, g->ldc, g->stride_c, g->batch));
  return gt_cuda_gemm_rm(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a, g->lda,
                         g->stride_a, g->b, g->ldb, g->stride_b, g->beta, g->c, g->ldc, g->stride_c,
                         g->batch);
}

static bool cuda_type(gt_dtype t, cudaDataType_t *out) {
  switch (t) {
    case GT_F32:
      *out = CUDA_R_32F;
      return true;
    case GT_BF16:
      *out = CUDA_R_16BF;
      return true;
    default:
      return false;
  }
}

gt_status gt_cuda_gemm_ex(gt_backend *be, const gt_gemm_ex_args *g) {
  cudaDataType_t at, bt, ct;
  if (!cuda_type(g->a_type, &at) || !cuda_type(g->b_type, &bt) || !cuda_type(g->c_type, &ct))
    return gt_errorf(GT_EUNSUPPORTED, "%s: gemm_ex takes f32 or bf16 operands, got a=%s b=%s c=%s",
                     be->name, gt_dtype_name(g->a_type), gt_dtype_name(g->b_type),
                     gt_dtype_name(g->c_type));
  if (g->a_type != g->b_type)
    return gt_errorf(GT_EUNSUPPORTED,
                     "%s: gemm_ex needs a and b of one dtype, got a=%s b=%s; "
                     "convert one with f32_to_bf16 or bf16_to_f32",
                     be->name, gt_dtype_name(g->a_type), gt_dtype_name(g->b_type));
  if (g->a_type == GT_F32 && g->c_type == GT_BF16)
    return gt_errorf(GT_EUNSUPPORTED,
                     "%s: gemm_ex has no f32 x f32 -> bf16 path; write f32 and "
                     "convert with f32_to_bf16",
                     be->name);
  GT_TRY(check_shape(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c,
                     g->ldc, g->batch));
  GT_TRY(check_batch_overlap(be, g->m, g->n, g->ldc, g->stride_c, g->batch));
  if (g->m == 0 || g->n == 0) return GT_OK;
  /* fp32 operands (and so an fp32 result) are the plain gemm, bit for bit,
   * as on the CPU: cuBLAS documents no promise that GemmEx picks the kernel
   * Sgemm picks for the same fp32 problem. */
  if (g->a_type == GT_F32)
    return gt_cuda_gemm_rm(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                           (const float *)g->a, g->lda, g->stride_a, (const float *)g->b, g->ldb,
                           g->stride_b, g->beta, (float *)g->c, g->ldc, g->stride_c, g->batch);
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
    st = cublasGemmEx(h, op_of(g->trans_b), op_of(g->trans_a), g->n, g->m, g->k, &g->alpha, g->b,
                      bt, g->ldb, g->a, at, g->lda, &g->beta, g->c, ct, g->ldc, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
  else
    st = cublasGemmStridedBatchedEx(h, op_of(g->trans_b), op_of(g->trans_a), g->n, g->m, g->k,
                                    &g->alpha, g->b, bt, g->ldb, g->stride_b, g->a, at, g->lda,
                                    g->stride_a, &g->beta, g->c, ct, g->ldc, g->stride_c, g->batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return gt_cuda_blas_check(be, st, g->batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}
