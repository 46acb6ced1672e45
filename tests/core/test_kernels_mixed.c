/* Mixed precision kernels: gemm_ex with bf16 operands (every transpose,
 * alpha and beta, padding, strided batches, fp32 and bf16 results), its
 * argument checks, and the bias kernels that go with it.
 *
 * The references take the bf16 operands' exact values in double: a product
 * of two bf16 values is exact in fp32, so with fp32 accumulation gemm_ex
 * must meet the same tolerance as the fp32 gemm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/tensor.h"
#include "tests/core/test_kernels.h"

typedef struct {
  int ta, tb, m, n, k, batch, pad;
  float alpha, beta;
  gt_dtype c_type;
} mcase;

static double at(const uint16_t *x, int ld, int trans, int i, int j) {
  return gt_bf16_to_f32(trans ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j]);
}

static uint16_t *bf16_rand(size_t n) {
  uint16_t *x = kt_xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = gt_f32_to_bf16(kt_uniform());
  return x;
}

/* Runs gemm_ex on `be`; c (host) is the old C in and the result out, as
 * floats whatever c_type is (bf16 results are widened back). */
static void run(gt_backend *be, const gt_gemm_ex_args *g0, const uint16_t *a, size_t na, const uint16_t *b, size_t nb,
                float *c, size_t nc) {
  gt_gemm_ex_args g = *g0;
  void *da = kt_dput(be, a, na * 2), *db = kt_dput(be, b, nb * 2), *dc;
  if (g.c_type == GT_BF16) {
    uint16_t *c16 = kt_xmalloc(nc * 2);
    for (size_t i = 0; i < nc; i++) c16[i] = gt_f32_to_bf16(c[i]);
    dc = kt_dput(be, c16, nc * 2);
    g.a = da;
    g.b = db;
    g.c = dc;
    KT_OK(gt_op_gemm_ex(be, &g));
    kt_dget(be, c16, dc, nc * 2);
    for (size_t i = 0; i < nc; i++) c[i] = gt_bf16_to_f32(c16[i]);
    free(c16);
  } else {
    dc = kt_dput(be, c, nc * 4);
    g.a = da;
    g.b = db;
    g.c = dc;
    KT_OK(gt_op_gemm_ex(be, &g));
    kt_dget(be, c, dc, nc * 4);
  }
  kt_dfree(be, da);
  kt_dfree(be, db);
  kt_dfree(be, dc);
}

static void check_case(const mcase *c) {
  int lda = (c->ta ? c->m : c->k) + c->pad, ldb = (c->tb ? c->k : c->n) + c->pad, ldc = c->n + c->pad;
  int rows_a = c->ta ? c->k : c->m, rows_b = c->tb ? c->n : c->k;
  int64_t sa = (int64_t)rows_a * lda + 3, sb = (int64_t)rows_b * ldb + 5, sc = (int64_t)c->m * ldc + 7;
  size_t na = (size_t)(sa * c->batch), nb = (size_t)(sb * c->batch), nc = (size_t)(sc * c->batch);
  uint16_t *a = bf16_rand(na), *b = bf16_rand(nb);
  float *c0 = kt_randn_alloc(nc, 1.0f), *got = kt_xmalloc(nc * 4);
  /* A bf16 C starts from bf16 values, so beta reads what the kernel reads. */
  if (c->c_type == GT_BF16)
    for (size_t i = 0; i < nc; i++) c0[i] = gt_bf16_to_f32(gt_f32_to_bf16(c0[i]));
  double *want = kt_to_double(c0, nc);
  for (int e = 0; e < c->batch; e++)
    for (int i = 0; i < c->m; i++)
      for (int j = 0; j < c->n; j++) {
        double s = 0;
        for (int p = 0; p < c->k; p++) s += at(a + e * sa, lda, c->ta, i, p) * at(b + e * sb, ldb, c->tb, p, j);
        double *w = &want[e * sc + (int64_t)i * ldc + j];
        *w = c->alpha * s + (c->beta == 0.0f ? 0.0 : c->beta * *w);
      }
  gt_gemm_ex_args g = {.trans_a = c->ta ? GT_TRANS : GT_NO_TRANS,
                       .trans_b = c->tb ? GT_TRANS : GT_NO_TRANS,
                       .m = c->m,
                       .n = c->n,
                       .k = c->k,
                       .alpha = c->alpha,
                       .beta = c->beta,
                       .a_type = GT_BF16,
                       .lda = lda,
                       .stride_a = sa,
                       .b_type = GT_BF16,
                       .ldb = ldb,
                       .stride_b = sb,
                       .c_type = c->c_type,
                       .ldc = ldc,
                       .stride_c = sc,
                       .batch = c->batch};
  memcpy(got, c0, nc * 4);
  run(kt_be, &g, a, na, b, nb, got, nc);
  /* fp32 results: accumulation error only. bf16 results: one rounding to 8
   * significant bits (relative 2^-8) on top. Padding and gaps must come back
   * untouched either way (their want is the old value). */
  kt_check(c->c_type == GT_BF16 ? "gemm_ex C (bf16)" : "gemm_ex C", got, want, nc, c->c_type == GT_BF16 ? 4e-3 : 2e-5);
  if (kt_ref) {
    float *ref = kt_xmalloc(nc * 4);
    memcpy(ref, c0, nc * 4);
    run(kt_ref, &g, a, na, b, nb, ref, nc);
    if (c->c_type == GT_F32)
      kt_check_backend("gemm_ex C", got, ref, nc);
    else
      kt_check_f("gemm_ex C (bf16, vs cpu)", got, ref, nc, 8e-3); /* either side may round the other way */
    free(ref);
  }
  free(a);
  free(b);
  free(c0);
  free(got);
  free(want);
}

void test_gemm_ex(void **state) {
  (void)state;
  kt_seed(71);
  /* Odd shapes pad every tile; multiples of 32 in m and k let a kernel that
   * works in 32-wide tiles read A in place, so both kinds are here. */
  static const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {130, 129, 131}, {64, 48, 96}, {96, 64, 32}};
  for (int ct = 0; ct < 2; ct++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
          mcase c = {ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], 1, 0, 1.0f, 0.0f, ct ? GT_BF16 : GT_F32};
          check_case(&c);
          c.alpha = -0.5f;
          c.beta = 0.75f;
          c.pad = 3;
          check_case(&c);
          /* accumulation, as backward uses it */
          c.batch = 3;
          c.beta = 1.0f;
          check_case(&c);
        }
  /* k = 0: C = beta * C. */
  mcase z = {0, 0, 4, 5, 0, 2, 1, 1.0f, 0.5f, GT_F32};
  check_case(&z);
}

/* fp32 operands through gemm_ex are the plain gemm, bit for bit. */
void test_gemm_ex_f32_is_gemm(void **state) {
  (void)state;
  kt_seed(72);
  int m = 37, n = 29, k = 41;
  float *a = kt_randn_alloc((size_t)m * k, 1.0f), *b = kt_randn_alloc((size_t)k * n, 1.0f);
  float *c = kt_randn_alloc((size_t)m * n, 1.0f), *got = kt_xmalloc((size_t)m * n * 4);
  float *want = kt_xmalloc((size_t)m * n * 4);
  float *da = kt_dput(kt_be, a, (size_t)m * k * 4), *db = kt_dput(kt_be, b, (size_t)k * n * 4);
  float *dc = kt_dput(kt_be, c, (size_t)m * n * 4);
  gt_gemm_args g = {.m = m,
                    .n = n,
                    .k = k,
                    .alpha = 1.5f,
                    .beta = 0.5f,
                    .a = da,
                    .lda = k,
                    .b = db,
                    .ldb = n,
                    .c = dc,
                    .ldc = n,
                    .batch = 1};
  KT_OK(gt_op_gemm(kt_be, &g));
  kt_dget(kt_be, want, dc, (size_t)m * n * 4);
  kt_dfree(kt_be, dc);
  dc = kt_dput(kt_be, c, (size_t)m * n * 4);
  gt_gemm_ex_args x = {.m = m,
                       .n = n,
                       .k = k,
                       .alpha = 1.5f,
                       .beta = 0.5f,
                       .a = da,
                       .a_type = GT_F32,
                       .lda = k,
                       .b = db,
                       .b_type = GT_F32,
                       .ldb = n,
                       .c = dc,
                       .c_type = GT_F32,
                       .ldc = n,
                       .batch = 1};
  KT_OK(gt_op_gemm_ex(kt_be, &x));
  kt_dget(kt_be, got, dc, (size_t)m * n * 4);
  kt_check_exact("gemm_ex f32", got, want, (size_t)m * n);
  kt_dfree(kt_be, da);
  kt_dfree(kt_be, db);
  kt_dfree(kt_be, dc);
  free(a);
  free(b);
  free(c);
  free(got);
  free(want);
}

void test_gemm_ex_errors(void **state) {
  (void)state;
  uint16_t *d16 = kt_dput(kt_be, NULL, 64 * 2);
  float *d32 = kt_dput(kt_be, NULL, 64 * 4);
  gt_gemm_ex_args base = {.m = 4,
                          .n = 4,
                          .k = 4,
                          .alpha = 1.0f,
                          .a = d16,
                          .a_type = GT_BF16,
                          .lda = 4,
                          .b = d16,
                          .b_type = GT_BF16,
                          .ldb = 4,
                          .c = d32,
                          .c_type = GT_F32,
                          .ldc = 4,
                          .batch = 1};
  gt_gemm_ex_args g = base;
  /* mixed operand types */
  g.b = d32;
  g.b_type = GT_F32;
  assert_int_equal(gt_op_gemm_ex(kt_be, &g), GT_EUNSUPPORTED);
  g = base;
  g.a = g.b = d32;
  g.a_type = g.b_type = GT_F32;
  g.c = d16;
  g.c_type = GT_BF16;
  assert_int_equal(gt_op_gemm_ex(kt_be, &g), GT_EUNSUPPORTED);
  g = base;
  g.a_type = GT_I32;
  assert_int_equal(gt_op_gemm_ex(kt_be, &g), GT_EUNSUPPORTED);
  g = base;
  g.lda = 2; /* shorter than a row */
  assert_int_not_equal(gt_op_gemm_ex(kt_be, &g), GT_OK);
  g = base;
  g.m = -1;
  assert_int_not_equal(gt_op_gemm_ex(kt_be, &g), GT_OK);
  kt_dfree(kt_be, d16);
  kt_dfree(kt_be, d32);
}

void test_bias(void **state) {
  (void)state;
  kt_seed(73);
  static const int shapes[][2] = {{1, 1}, {3, 7}, {257, 33}, {64, 1030}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int N = shapes[s][0], OC = shapes[s][1];
    size_t n = (size_t)N * OC;
    float *out = kt_randn_alloc(n, 1.0f), *bias = kt_randn_alloc((size_t)OC, 1.0f);
    float *dbias = kt_randn_alloc((size_t)OC, 1.0f), *got = kt_xmalloc(n * 4);
    double *want = kt_to_double(out, n), *dwant = kt_to_double(dbias, (size_t)OC);
    for (int i = 0; i < N; i++)
      for (int c = 0; c < OC; c++) {
        want[(size_t)i * OC + c] += bias[c];
        dwant[c] += out[(size_t)i * OC + c];
      }
    float *dout = kt_dput(kt_be, out, n * 4), *db = kt_dput(kt_be, bias, (size_t)OC * 4);
    float *ddb = kt_dput(kt_be, dbias, (size_t)OC * 4);
    /* bias_backward reads dout before bias_add changes it. */
    KT_OK(gt_op_bias_backward(kt_be, ddb, dout, N, OC));
    KT_OK(gt_op_bias_add(kt_be, dout, db, N, OC));
    kt_dget(kt_be, got, dout, n * 4);
    kt_check("bias_add", got, want, n, 1e-6);
    kt_dget(kt_be, got, ddb, (size_t)OC * 4);
    kt_check("bias_backward (accumulates)", got, dwant, (size_t)OC, 1e-5);
    kt_dfree(kt_be, dout);
    kt_dfree(kt_be, db);
    kt_dfree(kt_be, ddb);
    free(out);
    free(bias);
    free(dbias);
    free(got);
    free(want);
    free(dwant);
  }
  assert_int_equal(gt_op_bias_add(kt_be, NULL, NULL, -1, 3), GT_EINVAL);
  assert_int_equal(gt_op_bias_backward(kt_be, NULL, NULL, 2, -3), GT_EINVAL);
}
