/* Mixed-precision matrix products on the CPU.
 *
 * bf16 x bf16 -> fp32 runs on AMX tiles where the CPU has them
 * (cpu_gemm_amx.c). Elsewhere, and for bf16 results, the bf16 operands are
 * widened to fp32 (exactly: a bf16 is the top half of a float32) and the
 * product runs in sgemm (OpenBLAS as Debian builds it has no bf16 GEMM).
 * A product of two bf16 values is exact in fp32, so either way the result is
 * what a bf16 tensor-core GEMM with fp32 accumulation computes, up to
 * summation order: the CPU runs mixed precision with the same numerics as a
 * GPU, which is what lets its tests stand for both. GT_CPU_BF16=widen
 * forces the widening path (tests run both).
 *
 * Packed or widened operands live in one buffer kept by the backend that
 * grows to the largest product and is then reused, so steady-state training
 * allocates nothing.
 */
#include <stdlib.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

/* Elements a strided, batched operand of rows x cols (stored) spans from
 * its first element (strides are >= 0 here). */
static size_t span(int rows, int cols, int ld, int64_t stride, int batch) {
  if (rows == 0 || cols == 0) return 0;
  return (size_t)(batch > 1 ? (int64_t)(batch - 1) * stride : 0) + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

static gt_status gemm_ex_scratch(gt_backend *be, size_t floats, float **out) {
  gt_cpu_impl *impl = be->impl;
  if (floats > impl->scratch_cap) {
    /* Cache-line aligned, so tile rows never straddle lines; nothing in it
     * outlives a call, so it is not copied. */
    free(impl->scratch);
    impl->scratch_cap = 0;
    size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
    impl->scratch = aligned_alloc(64, bytes);
    if (!impl->scratch) return gt_errorf(GT_ENOMEM, "cpu: out of memory for %zu bytes of bf16 operands", bytes);
    impl->scratch_cap = floats;
  }
  *out = impl->scratch;
  return GT_OK;
}

/* gt_op_gemm_ex has checked the arguments. */
gt_status GT_CPU_KERNEL(gemm_ex)(gt_backend *be, const gt_gemm_ex_args *g) {
  gt_gemm_args f = {.trans_a = g->trans_a,
                    .trans_b = g->trans_b,
                    .m = g->m,
                    .n = g->n,
                    .k = g->k,
                    .alpha = g->alpha,
                    .beta = g->beta,
                    .lda = g->lda,
                    .stride_a = g->stride_a,
                    .ldb = g->ldb,
                    .stride_b = g->stride_b,
                    .ldc = g->ldc,
                    .stride_c = g->stride_c,
                    .batch = g->batch};
  if (g->a_type == GT_F32) {
    f.a = g->a;
    f.b = g->b;
    f.c = g->c;
    return GT_CPU_KERNEL(gemm)(be, &f);
  }
  if (g->m == 0 || g->n == 0) return GT_OK;
  bool have_k = g->k > 0;
#ifdef GIANT_CPU_AMX
  gt_cpu_impl *impl = be->impl;
  if (impl->amx && have_k && g->c_type == GT_F32) {
    float *scratch = NULL;
    GT_TRY(gemm_ex_scratch(be, gt_cpu_amx_scratch_floats(g->m, g->n, g->k), &scratch));
    for (int e = 0; e < g->batch; e++) GT_TRY(gt_cpu_gemm_bf16_amx(be, g, e, (uint16_t *)scratch));
    return GT_OK;
  }
#endif
  /* The widened copies keep the operands' layout, so they cover each
   * operand from its first element to its last. */
  if (g->batch > 1 && (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0))
    return gt_errorf(GT_EUNSUPPORTED, "cpu: gemm_ex with bf16 operands takes batch strides >= 0");
  bool ta = g->trans_a == GT_TRANS, tb = g->trans_b == GT_TRANS;
  size_t na = have_k ? span(ta ? g->k : g->m, ta ? g->m : g->k, g->lda, g->stride_a, g->batch) : 0;
  size_t nb = have_k ? span(tb ? g->n : g->k, tb ? g->k : g->n, g->ldb, g->stride_b, g->batch) : 0;
  size_t nc = g->c_type == GT_BF16 ? span(g->m, g->n, g->ldc, g->stride_c, g->batch) : 0;
  float *w = NULL;
  GT_TRY(gemm_ex_scratch(be, na + nb + nc, &w));
  if (have_k) {
    GT_TRY(GT_CPU_KERNEL(bf16_to_f32)(be, w, g->a, na));
    GT_TRY(GT_CPU_KERNEL(bf16_to_f32)(be, w + na, g->b, nb));
  }
  f.a = w;
  f.b = w + na;
  if (g->c_type == GT_F32) {
    f.c = g->c;
    return GT_CPU_KERNEL(gemm)(be, &f);
  }
  /* A bf16 result: compute in fp32 (beta reads the old C widened), round once. */
  f.c = w + na + nb;
  GT_TRY(GT_CPU_KERNEL(bf16_to_f32)(be, f.c, g->c, nc));
  GT_TRY(GT_CPU_KERNEL(gemm)(be, &f));
  /* Only the elements of C are written back: padding and gaps keep their bits. */
  for (int e = 0; e < g->batch; e++)
    for (int r = 0; r < g->m; r++) {
      size_t off = (size_t)((int64_t)e * g->stride_c) + (size_t)r * (size_t)g->ldc;
      GT_TRY(GT_CPU_KERNEL(f32_to_bf16)(be, (uint16_t *)g->c + off, f.c + off, (size_t)g->n));
    }
  return GT_OK;
}

/* Biases apart from their product (linear_forward folds its bias into the
 * product instead; linear_backward uses bias_backward). */
gt_status GT_CPU_KERNEL(bias_add)(gt_backend *be, float *out, const float *bias, int N, int OC) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)N * OC >= GT_CPU_PAR_MIN)
  for (int i = 0; i < N; i++) {
    float *o = out + (int64_t)i * OC;
    for (int c = 0; c < OC; c++) o[c] += bias[c];
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(bias_backward)(gt_backend *be, float *dbias, const float *dout, int N, int OC) {
  int nt = gt_cpu_threads(be);
  /* Each thread owns a range of columns and sums its rows in order: the
   * same bits whatever the thread count. */
#pragma omp parallel num_threads(nt) if ((int64_t)N * OC >= GT_CPU_PAR_MIN)
  {
    int64_t c0, c1;
    gt_cpu_share(OC, 16, &c0, &c1);
    for (int i = 0; i < N && c0 < c1; i++) {
      const float *d = dout + (int64_t)i * OC;
      for (int64_t c = c0; c < c1; c++) dbias[c] += d[c];
    }
  }
  return GT_OK;
}
