/* Grouped-query attention (attention_gqa_*): forward, the saved
 * log-sum-exp and backward against a double-precision reference, against
 * the multi-head tiled kernels run on the key and value heads repeated for
 * every query head (the gradients of a group's copies summed), and its
 * gradient against central finite differences on small cases. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  int B, T, C, NH, NKV;
  double *qkv;     /* (B,T,C + 2 KV) */
  const double *W; /* (B,T,C): the loss is sum(out * W), so dout = W */
} gqa_ref;

static int width(int C, int NH, int NKV) { return C + 2 * NKV * (C / NH); }

/* Offsets within a row of query head h, and of its key and value head. */
static void offsets(const gqa_ref *r, int h, int *q, int *k, int *v) {
  int hs = r->C / r->NH, kvh = h / (r->NH / r->NKV);
  *q = h * hs;
  *k = r->C + kvh * hs;
  *v = r->C + r->NKV * hs + kvh * hs;
}

/* out, lse and, when dqkv is not NULL, the gradient of sum(out * W)
 * accumulated into dqkv: one row of probabilities at a time. */
static void ref_run(const gqa_ref *r, double *out, double *lse, double *dqkv) {
  int T = r->T, C = r->C, NH = r->NH, hs = C / NH, L = width(C, NH, r->NKV);
  double scale = 1.0 / sqrt(hs), *p = kt_xmalloc((size_t)T * 8), *dp = kt_xmalloc((size_t)T * 8);
  for (int b = 0; b < r->B; b++)
    for (int h = 0; h < NH; h++) {
      int oq, ok, ov;
      offsets(r, h, &oq, &ok, &ov);
      const double *base = r->qkv + (size_t)b * T * L;
      for (int t = 0; t < T; t++) {
        const double *q = base + (size_t)t * L + oq;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * base[(size_t)j * L + ok + i];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
        lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
        double *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int j = 0; j <= t; j++) {
          p[j] /= sum;
          for (int i = 0; i < hs; i++) o[i] += p[j] * base[(size_t)j * L + ov + i];
        }
        if (!dqkv) continue;
        const double *dy = r->W + ((size_t)b * T + t) * C + h * hs;
        double *dbase = dqkv + (size_t)b * T * L, D = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < hs; i++) {
            dbase[(size_t)j * L + ov + i] += p[j] * dy[i];
            s += dy[i] * base[(size_t)j * L + ov + i];
          }
          dp[j] = s;
          D += p[j] * s;
        }
        for (int j = 0; j <= t; j++) {
          double ds = p[j] * (dp[j] - D) * scale;
          for (int i = 0; i < hs; i++) {
            dbase[(size_t)t * L + oq + i] += ds * base[(size_t)j * L + ok + i];
            dbase[(size_t)j * L + ok + i] += ds * q[i];
          }
        }
      }
    }
  free(p);
  free(dp);
}

static double ref_loss(void *ctx) {
  gqa_ref *r = ctx;
  size_t no = (size_t)r->B * r->T * r->C, nl = (size_t)r->B * r->NH * r->T;
  double *out = kt_xmalloc(no * 8), *lse = kt_xmalloc(nl * 8), L = 0;
  ref_run(r, out, lse, NULL);
  for (size_t i = 0; i < no; i++) L += out[i] * r->W[i];
  free(out);
  free(lse);
  return L;
}

/* The GQA kernels on be (NKV > 0), q, k and v cut out of the packed rows
 * of qkv and the gradients packed back; or the multi-head tiled kernels
 * (NKV = 0, qkv (B,T,3C)). out, lse, and dqkv accumulated onto its input. */
static void gqa_run(gt_backend *be, int B, int T, int C, int NH, int NKV, const float *qkv, const float *dy, float *out,
                    float *lse, float *dqkv) {
  int L = NKV ? width(C, NH, NKV) : 3 * C, KV = (L - C) / 2;
  size_t BT = (size_t)B * T, nq = BT * L, no = BT * C, nl = (size_t)B * NH * T;
  float *d_dy = kt_dput(be, dy, no * 4), *d_out = kt_dput(be, NULL, no * 4), *d_lse = kt_dput(be, NULL, nl * 4);
  if (NKV) {
    /* planar copies: q (BT,C), k and v (BT,KV), and their gradients */
    float *h[6];
    int w[6] = {C, KV, KV, C, KV, KV}, off[3] = {0, C, C + KV};
    for (int t = 0; t < 6; t++) h[t] = kt_xmalloc(BT * w[t] * 4);
    for (size_t r = 0; r < BT; r++)
      for (int t = 0; t < 3; t++) {
        memcpy(h[t] + r * w[t], qkv + r * L + off[t], (size_t)w[t] * 4);
        memcpy(h[3 + t] + r * w[t], dqkv + r * L + off[t], (size_t)w[t] * 4);
      }
    float *d[6];
    for (int t = 0; t < 6; t++) d[t] = kt_dput(be, h[t], BT * w[t] * 4);
    KT_OK(gt_op_attention_gqa_forward(be, d_out, d_lse, d[0], d[1], d[2], B, T, C, NH, NKV));
    KT_OK(gt_op_attention_gqa_backward(be, d[3], d[4], d[5], d_dy, d[0], d[1], d[2], d_out, d_lse, B, T, C, NH, NKV));
    for (int t = 3; t < 6; t++) kt_dget(be, h[t], d[t], BT * w[t] * 4);
    for (size_t r = 0; r < BT; r++)
      for (int t = 0; t < 3; t++) memcpy(dqkv + r * L + off[t], h[3 + t] + r * w[t], (size_t)w[t] * 4);
    for (int t = 0; t < 6; t++) {
      kt_dfree(be, d[t]);
      free(h[t]);
    }
  } else {
    float *d_qkv = kt_dput(be, qkv, nq * 4), *d_g = kt_dput(be, dqkv, nq * 4);
    KT_OK(gt_op_attention_tiled_forward(be, d_out, d_lse, d_qkv, B, T, C, NH));
    KT_OK(gt_op_attention_tiled_backward(be, d_g, d_dy, d_qkv, d_out, d_lse, B, T, C, NH));
    kt_dget(be, dqkv, d_g, nq * 4);
    kt_dfree(be, d_qkv);
    kt_dfree(be, d_g);
  }
  kt_dget(be, out, d_out, no * 4);
  kt_dget(be, lse, d_lse, nl * 4);
  kt_dfree(be, d_dy);
  kt_dfree(be, d_out);
  kt_dfree(be, d_lse);
}

/* The multi-head layout (B,T,3C) with each key and value head repeated for
 * its group's query heads. */
static float *expand(const gqa_ref *r, const float *qkv) {
  int T = r->T, C = r->C, hs = C / r->NH, L = width(C, r->NH, r->NKV);
  float *e = kt_xmalloc((size_t)r->B * T * 3 * C * 4);
  for (int bt = 0; bt < r->B * T; bt++)
    for (int h = 0; h < r->NH; h++) {
      int oq, ok, ov;
      offsets(r, h, &oq, &ok, &ov);
      const float *src = qkv + (size_t)bt * L;
      float *dst = e + (size_t)bt * 3 * C + h * hs;
      memcpy(dst, src + oq, hs * 4);
      memcpy(dst + C, src + ok, hs * 4);
      memcpy(dst + 2 * C, src + ov, hs * 4);
    }
  return e;
}

/* The multi-head gradient (B,T,3C) folded back: each group's copies of
 * a key and value head summed, in head order. */
static double *fold(const gqa_ref *r, const float *g0, const float *de) {
  int T = r->T, C = r->C, hs = C / r->NH, L = width(C, r->NH, r->NKV);
  size_t nq = (size_t)r->B * T * L;
  double *w = kt_to_double(g0, nq);
  for (int bt = 0; bt < r->B * T; bt++)
    for (int h = 0; h < r->NH; h++) {
      int oq, ok, ov;
      offsets(r, h, &oq, &ok, &ov);
      const float *src = de + (size_t)bt * 3 * C + h * hs;
      double *dst = w + (size_t)bt * L;
      for (int i = 0; i < hs; i++) {
        dst[oq + i] += src[i];
        dst[ok + i] += src[C + i];
        dst[ov + i] += src[2 * C + i];
      }
    }
  return w;
}

static void check_gqa(int B, int T, int C, int NH, int NKV, size_t fd_every) {
  size_t nq = (size_t)B * T * width(C, NH, NKV), ne = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  size_t nl = (size_t)B * NH * T;
  float *qkv = kt_randn_alloc(nq, 1.0f), *dy = kt_randn_alloc(no, 1.0f), *g0 = kt_randn_alloc(nq, 1.0f);
  float *out = kt_xmalloc(no * 4), *lse = kt_xmalloc(nl * 4), *dqkv = kt_xmalloc(nq * 4);
  memcpy(dqkv, g0, nq * 4);
  gqa_run(kt_be, B, T, C, NH, NKV, qkv, dy, out, lse, dqkv);

  gqa_ref r = {B, T, C, NH, NKV, kt_to_double(qkv, nq), kt_to_double(dy, no)};
  double *wo = kt_xmalloc(no * 8), *wl = kt_xmalloc(nl * 8), *wg = kt_to_double(g0, nq);
  ref_run(&r, wo, wl, wg);
  kt_check("gqa out", out, wo, no, 1e-5);
  kt_check("gqa lse", lse, wl, nl, 1e-5);
  kt_check("gqa dqkv", dqkv, wg, nq, 1e-5);

  /* Multi-head attention over repeated key and value heads is the same
   * function. */
  float *e = expand(&r, qkv), *eo = kt_xmalloc(no * 4), *el = kt_xmalloc(nl * 4), *eg = kt_xmalloc(ne * 4);
  memset(eg, 0, ne * 4);
  gqa_run(kt_be, B, T, C, NH, 0, e, dy, eo, el, eg);
  double *fg = fold(&r, g0, eg);
  kt_check_f("gqa out vs repeated heads", out, eo, no, 1e-5);
  kt_check_f("gqa lse vs repeated heads", lse, el, nl, 1e-5);
  kt_check("gqa dqkv vs repeated heads", dqkv, fg, nq, 1e-5);

  if (fd_every) {
    double *fd = kt_xmalloc(nq * 8);
    kt_fd(ref_loss, &r, r.qkv, nq, fd_every, fd);
    double *want = kt_plus(g0, fd, nq);
    kt_check("gqa dqkv vs finite differences", dqkv, want, nq, 1e-3);
    free(fd);
    free(want);
  }
  if (kt_ref) {
    float *ro = kt_xmalloc(no * 4), *rl = kt_xmalloc(nl * 4), *rg = kt_xmalloc(nq * 4);
    memcpy(rg, g0, nq * 4);
    gqa_run(kt_ref, B, T, C, NH, NKV, qkv, dy, ro, rl, rg);
    kt_check_backend("gqa out", out, ro, no);
    kt_check_backend("gqa lse", lse, rl, nl);
    kt_check_backend("gqa dqkv", dqkv, rg, nq);
    free(ro);
    free(rl);
    free(rg);
  }
  void *fs[] = {qkv, dy, g0, out, lse, dqkv, r.qkv, (void *)r.W, wo, wl, wg, e, eo, el, eg, fg};
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
}

void test_attention_gqa(void **state) {
  (void)state;
  kt_seed(53);
  /* The suite runs on two threads: B*NKV >= 2 gives each thread whole
   * (batch, key/value head) pairs, B*NKV = 1 spreads query blocks. */
  check_gqa(1, 1, 8, 2, 1, 1);     /* one token, one key/value head */
  check_gqa(1, 7, 12, 4, 2, 1);    /* two groups of two */
  check_gqa(2, 9, 12, 3, 1, 1);    /* one group of three */
  check_gqa(1, 6, 8, 2, 2, 1);     /* no grouping */
  check_gqa(2, 64, 32, 4, 2, 53);  /* the diagonal in bands */
  check_gqa(1, 300, 32, 8, 1, 0);  /* spread, a partial second block */
  check_gqa(3, 300, 32, 8, 2, 0);  /* pairs to each thread */
  check_gqa(1, 1024, 16, 4, 2, 0); /* many key blocks per query block */
}
