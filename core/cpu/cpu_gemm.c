/* Matrix products on OpenBLAS.
 *
 * One product uses every thread inside sgemm. A batch of products runs one
 * product per thread: OpenBLAS's OpenMP build sees it is inside a parallel
 * region and stays single-threaded, so BLAS threads never nest inside ours.
 */
#include <cblas.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

gt_status gt_cpu_gemm_check(const gt_gemm_args *g) {
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
    return gt_errorf(GT_EINVAL, "gemm: need m, n, k >= 0 and batch >= 1, got m=%d n=%d k=%d batch=%d",
                     g->m, g->n, g->k, g->batch);
  if (g->m == 0 || g->n == 0) return GT_OK;
  if (!g->c || (g->k > 0 && (!g->a || !g->b)))
    return gt_errorf(GT_EINVAL, "gemm: a, b and c must not be NULL");
  /* Row-major: the leading dimension is at least the stored row length. */
  int a_cols = g->trans_a == GT_TRANS ? g->m : g->k;
  int b_cols = g->trans_b == GT_TRANS ? g->k : g->n;
  if (g->k > 0 && (g->lda < a_cols || g->lda < 1))
    return gt_errorf(GT_EINVAL, "gemm: lda=%d is less than the %d columns of A as stored", g->lda,
                     a_cols);
  if (g->k > 0 && (g->ldb < b_cols || g->ldb < 1))
    return gt_errorf(GT_EINVAL, "gemm: ldb=%d is less than the %d columns of B as stored", g->ldb,
                     b_cols);
  if (g->ldc < g->n)
    return gt_errorf(GT_EINVAL, "gemm: ldc=%d is less than n=%d", g->ldc, g->n);
  if (g->batch > 1) {
    /* Outputs stacked one after another, or side by side in shared rows
     * (attention's heads); anything else could overlap. */
    int64_t span = (int64_t)(g->m - 1) * g->ldc + g->n;
    int64_t sc = g->stride_c < 0 ? -g->stride_c : g->stride_c;
    bool side_by_side = g->stride_c >= g->n && (int64_t)(g->batch - 1) * g->stride_c + g->n <= g->ldc;
    if (sc < span && !side_by_side)
      return gt_errorf(GT_EINVAL,
                       "gemm: stride_c=%lld makes the %d outputs of the batch overlap (each spans "
                       "%lld elements of rows %d apart)",
                       (long long)g->stride_c, g->batch, (long long)span, g->ldc);
  }
  return GT_OK;
}

static void gemm_one(const gt_gemm_args *g, int64_t i) {
  float *c = g->c + i * g->stride_c;
  if (g->k == 0) {
    /* C = beta*C; BLAS convention: beta == 0 ignores what C held. */
    for (int r = 0; r < g->m; r++)
      for (int j = 0; j < g->n; j++) {
        float *x = c + (int64_t)r * g->ldc + j;
        *x = g->beta == 0.0f ? 0.0f : g->beta * *x;
      }
    return;
  }
  cblas_sgemm(CblasRowMajor, g->trans_a == GT_TRANS ? CblasTrans : CblasNoTrans,
              g->trans_b == GT_TRANS ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
              g->a + i * g->stride_a, g->lda, g->b + i * g->stride_b, g->ldb, g->beta, c, g->ldc);
}

gt_status gt_cpu_gemm(gt_backend *be, const gt_gemm_args *g) {
  GT_TRY(gt_cpu_gemm_check(g));
  if (g->m == 0 || g->n == 0) return GT_OK;
  int nt = gt_cpu_threads(be);
  if (g->batch == 1 || g->batch < nt) {
    for (int i = 0; i < g->batch; i++) gemm_one(g, i);
    return GT_OK;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < g->batch; i++) gemm_one(g, i);
  return GT_OK;
}
