/* Tiled causal attention (attention_tiled_*): forward, the saved
 * log-sum-exp and backward against a double-precision reference and
 * against the full-matrix kernels, from one token to T = 2048, and its
 * gradient against central finite differences on small cases. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  int B, T, C, NH;
  double *qkv;     /* (B,T,3C) */
  const double *W; /* (B,T,C): the loss is sum(out * W), so dout = W */
} tiled_ref;

/* out (B,T,C), lse (B,NH,T) and, when dqkv is not NULL, the gradient of
 * sum(out * W) with respect to qkv, accumulated into dqkv. One row of
 * probabilities at a time: memory grows with T, so T = 2048 stays cheap. */
static void ref_run(const tiled_ref *r, double *out, double *lse, double *dqkv) {
  int T = r->T, C = r->C, NH = r->NH, hs = C / NH, C3 = 3 * C;
  double scale = 1.0 / sqrt(hs), *p = kt_xmalloc((size_t)T * sizeof *p), *dp = kt_xmalloc((size_t)T * sizeof *dp);
  for (int b = 0; b < r->B; b++)
    for (int h = 0; h < NH; h++) {
      const double *base = r->qkv + (size_t)b * T * C3 + h * hs;
      for (int t = 0; t < T; t++) {
        const double *q = base + (size_t)t * C3;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const double *k = base + (size_t)j * C3 + C;
          double s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
        lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
        double *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int j = 0; j <= t; j++) {
          p[j] /= sum;
          const double *v = base + (size_t)j * C3 + 2 * C;
          for (int i = 0; i < hs; i++) o[i] += p[j] * v[i];
        }
        if (!dqkv) continue;
        /* dv_j += p_j dy; dp_j = dy . v_j; ds_j = p_j (dp_j - sum p dp); dq += scale ds_j k_j; dk_j += scale ds_j q */
        const double *dy = r->W + ((size_t)b * T + t) * C + h * hs;
        double *dbase = dqkv + (size_t)b * T * C3 + h * hs, D = 0;
        for (int j = 0; j <= t; j++) {
          const double *v = base + (size_t)j * C3 + 2 * C;
          double *dv = dbase + (size_t)j * C3 + 2 * C, s = 0;
          for (int i = 0; i < hs; i++) {
            dv[i] += p[j] * dy[i];
            s += dy[i] * v[i];
          }
          dp[j] = s;
          D += p[j] * s;
        }
        double *dq = dbase + (size_t)t * C3;
        for (int j = 0; j <= t; j++) {
          double ds = p[j] * (dp[j] - D) * scale;
          const double *k = base + (size_t)j * C3 + C;
          double *dk = dbase + (size_t)j * C3 + C;
          for (int i = 0; i < hs; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  free(p);
  free(dp);
}

static double ref_loss(void *ctx) {
  tiled_ref *r = ctx;
  size_t no = (size_t)r->B * r->T * r->C, nl = (size_t)r->B * r->NH * r->T;
  double *out = kt_xmalloc(no * 8), *lse = kt_xmalloc(nl * 8), L = 0;
  ref_run(r, out, lse, NULL);
  for (size_t i = 0; i < no; i++) L += out[i] * r->W[i];
  free(out);
  free(lse);
  return L;
}

/* The tiled kernels on be: out, lse, and dqkv accumulated onto its input. */
static void tiled_run(gt_backend *be, int B, int T, int C, int NH, const float *qkv, const float *dy, float *out,
                      float *lse, float *dqkv) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *d_qkv = kt_dput(be, qkv, nq * 4), *d_dy = kt_dput(be, dy, no * 4), *d_out = kt_dput(be, NULL, no * 4);
  float *d_lse = kt_dput(be, NULL, nl * 4), *d_g = kt_dput(be, dqkv, nq * 4);
  KT_OK(gt_op_attention_tiled_forward(be, d_out, d_lse, d_qkv, B, T, C, NH));
  KT_OK(gt_op_attention_tiled_backward(be, d_g, d_dy, d_qkv, d_out, d_lse, B, T, C, NH));
  kt_dget(be, out, d_out, no * 4);
  kt_dget(be, lse, d_lse, nl * 4);
  kt_dget(be, dqkv, d_g, nq * 4);
  float *all[] = {d_qkv, d_dy, d_out, d_lse, d_g};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

/* The full-matrix kernels on be, for comparison. */
static void full_run(gt_backend *be, int B, int T, int C, int NH, const float *qkv, const float *dy, float *out,
                     float *dqkv) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *d_qkv = kt_dput(be, qkv, nq * 4), *d_dy = kt_dput(be, dy, no * 4), *d_out = kt_dput(be, NULL, no * 4);
  float *d_att = kt_dput(be, NULL, na * 4), *d_datt = kt_dput(be, NULL, na * 4), *d_g = kt_dput(be, dqkv, nq * 4);
  KT_OK(gt_op_attention_full_forward(be, d_out, d_att, d_qkv, B, T, C, NH));
  KT_OK(gt_op_attention_full_backward(be, d_g, d_datt, d_dy, d_qkv, d_att, B, T, C, NH));
  kt_dget(be, out, d_out, no * 4);
  kt_dget(be, dqkv, d_g, nq * 4);
  float *all[] = {d_qkv, d_dy, d_out, d_att, d_datt, d_g};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(be, all[i]);
}

/* Checks one shape; with fd_every > 0, the gradient against finite
 * differences too (every fd_every-th element of qkv). */
static void check_tiled(int B, int T, int C, int NH, size_t fd_every) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *qkv = kt_randn_alloc(nq, 1.0f), *dy = kt_randn_alloc(no, 1.0f), *g0 = kt_randn_alloc(nq, 1.0f);
  float *out = kt_xmalloc(no * 4), *lse = kt_xmalloc(nl * 4), *dqkv = kt_xmalloc(nq * 4);
  memcpy(dqkv, g0, nq * 4);
  tiled_run(kt_be, B, T, C, NH, qkv, dy, out, lse, dqkv);

  tiled_ref r = {B, T, C, NH, kt_to_double(qkv, nq), kt_to_double(dy, no)};
  double *wo = kt_xmalloc(no * 8), *wl = kt_xmalloc(nl * 8), *wg = kt_to_double(g0, nq);
  ref_run(&r, wo, wl, wg);
  kt_check("tiled out", out, wo, no, 1e-5);
  kt_check("tiled lse", lse, wl, nl, 1e-5);
  kt_check("tiled dqkv", dqkv, wg, nq, 1e-5);

  /* The full kernels compute the same function. */
  float *fo = kt_xmalloc(no * 4), *fg = kt_xmalloc(nq * 4);
  memcpy(fg, g0, nq * 4);
  full_run(kt_be, B, T, C, NH, qkv, dy, fo, fg);
  kt_check_f("tiled out vs full", out, fo, no, 1e-5);
  kt_check_f("tiled dqkv vs full", dqkv, fg, nq, 1e-5);

  if (fd_every) {
    double *fd = kt_xmalloc(nq * 8);
    kt_fd(ref_loss, &r, r.qkv, nq, fd_every, fd);
    double *want = kt_plus(g0, fd, nq);
    kt_check("tiled dqkv vs finite differences", dqkv, want, nq, 1e-3);
    free(fd);
    free(want);
  }
  if (kt_ref) {
    float *ro = kt_xmalloc(no * 4), *rl = kt_xmalloc(nl * 4), *rg = kt_xmalloc(nq * 4);
    memcpy(rg, g0, nq * 4);
    tiled_run(kt_ref, B, T, C, NH, qkv, dy, ro, rl, rg);
    kt_check_backend("tiled out", out, ro, no);
    kt_check_backend("tiled lse", lse, rl, nl);
    kt_check_backend("tiled dqkv", dqkv, rg, nq);
    free(ro);
    free(rl);
    free(rg);
  }
  float *fs[] = {qkv, dy, g0, out, lse, dqkv, fo, fg};
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
  free(r.qkv);
  free((void *)r.W);
  free(wo);
  free(wl);
  free(wg);
}

void test_attention_tiled(void **state) {
  (void)state;
  kt_seed(31);
  /* The suite runs on two threads: B*NH = 1 spreads one pair's query
   * blocks over both, B*NH >= 2 gives each thread whole pairs. */
  check_tiled(2, 1, 8, 2, 1);    /* one token */
  check_tiled(1, 7, 9, 3, 1);    /* odd head size */
  check_tiled(1, 7, 6, 1, 1);    /* one pair */
  check_tiled(2, 64, 32, 4, 61); /* the diagonal in bands */
  check_tiled(1, 129, 16, 1, 0);
  check_tiled(1, 129, 24, 2, 0);
  check_tiled(3, 65, 12, 1, 0);  /* more pairs than threads */
  check_tiled(1, 300, 16, 1, 0); /* a partial second block, spread */
  check_tiled(2, 300, 8, 2, 0);
  /* Long sequences: many key blocks per query block, small heads to stay
   * quick under sanitizers. */
  check_tiled(1, 1024, 16, 2, 0);
  check_tiled(1, 2048, 8, 1, 0);
  check_tiled(1, 2048, 16, 2, 0);
}
