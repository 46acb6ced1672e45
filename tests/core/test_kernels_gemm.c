/* gemm: every transpose combination, alpha and beta, padded leading
 * dimensions, batches with strides, and argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  int ta, tb, m, n, k, batch, pad;
  float alpha, beta;
} gemm_case;

/* op(X)[i][j] of a row-major matrix with leading dimension ld. */
static double at(const float *x, int ld, int trans, int i, int j) {
  return trans ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j];
}

static void run_gemm(gt_backend *be, const gemm_case *c, const gt_gemm_args *g0, const float *a, size_t na,
                     const float *b, size_t nb, float *cbuf, size_t nc) {
  gt_gemm_args g = *g0;
  float *da = kt_dput(be, a, na * sizeof *a), *db = kt_dput(be, b, nb * sizeof *b);
  float *dc = kt_dput(be, cbuf, nc * sizeof *cbuf);
  g.a = da;
  g.b = db;
  g.c = dc;
  KT_OK(gt_op_gemm(be, &g));
  kt_dget(be, cbuf, dc, nc * sizeof *cbuf);
  kt_dfree(be, da);
  kt_dfree(be, db);
  kt_dfree(be, dc);
  (void)c;
}

static void check_gemm(const gemm_case *c) {
  int lda = (c->ta ? c->m : c->k) + c->pad, ldb = (c->tb ? c->k : c->n) + c->pad;
  int ldc = c->n + c->pad;
  int rows_a = c->ta ? c->k : c->m, rows_b = c->tb ? c->n : c->k;
  /* Batch entries sit apart with a gap, so a stride mix-up shows. */
  int64_t sa = (int64_t)rows_a * lda + 3, sb = (int64_t)rows_b * ldb + 5;
  int64_t sc = (int64_t)c->m * ldc + 7;
  size_t na = (size_t)(sa * c->batch), nb = (size_t)(sb * c->batch), nc = (size_t)(sc * c->batch);
  float *a = kt_randn_alloc(na, 1.0f), *b = kt_randn_alloc(nb, 1.0f);
  float *c0 = kt_randn_alloc(nc, 1.0f), *got = kt_xmalloc(nc * sizeof *got);
  double *want = kt_to_double(c0, nc);
  for (int e = 0; e < c->batch; e++)
    for (int i = 0; i < c->m; i++)
      for (int j = 0; j < c->n; j++) {
        double s = 0;
        for (int p = 0; p < c->k; p++) s += at(a + e * sa, lda, c->ta, i, p) * at(b + e * sb, ldb, c->tb, p, j);
        double *w = &want[e * sc + (int64_t)i * ldc + j];
        *w = c->alpha * s + (c->beta == 0.0f ? 0.0 : c->beta * *w);
      }
  gt_gemm_args g = {.trans_a = c->ta ? GT_TRANS : GT_NO_TRANS,
                    .trans_b = c->tb ? GT_TRANS : GT_NO_TRANS,
                    .m = c->m,
                    .n = c->n,
                    .k = c->k,
                    .alpha = c->alpha,
                    .beta = c->beta,
                    .lda = lda,
                    .ldb = ldb,
                    .ldc = ldc,
                    .stride_a = sa,
                    .stride_b = sb,
                    .stride_c = sc,
                    .batch = c->batch};
  memcpy(got, c0, nc * sizeof *got);
  run_gemm(kt_be, c, &g, a, na, b, nb, got, nc);
  /* The whole buffer: padding and gaps must come back untouched. */
  kt_check("gemm C", got, want, nc, 2e-5);
  if (kt_ref) {
    float *ref = kt_xmalloc(nc * sizeof *ref);
    memcpy(ref, c0, nc * sizeof *ref);
    run_gemm(kt_ref, c, &g, a, na, b, nb, ref, nc);
    kt_check_backend("gemm C", got, ref, nc);
    free(ref);
  }
  free(a);
  free(b);
  free(c0);
  free(got);
  free(want);
}

void test_gemm_shapes(void **state) {
  (void)state;
  kt_seed(1);
  static const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {130, 129, 131}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        gemm_case c = {ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], 1, 0, 1.0f, 0.0f};
        check_gemm(&c);
        c.alpha = -0.5f;
        c.beta = 0.75f;
        c.pad = 3;
        check_gemm(&c);
      }
}

void test_gemm_batched(void **state) {
  (void)state;
  kt_seed(2);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      gemm_case c = {ta, tb, 9, 6, 11, 3, 2, 1.5f, 0.5f};
      check_gemm(&c);
      gemm_case d = {ta, tb, 16, 19, 1, 5, 1, 1.0f, 0.0f};
      check_gemm(&d);
    }
}

void test_gemm_edges(void **state) {
  (void)state;
  kt_seed(3);
  /* k == 0: C = beta*C, and beta == 0 clears even NaN. */
  gemm_case k0 = {0, 0, 4, 3, 0, 2, 1, 1.0f, 0.5f};
  check_gemm(&k0);
  float *c = kt_xmalloc(6 * sizeof *c), zeros[6] = {0};
  for (int i = 0; i < 6; i++) c[i] = NAN;
  float *dc = kt_dput(kt_be, c, 6 * sizeof *c);
  gt_gemm_args g = {.m = 2, .n = 3, .k = 0, .alpha = 1, .beta = 0, .lda = 1, .ldb = 3, .ldc = 3, .c = dc, .batch = 1};
  KT_OK(gt_op_gemm(kt_be, &g));
  kt_dget(kt_be, c, dc, 6 * sizeof *c);
  kt_check_exact("gemm k=0 beta=0", c, zeros, 6);
  /* m == 0 does nothing. */
  g.m = 0;
  KT_OK(gt_op_gemm(kt_be, &g));
  /* Bad arguments are refused with a reason. */
  float *da = kt_dput(kt_be, NULL, 64 * sizeof(float));
  gt_gemm_args bad = {
      .m = 4, .n = 4, .k = 4, .alpha = 1, .a = da, .lda = 3, .b = da, .ldb = 4, .c = dc, .ldc = 4, .batch = 1};
  assert_int_equal(gt_op_gemm(kt_be, &bad), GT_EINVAL);
  if (gt_backend_kind(kt_be) == GT_DEVICE_CPU) assert_non_null(strstr(gt_last_error(), "lda"));
  bad.lda = 4;
  bad.ldc = 3;
  assert_int_equal(gt_op_gemm(kt_be, &bad), GT_EINVAL);
  bad.ldc = 4;
  bad.batch = 0;
  assert_int_equal(gt_op_gemm(kt_be, &bad), GT_EINVAL);
  if (gt_backend_kind(kt_be) == GT_DEVICE_CPU) {
    /* outputs of 16 elements 8 apart overlap */
    bad.batch = 2;
    bad.stride_c = 8;
    assert_int_equal(gt_op_gemm(kt_be, &bad), GT_EINVAL);
  }
  bad.batch = 1;
  bad.m = -1;
  assert_int_equal(gt_op_gemm(kt_be, &bad), GT_EINVAL);
  kt_dfree(kt_be, da);
  kt_dfree(kt_be, dc);
  free(c);
}
