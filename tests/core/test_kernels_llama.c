/* The Llama family's layer kernels: RMSNorm, rotary position embeddings
 * and SwiGLU, forward against double-precision references and backward
 * against central finite differences of L = sum(out * W). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

static void free_all(void **p, size_t n) {
  for (size_t i = 0; i < n; i++) free(p[i]);
}
#define FREE_ALL(...)                           \
  do {                                          \
    void *all_[] = {__VA_ARGS__};               \
    free_all(all_, sizeof all_ / sizeof *all_); \
  } while (0)

/* ---- RMSNorm ---- */

typedef struct {
  int N, C;
  double eps, *x, *w;
  const double *W;
} rms_ref;

static void rms_forward_ref(const rms_ref *r, double *out, double *rstd) {
  for (int i = 0; i < r->N; i++) {
    const double *x = r->x + (size_t)i * r->C;
    double ss = 0;
    for (int c = 0; c < r->C; c++) ss += x[c] * x[c];
    double s = 1.0 / sqrt(ss / r->C + r->eps);
    for (int c = 0; c < r->C; c++) out[(size_t)i * r->C + c] = x[c] * s * r->w[c];
    if (rstd) rstd[i] = s;
  }
}

static double rms_loss(void *p) {
  rms_ref *r = p;
  size_t n = (size_t)r->N * r->C;
  double *out = kt_xmalloc(n * 8), L = 0;
  rms_forward_ref(r, out, NULL);
  for (size_t i = 0; i < n; i++) L += out[i] * r->W[i];
  free(out);
  return L;
}

/* Forward and backward on be; dx and dw accumulate onto what they hold. */
static void rms_run(gt_backend *be, int N, int C, float eps, const float *x, const float *w, const float *dout,
                    float *out, float *rstd, float *dx, float *dw) {
  size_t n = (size_t)N * C;
  float *d_x = kt_dput(be, x, n * 4), *d_w = kt_dput(be, w, C * 4), *d_out = kt_dput(be, NULL, n * 4);
  float *d_rstd = kt_dput(be, NULL, N * 4), *d_dy = kt_dput(be, dout, n * 4), *d_gx = kt_dput(be, dx, n * 4);
  float *d_gw = kt_dput(be, dw, C * 4);
  KT_OK(gt_op_rmsnorm_forward(be, d_out, d_rstd, d_x, d_w, eps, N, C));
  KT_OK(gt_op_rmsnorm_backward(be, d_gx, d_gw, d_dy, d_x, d_w, d_rstd, N, C));
  kt_dget(be, out, d_out, n * 4);
  kt_dget(be, rstd, d_rstd, N * 4);
  kt_dget(be, dx, d_gx, n * 4);
  kt_dget(be, dw, d_gw, C * 4);
  float *all[] = {d_x, d_w, d_out, d_rstd, d_dy, d_gx, d_gw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

static void check_rmsnorm(int N, int C, float eps, size_t every) {
  size_t n = (size_t)N * C;
  float *x = kt_randn_alloc(n, 2.0f), *w = kt_randn_alloc(C, 1), *W = kt_randn_alloc(n, 1);
  float *gx0 = kt_randn_alloc(n, 1), *gw0 = kt_randn_alloc(C, 1);
  float *out = kt_xmalloc(n * 4), *rstd = kt_xmalloc(N * 4), *dx = kt_xmalloc(n * 4), *dw = kt_xmalloc(C * 4);
  memcpy(dx, gx0, n * 4);
  memcpy(dw, gw0, C * 4);
  rms_run(kt_be, N, C, eps, x, w, W, out, rstd, dx, dw);

  rms_ref r = {N, C, eps, kt_to_double(x, n), kt_to_double(w, C), kt_to_double(W, n)};
  double *wo = kt_xmalloc(n * 8), *wr = kt_xmalloc(N * 8), *fd = kt_xmalloc(n * 8), *want;
  rms_forward_ref(&r, wo, wr);
  kt_check("rmsnorm out", out, wo, n, 1e-4);
  kt_check("rmsnorm rstd", rstd, wr, N, 1e-4);
  kt_fd(rms_loss, &r, r.x, n, every, fd);
  want = kt_plus(gx0, fd, n);
  kt_check("rmsnorm dinp", dx, want, n, 1e-3);
  free(want);
  kt_fd(rms_loss, &r, r.w, C, 1, fd);
  want = kt_plus(gw0, fd, C);
  kt_check("rmsnorm dw", dw, want, C, 1e-4);
  free(want);

  if (kt_ref) {
    float *ro = kt_xmalloc(n * 4), *rr = kt_xmalloc(N * 4), *rx = kt_xmalloc(n * 4), *rw = kt_xmalloc(C * 4);
    memcpy(rx, gx0, n * 4);
    memcpy(rw, gw0, C * 4);
    rms_run(kt_ref, N, C, eps, x, w, W, ro, rr, rx, rw);
    kt_check_backend("rmsnorm out", out, ro, n);
    kt_check_backend("rmsnorm rstd", rstd, rr, N);
    kt_check_backend("rmsnorm dinp", dx, rx, n);
    kt_check_backend("rmsnorm dw", dw, rw, C);
    FREE_ALL(ro, rr, rx, rw);
  }
  FREE_ALL(x, w, W, gx0, gw0, out, rstd, dx, dw, r.x, r.w, (void *)r.W, wo, wr, fd);
}

void test_rmsnorm(void **state) {
  (void)state;
  kt_seed(41);
  check_rmsnorm(1, 1, 1e-5f, 1);
  check_rmsnorm(3, 7, 1e-6f, 1);
  check_rmsnorm(17, 33, 1e-5f, 1);
  check_rmsnorm(64, 300, 1e-5f, 37); /* threaded; finite differences on a sample */
}

/* ---- rotary position embeddings ---- */

typedef struct {
  int B, T, NH, hs, ld;
  double theta, scale;
  double *x;
  const double *W;
} rope_ref;

/* out = R x on the heads; the columns past them copied. */
static void rope_forward_ref(const rope_ref *r, double *out) {
  int half = r->hs / 2;
  for (int row = 0; row < r->B * r->T; row++) {
    const double *x = r->x + (size_t)row * r->ld;
    double *y = out + (size_t)row * r->ld;
    for (int c = 0; c < r->ld; c++) y[c] = x[c];
    double t = row % r->T;
    for (int h = 0; h < r->NH; h++)
      for (int i = 0; i < half; i++) {
        double a = t / r->scale / pow(r->theta, 2.0 * i / r->hs);
        double x0 = x[h * r->hs + i], x1 = x[h * r->hs + half + i];
        y[h * r->hs + i] = x0 * cos(a) - x1 * sin(a);
        y[h * r->hs + half + i] = x1 * cos(a) + x0 * sin(a);
      }
  }
}

static double rope_loss(void *p) {
  rope_ref *r = p;
  size_t n = (size_t)r->B * r->T * r->ld;
  double *out = kt_xmalloc(n * 8), L = 0;
  rope_forward_ref(r, out);
  for (size_t i = 0; i < n; i++) L += out[i] * r->W[i];
  free(out);
  return L;
}

/* Forward out of place and in place, backward in place; what lies past
 * the heads is left alone. */
static void rope_run(gt_backend *be, const rope_ref *shape, const float *x, const float *dout, float *out,
                     float *out_inplace, float *dinp) {
  size_t n = (size_t)shape->B * shape->T * shape->ld;
  int B = shape->B, T = shape->T, NH = shape->NH, hs = shape->hs, ld = shape->ld;
  float th = (float)shape->theta, sc = (float)shape->scale;
  float *d_x = kt_dput(be, x, n * 4), *d_out = kt_dput(be, x, n * 4), *d_in = kt_dput(be, x, n * 4);
  float *d_g = kt_dput(be, dout, n * 4);
  KT_OK(gt_op_rope_forward(be, d_out, d_x, B, T, NH, hs, ld, th, sc));
  KT_OK(gt_op_rope_forward(be, d_in, d_in, B, T, NH, hs, ld, th, sc));
  KT_OK(gt_op_rope_backward(be, d_g, d_g, B, T, NH, hs, ld, th, sc));
  kt_dget(be, out, d_out, n * 4);
  kt_dget(be, out_inplace, d_in, n * 4);
  kt_dget(be, dinp, d_g, n * 4);
  float *all[] = {d_x, d_out, d_in, d_g};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

static void check_rope(int B, int T, int NH, int hs, int ld, double theta, double scale, size_t every) {
  size_t n = (size_t)B * T * ld;
  float *x = kt_randn_alloc(n, 1), *W = kt_randn_alloc(n, 1);
  float *out = kt_xmalloc(n * 4), *outi = kt_xmalloc(n * 4), *dx = kt_xmalloc(n * 4);
  rope_ref r = {B, T, NH, hs, ld, theta, scale, kt_to_double(x, n), kt_to_double(W, n)};
  rope_run(kt_be, &r, x, W, out, outi, dx);
  double *wo = kt_xmalloc(n * 8), *fd = kt_xmalloc(n * 8);
  rope_forward_ref(&r, wo);
  kt_check("rope out", out, wo, n, 1e-5);
  kt_check("rope out in place", outi, wo, n, 1e-5);
  /* Backward writes: the columns past the heads keep dout, whose finite
   * difference is W there too. */
  if (every) {
    kt_fd(rope_loss, &r, r.x, n, every, fd);
    kt_check("rope dinp", dx, fd, n, 1e-4);
  }
  if (kt_ref) {
    float *ro = kt_xmalloc(n * 4), *ri = kt_xmalloc(n * 4), *rd = kt_xmalloc(n * 4);
    rope_run(kt_ref, &r, x, W, ro, ri, rd);
    kt_check_backend("rope out", out, ro, n);
    kt_check_backend("rope dinp", dx, rd, n);
    FREE_ALL(ro, ri, rd);
  }
  FREE_ALL(x, W, out, outi, dx, r.x, (void *)r.W, wo, fd);
}

void test_rope(void **state) {
  (void)state;
  kt_seed(43);
  check_rope(1, 1, 1, 2, 2, 10000, 1, 1);
  check_rope(2, 5, 3, 8, 24, 10000, 1, 1);       /* heads fill the row */
  check_rope(2, 7, 2, 4, 13, 500000, 4, 1);      /* columns past the heads; Llama 3's base, scaled */
  check_rope(1, 300, 4, 64, 384, 10000, 1, 997); /* threaded; the q and k of a GQA row */
  check_rope(1, 2048, 1, 16, 16, 10000, 2, 0);   /* long: angles in the hundreds */
}

/* ---- SwiGLU ---- */

static double silu_ref(double g) { return g / (1 + exp(-g)); }

static void swiglu_run(gt_backend *be, const float *g, const float *u, const float *dout, float *out, float *dg,
                       float *du, size_t n) {
  float *d_g = kt_dput(be, g, n * 4), *d_u = kt_dput(be, u, n * 4), *d_out = kt_dput(be, NULL, n * 4);
  float *d_dy = kt_dput(be, dout, n * 4), *d_dg = kt_dput(be, dg, n * 4), *d_du = kt_dput(be, du, n * 4);
  KT_OK(gt_op_swiglu_forward(be, d_out, d_g, d_u, n));
  KT_OK(gt_op_swiglu_backward(be, d_dg, d_du, d_dy, d_g, d_u, n));
  kt_dget(be, out, d_out, n * 4);
  kt_dget(be, dg, d_dg, n * 4);
  kt_dget(be, du, d_du, n * 4);
  float *all[] = {d_g, d_u, d_out, d_dy, d_dg, d_du};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

static void check_swiglu(size_t n) {
  float *g = kt_randn_alloc(n, 4), *u = kt_randn_alloc(n, 2), *W = kt_randn_alloc(n, 1);
  float *g0 = kt_randn_alloc(n, 1), *u0 = kt_randn_alloc(n, 1);
  float *out = kt_xmalloc(n * 4), *dg = kt_xmalloc(n * 4), *du = kt_xmalloc(n * 4);
  memcpy(dg, g0, n * 4);
  memcpy(du, u0, n * 4);
  swiglu_run(kt_be, g, u, W, out, dg, du, n);
  double *want = kt_xmalloc(n * 8), *wg = kt_xmalloc(n * 8), *wu = kt_xmalloc(n * 8);
  for (size_t i = 0; i < n; i++) {
    want[i] = silu_ref(g[i]) * u[i];
    /* The loss is separable: one central difference per element is the
     * whole loss's. */
    double h = 1e-5 * (fabs(g[i]) > 1 ? fabs(g[i]) : 1);
    wg[i] = g0[i] + W[i] * u[i] * (silu_ref(g[i] + h) - silu_ref(g[i] - h)) / (2 * h);
    wu[i] = u0[i] + W[i] * silu_ref(g[i]);
  }
  kt_check("swiglu out", out, want, n, 1e-5);
  kt_check("swiglu dgate", dg, wg, n, 1e-4);
  kt_check("swiglu dup", du, wu, n, 1e-5);
  if (kt_ref) {
    float *ro = kt_xmalloc(n * 4), *rg = kt_xmalloc(n * 4), *ru = kt_xmalloc(n * 4);
    memcpy(rg, g0, n * 4);
    memcpy(ru, u0, n * 4);
    swiglu_run(kt_ref, g, u, W, ro, rg, ru, n);
    kt_check_backend("swiglu out", out, ro, n);
    kt_check_backend("swiglu dgate", dg, rg, n);
    kt_check_backend("swiglu dup", du, ru, n);
    FREE_ALL(ro, rg, ru);
  }
  FREE_ALL(g, u, W, g0, u0, out, dg, du, want, wg, wu);
}

void test_swiglu(void **state) {
  (void)state;
  kt_seed(47);
  check_swiglu(1);
  check_swiglu(33);
  check_swiglu(100003); /* threaded, with a vector tail */
}

/* Refusals: the wrappers' checks, before any backend work. */
void test_llama_errors(void **state) {
  (void)state;
  float x[8] = {0}, r[2];
  assert_int_equal(gt_op_rmsnorm_forward(kt_be, x, r, x, x, 0.0f, 2, 4), GT_EINVAL);
  assert_int_equal(gt_op_rmsnorm_forward(kt_be, x, NULL, x, x, 1e-5f, 2, 4), GT_EINVAL);
  assert_int_equal(gt_op_rope_forward(kt_be, x, x, 1, 2, 1, 3, 4, 10000, 1), GT_EINVAL);  /* odd head */
  assert_int_equal(gt_op_rope_forward(kt_be, x, x, 1, 2, 2, 4, 4, 10000, 1), GT_EINVAL);  /* wider than ld */
  assert_int_equal(gt_op_rope_backward(kt_be, x, x, 1, 2, 1, 4, 4, 10000, 0), GT_EINVAL); /* scale 0 */
  assert_int_equal(gt_op_swiglu_forward(kt_be, NULL, x, x, 8), GT_EINVAL);
  assert_int_equal(gt_op_attention_gqa_forward(kt_be, x, x, x, x, x, 1, 1, 4, 4, 3),
                   GT_EINVAL); /* 3 does not divide 4 */
  assert_int_equal(gt_op_attention_gqa_forward(kt_be, x, x, x, x, x, 1, 1, 4, 4, 0), GT_EINVAL);
  assert_int_equal(gt_op_attention_gqa_forward(kt_be, x, x, x, NULL, x, 1, 1, 4, 4, 2), GT_EINVAL);
}
