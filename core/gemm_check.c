/* The argument checks of gemm and gemm_ex, made once by gt_op_gemm and
 * gt_op_gemm_ex for every backend before it touches memory: transpose
 * flags, row-major shapes and leading dimensions, batch outputs that cannot
 * overlap, and gemm_ex's operand types. */
#include "core/backend_impl.h"

static gt_status check_shape(const gt_backend *be, gt_transpose ta, gt_transpose tb, int m, int n, int k, const void *a,
                             int lda, const void *b, int ldb, const void *c, int ldc, int64_t stride_c, int batch) {
  if ((ta != GT_NO_TRANS && ta != GT_TRANS) || (tb != GT_NO_TRANS && tb != GT_TRANS))
    return gt_errorf(GT_EINVAL, "%s: gemm: transpose flags must be GT_NO_TRANS or GT_TRANS", be->name);
  if (m < 0 || n < 0 || k < 0 || batch < 1)
    return gt_errorf(GT_EINVAL, "%s: gemm: need m, n, k >= 0 and batch >= 1, got m=%d n=%d k=%d batch=%d", be->name, m,
                     n, k, batch);
  if (m == 0 || n == 0) return GT_OK;
  if (!c || (k > 0 && (!a || !b))) return gt_errorf(GT_EINVAL, "%s: gemm: a, b and c must not be NULL", be->name);
  /* Row-major: the leading dimension is at least the stored row length. */
  int a_cols = ta == GT_TRANS ? m : k, b_cols = tb == GT_TRANS ? k : n;
  if (k > 0 && (lda < a_cols || lda < 1))
    return gt_errorf(GT_EINVAL, "%s: gemm: lda=%d is less than the %d columns of A as stored", be->name, lda, a_cols);
  if (k > 0 && (ldb < b_cols || ldb < 1))
    return gt_errorf(GT_EINVAL, "%s: gemm: ldb=%d is less than the %d columns of B as stored", be->name, ldb, b_cols);
  if (ldc < n) return gt_errorf(GT_EINVAL, "%s: gemm: ldc=%d is less than n=%d", be->name, ldc, n);
  if (batch > 1) {
    /* Outputs stacked one after another, or side by side in shared rows
     * (attention's heads); anything else could overlap. */
    int64_t span = (int64_t)(m - 1) * ldc + n;
    int64_t sc = stride_c < 0 ? -stride_c : stride_c;
    bool side_by_side = stride_c >= n && (int64_t)(batch - 1) * stride_c + n <= ldc;
    if (sc < span && !side_by_side)
      return gt_errorf(GT_EINVAL,
                       "%s: gemm: stride_c=%lld makes the %d outputs of the batch overlap (each spans %lld "
                       "elements of rows %d apart)",
                       be->name, (long long)stride_c, batch, (long long)span, ldc);
  }
  return GT_OK;
}

gt_status gt_gemm_check(const gt_backend *be, const gt_gemm_args *g) {
  return check_shape(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc,
                     g->stride_c, g->batch);
}

static bool known(gt_dtype t) { return t == GT_F32 || t == GT_BF16; }

gt_status gt_gemm_ex_check(const gt_backend *be, const gt_gemm_ex_args *g) {
  if (!known(g->a_type) || !known(g->b_type) || !known(g->c_type))
    return gt_errorf(GT_EUNSUPPORTED, "%s: gemm_ex takes f32 or bf16 operands, got a=%s b=%s c=%s", be->name,
                     gt_dtype_name(g->a_type), gt_dtype_name(g->b_type), gt_dtype_name(g->c_type));
  if (g->a_type != g->b_type)
    return gt_errorf(GT_EUNSUPPORTED,
                     "%s: gemm_ex needs a and b of one dtype, got a=%s b=%s; convert one with f32_to_bf16 or "
                     "bf16_to_f32",
                     be->name, gt_dtype_name(g->a_type), gt_dtype_name(g->b_type));
  if (g->a_type == GT_F32 && g->c_type == GT_BF16)
    return gt_errorf(GT_EUNSUPPORTED,
                     "%s: gemm_ex has no f32 x f32 -> bf16 path; write f32 and convert with f32_to_bf16", be->name);
  return check_shape(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc,
                     g->stride_c, g->batch);
}
