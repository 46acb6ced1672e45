/* Embedding, layernorm and linear layers, forward and backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

/* ---- embedding ---- */

typedef struct {
  int B, T, C;
  const int32_t *tok;
  double *wte, *wpe; /* wpe may be NULL */
  const double *W;   /* loss weights */
} emb_ref;

static double emb_loss(void *p) {
  emb_ref *r = p;
  double L = 0;
  for (int i = 0; i < r->B * r->T; i++)
    for (int c = 0; c < r->C; c++) {
      double o = r->wte[(size_t)r->tok[i] * r->C + c] + (r->wpe ? r->wpe[(size_t)(i % r->T) * r->C + c] : 0);
      L += o * r->W[(size_t)i * r->C + c];
    }
  return L;
}

typedef struct {
  float *out, *dwte, *dwpe;
} emb_out;

static void emb_run(gt_backend *be, int B, int T, int C, int V, const int32_t *tok, const float *wte, const float *wpe,
                    const float *dout, emb_out *o) {
  size_t N = (size_t)B * T;
  int32_t *dtok = kt_dput(be, tok, N * sizeof *tok);
  float *dwte_w = kt_dput(be, wte, (size_t)V * C * 4), *dwpe_w = wpe ? kt_dput(be, wpe, (size_t)T * C * 4) : NULL;
  float *dout_d = kt_dput(be, dout, N * C * 4), *out = kt_dput(be, NULL, N * C * 4);
  float *g_wte = kt_dput(be, o->dwte, (size_t)V * C * 4);
  float *g_wpe = wpe ? kt_dput(be, o->dwpe, (size_t)T * C * 4) : NULL;
  KT_OK(gt_op_embedding_forward(be, out, dtok, dwte_w, dwpe_w, B, T, C));
  KT_OK(gt_op_embedding_backward(be, g_wte, g_wpe, dout_d, dtok, B, T, C));
  kt_dget(be, o->out, out, N * C * 4);
  kt_dget(be, o->dwte, g_wte, (size_t)V * C * 4);
  if (wpe) kt_dget(be, o->dwpe, g_wpe, (size_t)T * C * 4);
  kt_dfree(be, dtok);
  kt_dfree(be, dwte_w);
  kt_dfree(be, dout_d);
  kt_dfree(be, out);
  kt_dfree(be, g_wte);
  if (wpe) {
    kt_dfree(be, dwpe_w);
    kt_dfree(be, g_wpe);
  }
}

static void check_embedding(int B, int T, int C, int V, int with_wpe) {
  size_t N = (size_t)B * T, nte = (size_t)V * C, npe = (size_t)T * C;
  int32_t *tok = kt_xmalloc(N * sizeof *tok);
  for (size_t i = 0; i < N; i++) tok[i] = kt_randint(V);
  float *wte = kt_randn_alloc(nte, 1), *wpe = with_wpe ? kt_randn_alloc(npe, 1) : NULL;
  float *W = kt_randn_alloc(N * C, 1);
  float *gte0 = kt_randn_alloc(nte, 1), *gpe0 = kt_randn_alloc(npe, 1);
  emb_out o = {kt_xmalloc(N * C * 4), kt_xmalloc(nte * 4), kt_xmalloc(npe * 4)};
  memcpy(o.dwte, gte0, nte * 4);
  memcpy(o.dwpe, gpe0, npe * 4);
  emb_run(kt_be, B, T, C, V, tok, wte, wpe, W, &o);

  float *want = kt_xmalloc(N * C * 4);
  for (size_t i = 0; i < N; i++)
    for (int c = 0; c < C; c++) want[i * C + c] = wte[(size_t)tok[i] * C + c] + (wpe ? wpe[(i % T) * C + c] : 0.0f);
  kt_check_exact("embedding out", o.out, want, N * C);

  emb_ref r = {B, T, C, tok, kt_to_double(wte, nte), wpe ? kt_to_double(wpe, npe) : NULL, kt_to_double(W, N * C)};
  double *fd = kt_xmalloc(nte * sizeof *fd);
  kt_fd(emb_loss, &r, r.wte, nte, 1, fd);
  double *w = kt_plus(gte0, fd, nte);
  kt_check("embedding dwte", o.dwte, w, nte, 1e-5);
  free(fd);
  free(w);
  if (wpe) {
    fd = kt_xmalloc(npe * sizeof *fd);
    kt_fd(emb_loss, &r, r.wpe, npe, 1, fd);
    w = kt_plus(gpe0, fd, npe);
    kt_check("embedding dwpe", o.dwpe, w, npe, 1e-5);
    free(fd);
    free(w);
  }
  if (kt_ref) {
    emb_out e = {kt_xmalloc(N * C * 4), kt_xmalloc(nte * 4), kt_xmalloc(npe * 4)};
    memcpy(e.dwte, gte0, nte * 4);
    memcpy(e.dwpe, gpe0, npe * 4);
    emb_run(kt_ref, B, T, C, V, tok, wte, wpe, W, &e);
    kt_check_backend("embedding out", o.out, e.out, N * C);
    kt_check_backend("embedding dwte", o.dwte, e.dwte, nte);
    if (wpe) kt_check_backend("embedding dwpe", o.dwpe, e.dwpe, npe);
    free(e.out);
    free(e.dwte);
    free(e.dwpe);
  }
  free(tok);
  free(wte);
  free(wpe);
  free(W);
  free(gte0);
  free(gpe0);
  free(want);
  free(o.out);
  free(o.dwte);
  free(o.dwpe);
  free(r.wte);
  free(r.wpe);
  free((void *)r.W);
}

void test_embedding(void **state) {
  (void)state;
  kt_seed(10);
  check_embedding(1, 1, 1, 1, 1);
  check_embedding(2, 3, 5, 4, 1);
  check_embedding(3, 7, 19, 6, 0);
  check_embedding(4, 128, 40, 50, 1); /* large enough to run threaded */
}

/* ---- layernorm ---- */

typedef struct {
  int N, C;
  double *x, *w, *b;
  const double *W;
} ln_ref;

/* out rows, and optionally mean and rstd, in double. */
static void ln_forward_ref(const ln_ref *r, double *out, double *mean, double *rstd) {
  for (int i = 0; i < r->N; i++) {
    const double *x = r->x + (size_t)i * r->C;
    double m = 0, v = 0;
    for (int c = 0; c < r->C; c++) m += x[c];
    m /= r->C;
    for (int c = 0; c < r->C; c++) v += (x[c] - m) * (x[c] - m);
    v /= r->C;
    double s = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < r->C; c++) out[(size_t)i * r->C + c] = (x[c] - m) * s * r->w[c] + r->b[c];
    if (mean) {
      mean[i] = m;
      rstd[i] = s;
    }
  }
}

static double ln_loss(void *p) {
  ln_ref *r = p;
  size_t n = (size_t)r->N * r->C;
  double *out = kt_xmalloc(n * sizeof *out), L = 0;
  ln_forward_ref(r, out, NULL, NULL);
  for (size_t i = 0; i < n; i++) L += out[i] * r->W[i];
  free(out);
  return L;
}

typedef struct {
  float *out, *mean, *rstd, *dx, *dw, *db;
} ln_out;

static void ln_run(gt_backend *be, int N, int C, const float *x, const float *w, const float *b, const float *dout,
                   ln_out *o) {
  size_t n = (size_t)N * C;
  float *dx_in = kt_dput(be, x, n * 4), *dw_in = kt_dput(be, w, C * 4), *db_in = kt_dput(be, b, C * 4);
  float *out = kt_dput(be, NULL, n * 4), *mean = kt_dput(be, NULL, N * 4), *rstd = kt_dput(be, NULL, N * 4);
  float *dy = kt_dput(be, dout, n * 4), *gx = kt_dput(be, o->dx, n * 4);
  float *gw = kt_dput(be, o->dw, C * 4), *gb = kt_dput(be, o->db, C * 4);
  KT_OK(gt_op_layernorm_forward(be, out, mean, rstd, dx_in, dw_in, db_in, N, C));
  KT_OK(gt_op_layernorm_backward(be, gx, gw, gb, dy, dx_in, dw_in, mean, rstd, N, C));
  kt_dget(be, o->out, out, n * 4);
  kt_dget(be, o->mean, mean, N * 4);
  kt_dget(be, o->rstd, rstd, N * 4);
  kt_dget(be, o->dx, gx, n * 4);
  kt_dget(be, o->dw, gw, C * 4);
  kt_dget(be, o->db, gb, C * 4);
  float *all[] = {dx_in, dw_in, db_in, out, mean, rstd, dy, gx, gw, gb};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

static ln_out ln_alloc(int N, int C, const float *gx0, const float *gw0, const float *gb0) {
  size_t n = (size_t)N * C;
  ln_out o = {kt_xmalloc(n * 4), kt_xmalloc(N * 4), kt_xmalloc(N * 4),
              kt_xmalloc(n * 4), kt_xmalloc(C * 4), kt_xmalloc(C * 4)};
  memcpy(o.dx, gx0, n * 4);
  memcpy(o.dw, gw0, C * 4);
  memcpy(o.db, gb0, C * 4);
  return o;
}

static void ln_free(ln_out *o) {
  free(o->out);
  free(o->mean);
  free(o->rstd);
  free(o->dx);
  free(o->dw);
  free(o->db);
}

static void check_layernorm(int N, int C, size_t every) {
  size_t n = (size_t)N * C;
  float *x = kt_randn_alloc(n, 2.0f), *w = kt_randn_alloc(C, 1), *b = kt_randn_alloc(C, 1);
  for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a nonzero mean */
  float *W = kt_randn_alloc(n, 1);
  float *gx0 = kt_randn_alloc(n, 1), *gw0 = kt_randn_alloc(C, 1), *gb0 = kt_randn_alloc(C, 1);
  ln_out o = ln_alloc(N, C, gx0, gw0, gb0);
  ln_run(kt_be, N, C, x, w, b, W, &o);

  ln_ref r = {N, C, kt_to_double(x, n), kt_to_double(w, C), kt_to_double(b, C), kt_to_double(W, n)};
  double *out = kt_xmalloc(n * 8), *mean = kt_xmalloc(N * 8), *rstd = kt_xmalloc(N * 8);
  ln_forward_ref(&r, out, mean, rstd);
  kt_check("layernorm out", o.out, out, n, 1e-4);
  kt_check("layernorm mean", o.mean, mean, N, 1e-5);
  kt_check("layernorm rstd", o.rstd, rstd, N, 1e-4);

  double *fd = kt_xmalloc(n * 8), *want;
  kt_fd(ln_loss, &r, r.x, n, every, fd);
  want = kt_plus(gx0, fd, n);
  kt_check("layernorm dinp", o.dx, want, n, 1e-3);
  free(want);
  kt_fd(ln_loss, &r, r.w, C, 1, fd);
  want = kt_plus(gw0, fd, C);
  kt_check("layernorm dw", o.dw, want, C, 1e-4);
  free(want);
  kt_fd(ln_loss, &r, r.b, C, 1, fd);
  want = kt_plus(gb0, fd, C);
  kt_check("layernorm db", o.db, want, C, 1e-4);
  free(want);

  if (kt_ref) {
    ln_out e = ln_alloc(N, C, gx0, gw0, gb0);
    ln_run(kt_ref, N, C, x, w, b, W, &e);
    kt_check_backend("layernorm out", o.out, e.out, n);
    kt_check_backend("layernorm dinp", o.dx, e.dx, n);
    kt_check_backend("layernorm dw", o.dw, e.dw, C);
    kt_check_backend("layernorm db", o.db, e.db, C);
    ln_free(&e);
  }
  ln_free(&o);
  free(x);
  free(w);
  free(b);
  free(W);
  free(gx0);
  free(gw0);
  free(gb0);
  free(r.x);
  free(r.w);
  free(r.b);
  free((void *)r.W);
  free(out);
  free(mean);
  free(rstd);
  free(fd);
}

void test_layernorm(void **state) {
  (void)state;
  kt_seed(11);
  check_layernorm(1, 1, 1);
  check_layernorm(3, 2, 1);
  check_layernorm(5, 7, 1);
  check_layernorm(17, 33, 1);
  check_layernorm(64, 300, 37); /* threaded; finite differences on a sample */
}

/* ---- linear ---- */

typedef struct {
  int N, C, OC;
  double *x, *w, *bias; /* bias may be NULL */
  const double *W;
} lin_ref;

static double lin_loss(void *p) {
  lin_ref *r = p;
  double L = 0;
  for (int i = 0; i < r->N; i++)
    for (int o = 0; o < r->OC; o++) {
      double s = r->bias ? r->bias[o] : 0;
      for (int c = 0; c < r->C; c++) s += r->x[(size_t)i * r->C + c] * r->w[(size_t)o * r->C + c];
      L += s * r->W[(size_t)i * r->OC + o];
    }
  return L;
}

typedef struct {
  float *out, *dx, *dw, *db;
} lin_out;

static void lin_run(gt_backend *be, int N, int C, int OC, const float *x, const float *w, const float *bias,
                    const float *dout, int want_dx, lin_out *o) {
  size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
  float *dx_in = kt_dput(be, x, nx * 4), *dw_in = kt_dput(be, w, nw * 4);
  float *db_in = bias ? kt_dput(be, bias, OC * 4) : NULL;
  float *out = kt_dput(be, NULL, ny * 4), *dy = kt_dput(be, dout, ny * 4);
  float *gx = want_dx ? kt_dput(be, o->dx, nx * 4) : NULL, *gw = kt_dput(be, o->dw, nw * 4);
  float *gb = bias ? kt_dput(be, o->db, OC * 4) : NULL;
  KT_OK(gt_op_linear_forward(be, out, dx_in, dw_in, db_in, N, C, OC));
  KT_OK(gt_op_linear_backward(be, gx, gw, gb, dy, dx_in, dw_in, N, C, OC));
  kt_dget(be, o->out, out, ny * 4);
  kt_dget(be, o->dw, gw, nw * 4);
  if (gx) {
    kt_dget(be, o->dx, gx, nx * 4);
    kt_dfree(be, gx);
  }
  if (gb) {
    kt_dget(be, o->db, gb, OC * 4);
    kt_dfree(be, gb);
    kt_dfree(be, db_in);
  }
  kt_dfree(be, dx_in);
  kt_dfree(be, dw_in);
  kt_dfree(be, out);
  kt_dfree(be, dy);
  kt_dfree(be, gw);
}

static void check_linear(int N, int C, int OC, int with_bias, int want_dx, size_t every) {
  size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
  float *x = kt_randn_alloc(nx, 1), *w = kt_randn_alloc(nw, 1), *bias = kt_randn_alloc(OC, 1);
  float *W = kt_randn_alloc(ny, 1);
  float *gx0 = kt_randn_alloc(nx, 1), *gw0 = kt_randn_alloc(nw, 1), *gb0 = kt_randn_alloc(OC, 1);
  lin_out o = {kt_xmalloc(ny * 4), kt_xmalloc(nx * 4), kt_xmalloc(nw * 4), kt_xmalloc(OC * 4)};
  memcpy(o.dx, gx0, nx * 4);
  memcpy(o.dw, gw0, nw * 4);
  memcpy(o.db, gb0, OC * 4);
  lin_run(kt_be, N, C, OC, x, w, with_bias ? bias : NULL, W, want_dx, &o);

  lin_ref r = {N,
               C,
               OC,
               kt_to_double(x, nx),
               kt_to_double(w, nw),
               with_bias ? kt_to_double(bias, OC) : NULL,
               kt_to_double(W, ny)};
  double *out = kt_xmalloc(ny * 8);
  for (int i = 0; i < N; i++)
    for (int oc = 0; oc < OC; oc++) {
      double s = with_bias ? r.bias[oc] : 0;
      for (int c = 0; c < C; c++) s += r.x[(size_t)i * C + c] * r.w[(size_t)oc * C + c];
      out[(size_t)i * OC + oc] = s;
    }
  kt_check("linear out", o.out, out, ny, 2e-5);
  double *fd = kt_xmalloc((nx > nw ? nx : nw) * 8 + OC * 8), *want;
  if (want_dx) {
    kt_fd(lin_loss, &r, r.x, nx, every, fd);
    want = kt_plus(gx0, fd, nx);
    kt_check("linear dinp", o.dx, want, nx, 1e-4);
    free(want);
  } else {
    kt_check_exact("linear dinp untouched", o.dx, gx0, nx);
  }
  kt_fd(lin_loss, &r, r.w, nw, every, fd);
  want = kt_plus(gw0, fd, nw);
  kt_check("linear dw", o.dw, want, nw, 1e-4);
  free(want);
  if (with_bias) {
    kt_fd(lin_loss, &r, r.bias, OC, 1, fd);
    want = kt_plus(gb0, fd, OC);
    kt_check("linear dbias", o.db, want, OC, 1e-4);
    free(want);
  }
  if (kt_ref) {
    lin_out e = {kt_xmalloc(ny * 4), kt_xmalloc(nx * 4), kt_xmalloc(nw * 4), kt_xmalloc(OC * 4)};
    memcpy(e.dx, gx0, nx * 4);
    memcpy(e.dw, gw0, nw * 4);
    memcpy(e.db, gb0, OC * 4);
    lin_run(kt_ref, N, C, OC, x, w, with_bias ? bias : NULL, W, want_dx, &e);
    kt_check_backend("linear out", o.out, e.out, ny);
    kt_check_backend("linear dinp", o.dx, e.dx, nx);
    kt_check_backend("linear dw", o.dw, e.dw, nw);
    kt_check_backend("linear dbias", o.db, e.db, OC);
    free(e.out);
    free(e.dx);
    free(e.dw);
    free(e.db);
  }
  free(o.out);
  free(o.dx);
  free(o.dw);
  free(o.db);
  free(x);
  free(w);
  free(bias);
  free(W);
  free(gx0);
  free(gw0);
  free(gb0);
  free(r.x);
  free(r.w);
  free(r.bias);
  free((void *)r.W);
  free(out);
  free(fd);
}

void test_linear(void **state) {
  (void)state;
  kt_seed(12);
  check_linear(1, 1, 1, 1, 1, 1);
  check_linear(5, 7, 3, 1, 1, 1);
  check_linear(19, 33, 17, 0, 1, 1);
  check_linear(8, 16, 12, 1, 0, 1);     /* first layer: no dinp */
  check_linear(130, 70, 129, 1, 1, 53); /* threaded; finite differences on a sample */
}

void test_nn_errors(void **state) {
  (void)state;
  gt_backend *be = kt_be;
  float *buf = kt_dput(be, NULL, 64 * 4);
  int32_t tok[2] = {0, -3};
  int32_t *dtok = kt_dput(be, tok, sizeof tok);
  assert_int_equal(gt_op_embedding_forward(be, buf, dtok, buf, NULL, 1, -1, 4), GT_EINVAL);
  assert_int_equal(gt_op_layernorm_forward(be, buf, buf, buf, buf, buf, buf, -2, 4), GT_EINVAL);
  assert_int_equal(gt_op_linear_forward(be, buf, buf, buf, NULL, 2, 2, -2), GT_EINVAL);
  assert_int_equal(gt_op_linear_backward(be, buf, buf, NULL, buf, buf, buf, -1, 2, 2), GT_EINVAL);
  if (gt_backend_kind(be) == GT_DEVICE_CPU) {
    /* Token ids are checked where the host can see them. */
    assert_int_equal(gt_op_embedding_forward(be, buf, dtok, buf, NULL, 1, 2, 4), GT_ERANGE);
    assert_non_null(strstr(gt_last_error(), "-3"));
  }
  kt_dfree(be, buf);
  kt_dfree(be, dtok);
}
