/* GELU and the residual add, forward and backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void gelu_run(gt_backend *be, const float *x, const float *dout, float *out, float *dx, size_t n) {
  float *dx_in = kt_dput(be, x, n * 4), *dy = kt_dput(be, dout, n * 4);
  float *dout_d = kt_dput(be, NULL, n * 4), *g = kt_dput(be, dx, n * 4);
  KT_OK(gt_op_gelu_forward(be, dout_d, dx_in, n));
  KT_OK(gt_op_gelu_backward(be, g, dx_in, dy, n));
  kt_dget(be, out, dout_d, n * 4);
  kt_dget(be, dx, g, n * 4);
  kt_dfree(be, dx_in);
  kt_dfree(be, dy);
  kt_dfree(be, dout_d);
  kt_dfree(be, g);
}

static void check_gelu(size_t n) {
  float *x = kt_randn_alloc(n, 6.0f), *W = kt_randn_alloc(n, 1), *g0 = kt_randn_alloc(n, 1);
  static const float special[] = {0.0f, -100.0f, 100.0f, -20.0f, 20.0f, -5.0f, 5.0f, 1e-20f, -0.5f};
  for (size_t i = 0; i < n && i < sizeof special / sizeof *special; i++) x[i] = special[i];
  float *out = kt_xmalloc(n * 4), *dx = kt_xmalloc(n * 4);
  memcpy(dx, g0, n * 4);
  gelu_run(kt_be, x, W, out, dx, n);
  double *want = kt_xmalloc(n * 8), *wantd = kt_xmalloc(n * 8);
  for (size_t i = 0; i < n; i++) {
    want[i] = gelu_ref(x[i]);
    /* The loss sum(W * gelu(x)) is separable: one central difference per
     * element is the finite difference of the whole loss. */
    double h = 1e-5 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
    wantd[i] = g0[i] + W[i] * (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
  }
  kt_check("gelu out", out, want, n, 1e-5);
  kt_check("gelu dinp", dx, wantd, n, 1e-4);
  if (kt_ref) {
    float *ro = kt_xmalloc(n * 4), *rd = kt_xmalloc(n * 4);
    memcpy(rd, g0, n * 4);
    gelu_run(kt_ref, x, W, ro, rd, n);
    kt_check_backend("gelu out", out, ro, n);
    kt_check_backend("gelu dinp", dx, rd, n);
    free(ro);
    free(rd);
  }
  free(x);
  free(W);
  free(g0);
  free(out);
  free(dx);
  free(want);
  free(wantd);
}

void test_gelu(void **state) {
  (void)state;
  kt_seed(20);
  check_gelu(1);
  check_gelu(37);
  check_gelu(20011); /* threaded */
}

static void residual_run(gt_backend *be, const float *a, const float *b, const float *dout, float *out, float *da,
                         float *db, size_t n) {
  float *d_a = kt_dput(be, a, n * 4), *d_b = kt_dput(be, b, n * 4), *dy = kt_dput(be, dout, n * 4);
  float *o = kt_dput(be, NULL, n * 4), *ga = kt_dput(be, da, n * 4), *gb = kt_dput(be, db, n * 4);
  KT_OK(gt_op_residual_forward(be, o, d_a, d_b, n));
  KT_OK(gt_op_residual_backward(be, ga, gb, dy, n));
  kt_dget(be, out, o, n * 4);
  kt_dget(be, da, ga, n * 4);
  kt_dget(be, db, gb, n * 4);
  kt_dfree(be, d_a);
  kt_dfree(be, d_b);
  kt_dfree(be, dy);
  kt_dfree(be, o);
  kt_dfree(be, ga);
  kt_dfree(be, gb);
}

static void check_residual(size_t n) {
  float *a = kt_randn_alloc(n, 1), *b = kt_randn_alloc(n, 1), *W = kt_randn_alloc(n, 1);
  float *ga0 = kt_randn_alloc(n, 1), *gb0 = kt_randn_alloc(n, 1);
  float *out = kt_xmalloc(n * 4), *da = kt_xmalloc(n * 4), *db = kt_xmalloc(n * 4);
  memcpy(da, ga0, n * 4);
  memcpy(db, gb0, n * 4);
  residual_run(kt_be, a, b, W, out, da, db, n);
  /* Linear: the loss's finite difference is W itself, and a float add is
   * exact to the rounding, so the results are known bit for bit. */
  float *wo = kt_xmalloc(n * 4), *wa = kt_xmalloc(n * 4), *wb = kt_xmalloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    wo[i] = a[i] + b[i];
    wa[i] = ga0[i] + W[i];
    wb[i] = gb0[i] + W[i];
  }
  kt_check_exact("residual out", out, wo, n);
  kt_check_exact("residual da", da, wa, n);
  kt_check_exact("residual db", db, wb, n);
  free(a);
  free(b);
  free(W);
  free(ga0);
  free(gb0);
  free(out);
  free(da);
  free(db);
  free(wo);
  free(wa);
  free(wb);
}

/* A branch without a gradient passes NULL (a block's skip connection):
 * the other side still accumulates, and nothing is written through NULL. */
static void check_residual_one_side(size_t n) {
  float *dy = kt_randn_alloc(n, 1), *g0 = kt_randn_alloc(n, 1), *got = kt_xmalloc(n * 4), *want = kt_xmalloc(n * 4);
  for (size_t i = 0; i < n; i++) want[i] = g0[i] + dy[i];
  float *d_dy = kt_dput(kt_be, dy, n * 4);
  for (int side = 0; side < 2; side++) {
    float *g = kt_dput(kt_be, g0, n * 4);
    KT_OK(gt_op_residual_backward(kt_be, side ? NULL : g, side ? g : NULL, d_dy, n));
    kt_dget(kt_be, got, g, n * 4);
    kt_check_exact(side ? "residual db (da NULL)" : "residual da (db NULL)", got, want, n);
    kt_dfree(kt_be, g);
  }
  KT_OK(gt_op_residual_backward(kt_be, NULL, NULL, d_dy, n));
  kt_dfree(kt_be, d_dy);
  free(dy);
  free(g0);
  free(got);
  free(want);
}

void test_residual(void **state) {
  (void)state;
  kt_seed(21);
  check_residual(1);
  check_residual(37);
  check_residual(20011);
  check_residual_one_side(37);
  check_residual_one_side(20011);
}
