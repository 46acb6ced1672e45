/* Matrix products on OpenBLAS.
 *
 * One product uses every thread inside sgemm. A batch of products runs one
 * product per thread: OpenBLAS's OpenMP build sees it is inside a parallel
 * region and stays single-threaded, so BLAS threads never nest inside ours.
 */
#include <cblas.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

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
              g->trans_b == GT_TRANS ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha, g->a + i * g->stride_a,
              g->lda, g->b + i * g->stride_b, g->ldb, g->beta, c, g->ldc);
}

/* gt_op_gemm has checked the arguments. */
gt_status GT_CPU_KERNEL(gemm)(gt_backend *be, const gt_gemm_args *g) {
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
