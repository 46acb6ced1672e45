/* Reductions, scaling, bf16 conversions, determinism and the peak rate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/tensor.h"
#include "tests/core/test_kernels.h"
#include "core/backend_engine.h"
#include "giant/engine/device.h"

static double sum_squares_on(gt_backend *be, const float *x, size_t n) {
  float *dx = kt_dput(be, x, n * 4 + 4);
  double *dout = kt_dput(be, NULL, sizeof(double)), out;
  KT_OK(gt_op_sum_squares(be, dout, dx, n));
  kt_dget(be, &out, dout, sizeof out);
  kt_dfree(be, dx);
  kt_dfree(be, dout);
  return out;
}

void test_sum_squares(void **state) {
  (void)state;
  kt_seed(60);
  size_t sizes[] = {0, 1, 37, 100003};
  for (int s = 0; s < 4; s++) {
    size_t n = sizes[s];
    float *x = kt_randn_alloc(n + 1, 3.0f);
    long double want = 0;
    for (size_t i = 0; i < n; i++) want += (long double)x[i] * x[i];
    double got = sum_squares_on(kt_be, x, n);
    if (!(fabs(got - (double)want) <= 1e-12 * (double)want))
      fail_msg("sum_squares n=%zu: got %.17g, want %.17Lg", n, got, want);
    double again = sum_squares_on(kt_be, x, n);
    if (memcmp(&got, &again, sizeof got)) fail_msg("sum_squares n=%zu is not deterministic", n);
    free(x);
  }
}

void test_scale(void **state) {
  (void)state;
  kt_seed(61);
  size_t sizes[] = {1, 37, 20011};
  for (int s = 0; s < 3; s++) {
    size_t n = sizes[s];
    float *x = kt_randn_alloc(n, 5), *want = kt_xmalloc(n * 4), *got = kt_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) want[i] = x[i] * -0.3f;
    float *dx = kt_dput(kt_be, x, n * 4);
    KT_OK(gt_op_scale(kt_be, dx, -0.3f, n));
    kt_dget(kt_be, got, dx, n * 4);
    kt_check_exact("scale", got, want, n);
    kt_dfree(kt_be, dx);
    free(x);
    free(want);
    free(got);
  }
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

void test_bf16(void **state) {
  (void)state;
  kt_seed(62);
  /* Known roundings: ties go to even, overflow goes to infinity. */
  static const struct {
    uint32_t in;
    uint16_t out;
  } known[] = {
      {0x3F800000u, 0x3F80}, {0x3F808000u, 0x3F80}, {0x3F818000u, 0x3F82}, {0x3F80C000u, 0x3F81},
      {0x3F807FFFu, 0x3F80}, {0xBF808001u, 0xBF81}, {0x7F800000u, 0x7F80}, {0xFF800000u, 0xFF80},
      {0x7F7FFFFFu, 0x7F80}, {0x00000001u, 0x0000}, {0x80000000u, 0x8000}, {0x00008000u, 0x0000},
  };
  enum { NK = sizeof known / sizeof *known, NR = 4099 };
  size_t n = NK + 2 + NR;
  float *src = kt_xmalloc(n * 4);
  for (int i = 0; i < NK; i++) src[i] = from_bits(known[i].in);
  /* NaNs */
  src[NK] = from_bits(0x7FC00000u);
  src[NK + 1] = from_bits(0xFF800001u);
  for (int i = 0; i < NR; i++) src[NK + 2 + i] = kt_uniform() * 1e4f;
  uint16_t *got = kt_xmalloc(n * 2);
  float *dsrc = kt_dput(kt_be, src, n * 4);
  uint16_t *dh = kt_dput(kt_be, NULL, n * 2);
  KT_OK(gt_op_f32_to_bf16(kt_be, dh, dsrc, n));
  kt_dget(kt_be, got, dh, n * 2);
  for (int i = 0; i < NK; i++)
    if (got[i] != known[i].out)
      fail_msg("f32_to_bf16(0x%08X) = 0x%04X, want 0x%04X", known[i].in, got[i], known[i].out);
  for (int i = NK; i < NK + 2; i++)
    if ((got[i] & 0x7F80) != 0x7F80 || (got[i] & 0x7F) == 0) fail_msg("NaN became 0x%04X", got[i]);
  for (size_t i = NK + 2; i < n; i++)
    if (got[i] != gt_f32_to_bf16(src[i])) fail_msg("f32_to_bf16(%g) disagrees with gt_f32_to_bf16", src[i]);
  kt_dfree(kt_be, dsrc);
  kt_dfree(kt_be, dh);
  free(src);
  free(got);

  /* Every bf16 pattern widens exactly and narrows back to itself. */
  enum { ALL = 65536 };
  uint16_t *h = kt_xmalloc(ALL * 2), *back = kt_xmalloc(ALL * 2);
  float *f = kt_xmalloc(ALL * 4);
  for (int i = 0; i < ALL; i++) h[i] = (uint16_t)i;
  uint16_t *d16 = kt_dput(kt_be, h, ALL * 2);
  float *d32 = kt_dput(kt_be, NULL, ALL * 4);
  KT_OK(gt_op_bf16_to_f32(kt_be, d32, d16, ALL));
  KT_OK(gt_op_f32_to_bf16(kt_be, d16, d32, ALL));
  kt_dget(kt_be, f, d32, ALL * 4);
  kt_dget(kt_be, back, d16, ALL * 2);
  for (int i = 0; i < ALL; i++) {
    uint32_t u;
    memcpy(&u, &f[i], 4);
    if (u != (uint32_t)i << 16) fail_msg("bf16_to_f32(0x%04X) = 0x%08X", i, u);
    int nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F);
    if (nan ? (back[i] & 0x7F) == 0 : back[i] != i) fail_msg("bf16 0x%04X came back as 0x%04X", i, back[i]);
  }
  kt_dfree(kt_be, d16);
  kt_dfree(kt_be, d32);
  free(h);
  free(back);
  free(f);
}

/* The same inputs give the same bits, call after call. */
void test_determinism(void **state) {
  (void)state;
  kt_seed(63);
  gt_backend *be = kt_be;
  int B = 2, T = 24, C = 32, NH = 4, N = B * T;
  size_t nq = (size_t)N * 3 * C, no = (size_t)N * C, na = (size_t)B * NH * T * T;
  float *qkv = kt_randn_alloc(nq, 1), *dy = kt_randn_alloc(no, 1), *w = kt_randn_alloc(C, 1);
  float *first = kt_xmalloc((nq + no + 2 * C) * 4), *now = kt_xmalloc((nq + no + 2 * C) * 4);
  float *d_qkv = kt_dput(be, qkv, nq * 4), *d_dy = kt_dput(be, dy, no * 4), *d_w = kt_dput(be, w, C * 4);
  float *out = kt_dput(be, NULL, no * 4), *att = kt_dput(be, NULL, na * 4), *datt = kt_dput(be, NULL, na * 4);
  float *mean = kt_dput(be, NULL, N * 4), *rstd = kt_dput(be, NULL, N * 4), *lse = kt_dput(be, NULL, N * NH * 4);
  float *g = kt_dput(be, NULL, (nq + no + 2 * C) * 4);
  for (int rep = 0; rep < 3; rep++) {
    KT_OK(gt_backend_memset(be, g, 0, (nq + no + 2 * C) * 4, NULL));
    KT_OK(gt_op_attention_full_forward(be, out, att, d_qkv, B, T, C, NH));
    KT_OK(gt_op_attention_full_backward(be, g, datt, d_dy, d_qkv, att, B, T, C, NH));
    /* Tiled, over (batch, head) pairs and, with one pair, over query blocks. */
    KT_OK(gt_op_attention_tiled_forward(be, out, lse, d_qkv, B, T, C, NH));
    KT_OK(gt_op_attention_tiled_backward(be, g, d_dy, d_qkv, out, lse, B, T, C, NH));
    KT_OK(gt_op_attention_tiled_forward(be, out, lse, d_qkv, 1, T, C, 1));
    KT_OK(gt_op_attention_tiled_backward(be, g, d_dy, d_qkv, out, lse, 1, T, C, 1));
    KT_OK(gt_op_layernorm_forward(be, out, mean, rstd, d_dy, d_w, d_w, N, C));
    KT_OK(gt_op_layernorm_backward(be, g + nq, g + nq + no, g + nq + no + C, d_dy, d_dy, d_w, mean, rstd, N, C));
    kt_dget(be, rep ? now : first, g, (nq + no + 2 * C) * 4);
    if (rep) kt_check_exact("repeated backward", now, first, nq + no + 2 * C);
  }
  float *all[] = {d_qkv, d_dy, d_w, out, att, datt, mean, rstd, lse, g};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
  free(qkv);
  free(dy);
  free(w);
  free(first);
  free(now);
}

void test_measure_peak(void **state) {
  (void)state;
  double flops = 0;
  KT_OK(gt_backend_measure_peak(kt_be, 64, 0.02, &flops));
  assert_true(flops > 0);
  assert_true(gt_backend_peak_flops(kt_be) == flops);
  assert_int_equal(gt_backend_measure_peak(kt_be, 0, 0.1, &flops), GT_EINVAL);
  assert_int_equal(gt_backend_measure_peak(kt_be, 64, -1, &flops), GT_EINVAL);
  assert_int_equal(gt_backend_measure_peak(kt_be, 64, NAN, &flops), GT_EINVAL);
  /* The bf16 products mixed precision runs: a rate of their own. */
  double bf16 = 0;
  KT_OK(gt_backend_measure_peak_ex(kt_be, GT_PRECISION_BF16, 64, 0.02, &bf16));
  assert_true(bf16 > 0);
  assert_true(gt_backend_peak_flops(kt_be) == bf16);
  assert_int_equal(gt_backend_measure_peak_ex(kt_be, (gt_precision)9, 64, 0.02, &bf16), GT_EINVAL);
}
