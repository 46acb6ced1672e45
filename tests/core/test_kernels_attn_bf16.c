/* The causal softmax on its own, and attention with bf16 products
 * (gt_attention_forward_bf16 / backward) against a double-precision
 * reference that rounds to bf16 exactly where the composition does: q, k,
 * v, the probabilities, the output gradient and the score gradient. What is
 * left is fp32 accumulation, so the bound is tight for bf16 work; a wrong
 * stride, transpose or head offset misses it by orders of magnitude. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/tensor.h"
#include "tests/core/test_kernels.h"
#include "core/backend_engine.h"

static double r16(double x) { return gt_bf16_to_f32(gt_f32_to_bf16((float)x)); }

static void softmax_run(gt_backend *be, const float *s, const float *d, float *att, float *dd, int BH, int T,
                        float scale) {
  size_t n = (size_t)BH * T * T;
  float *a = kt_dput(be, s, n * 4), *g = kt_dput(be, d, n * 4);
  KT_OK(gt_op_causal_softmax_forward(be, a, BH, T));
  KT_OK(gt_op_causal_softmax_backward(be, g, a, BH, T, scale));
  kt_dget(be, att, a, n * 4);
  kt_dget(be, dd, g, n * 4);
  kt_dfree(be, a);
  kt_dfree(be, g);
}

static void check_softmax(int BH, int T) {
  size_t n = (size_t)BH * T * T;
  float *s = kt_randn_alloc(n, 3.0f), *d = kt_randn_alloc(n, 1.0f), *att = kt_xmalloc(n * 4), *dd = kt_xmalloc(n * 4);
  const float scale = 0.125f;
  softmax_run(kt_be, s, d, att, dd, BH, T, scale);
  double *wa = kt_xmalloc(n * 8), *wd = kt_xmalloc(n * 8);
  for (size_t r = 0; r < (size_t)BH * T; r++) {
    int t = (int)(r % (size_t)T);
    const float *row = s + r * T, *drow = d + r * T;
    double mx = -INFINITY, sum = 0, dot = 0;
    for (int j = 0; j <= t; j++) mx = fmax(mx, row[j]);
    for (int j = 0; j <= t; j++) sum += exp(row[j] - mx);
    for (int j = 0; j < T; j++) wa[r * T + j] = j <= t ? exp(row[j] - mx) / sum : 0.0;
    /* Backward from the kernel's own probabilities, as training runs it. */
    for (int j = 0; j <= t; j++) dot += (double)att[r * T + j] * drow[j];
    for (int j = 0; j < T; j++) wd[r * T + j] = j <= t ? att[r * T + j] * (drow[j] - dot) * scale : 0.0;
  }
  kt_check("causal_softmax_forward", att, wa, n, 1e-5);
  kt_check("causal_softmax_backward", dd, wd, n, 1e-5);
  for (size_t r = 0; r < (size_t)BH * T; r++)
    for (int j = (int)(r % (size_t)T) + 1; j < T; j++)
      if (att[r * T + j] != 0.0f || dd[r * T + j] != 0.0f) fail_msg("row %zu: column %d above the diagonal", r, j);
  if (kt_ref) {
    float *ra = kt_xmalloc(n * 4), *rd = kt_xmalloc(n * 4);
    softmax_run(kt_ref, s, d, ra, rd, BH, T, scale);
    kt_check_backend("causal_softmax_forward", att, ra, n);
    kt_check_backend("causal_softmax_backward", dd, rd, n);
    free(ra);
    free(rd);
  }
  free(s);
  free(d);
  free(att);
  free(dd);
  free(wa);
  free(wd);
}

void test_causal_softmax(void **state) {
  (void)state;
  kt_seed(81);
  check_softmax(1, 1);
  check_softmax(3, 37);
  check_softmax(4, 130);
  assert_int_equal(gt_op_causal_softmax_forward(kt_be, NULL, -1, 4), GT_EINVAL);
  assert_int_equal(gt_op_causal_softmax_backward(kt_be, NULL, NULL, 2, -4, 1.0f), GT_EINVAL);
}

typedef struct {
  int B, T, C, NH;
} shape;

/* Forward then backward through the composition on be. */
static void bf16_run(gt_backend *be, shape s, const float *qkv, const float *dout, float *out, float *att,
                     float *dqkv) {
  size_t nq = (size_t)s.B * s.T * 3 * s.C, no = (size_t)s.B * s.T * s.C, na = (size_t)s.B * s.NH * s.T * s.T;
  float *q = kt_dput(be, qkv, nq * 4), *dy = kt_dput(be, dout, no * 4), *o = kt_dput(be, NULL, no * 4);
  float *a = kt_dput(be, NULL, na * 4), *g = kt_dput(be, dqkv, nq * 4), *datt = kt_dput(be, NULL, na * 4);
  void *ws = kt_dput(be, NULL, gt_attention_bf16_scratch(s.B, s.T, s.C, s.NH));
  KT_OK(gt_attention_forward_bf16(be, o, a, q, s.B, s.T, s.C, s.NH, ws));
  KT_OK(gt_attention_backward_bf16(be, g, datt, dy, q, a, s.B, s.T, s.C, s.NH, ws));
  kt_dget(be, out, o, no * 4);
  kt_dget(be, att, a, na * 4);
  kt_dget(be, dqkv, g, nq * 4);
  kt_dfree(be, q);
  kt_dfree(be, dy);
  kt_dfree(be, o);
  kt_dfree(be, a);
  kt_dfree(be, g);
  kt_dfree(be, datt);
  kt_dfree(be, ws);
}

static void check_attention_bf16(shape s) {
  int B = s.B, T = s.T, C = s.C, NH = s.NH, hs = C / NH, C3 = 3 * C;
  size_t nq = (size_t)B * T * C3, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *qkv = kt_randn_alloc(nq, 1.0f), *dout = kt_randn_alloc(no, 1.0f), *g0 = kt_randn_alloc(nq, 1.0f);
  float *out = kt_xmalloc(no * 4), *att = kt_xmalloc(na * 4), *dqkv = kt_xmalloc(nq * 4);
  memcpy(dqkv, g0, nq * 4);
  bf16_run(kt_be, s, qkv, dout, out, att, dqkv);

  double scale = 1.0 / sqrt(hs);
  double *wo = kt_xmalloc(no * 8), *wa = kt_xmalloc(na * 8), *wg = kt_to_double(g0, nq);
  double *p = kt_xmalloc((size_t)T * 8), *datt = kt_xmalloc((size_t)T * 8), *ds = kt_xmalloc((size_t)T * T * 8);
#define Q(b, t, h, i) r16(qkv[((size_t)(b)*T + (t)) * C3 + (h)*hs + (i)])
#define K(b, t, h, i) r16(qkv[((size_t)(b)*T + (t)) * C3 + C + (h)*hs + (i)])
#define V(b, t, h, i) r16(qkv[((size_t)(b)*T + (t)) * C3 + 2 * C + (h)*hs + (i)])
#define DY(b, t, h, i) r16(dout[((size_t)(b)*T + (t)) * C + (h)*hs + (i)])
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *A = att + ((size_t)b * NH + h) * T * T; /* the kernel's probabilities feed backward */
      for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          double sc = 0;
          for (int i = 0; i < hs; i++) sc += Q(b, t, h, i) * K(b, j, h, i);
          p[j] = sc * scale;
          mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
        for (int j = 0; j < T; j++) wa[(((size_t)b * NH + h) * T + t) * T + j] = j <= t ? p[j] / sum : 0.0;
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int j = 0; j <= t; j++) o += r16(A[(size_t)t * T + j]) * V(b, j, h, i);
          wo[((size_t)b * T + t) * C + h * hs + i] = o;
        }
        /* backward: datt = dy v^T; score gradient, rounded as the kernel rounds it */
        double dot = 0;
        for (int j = 0; j <= t; j++) {
          datt[j] = 0;
          for (int i = 0; i < hs; i++) datt[j] += DY(b, t, h, i) * V(b, j, h, i);
          dot += A[(size_t)t * T + j] * datt[j];
        }
        for (int j = 0; j < T; j++)
          ds[(size_t)t * T + j] = j <= t ? r16(A[(size_t)t * T + j] * (datt[j] - dot) * scale) : 0.0;
      }
      for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) {
          double dq = 0, dk = 0, dv = 0;
          for (int j = 0; j < T; j++) {
            dq += ds[(size_t)t * T + j] * K(b, j, h, i); /* row t of dscores */
            dk += ds[(size_t)j * T + t] * Q(b, j, h, i); /* column t */
            dv += r16(A[(size_t)j * T + t]) * DY(b, j, h, i);
          }
          size_t at = ((size_t)b * T + t) * C3 + h * hs + i;
          wg[at] += dq;
          wg[at + C] += dk;
          wg[at + 2 * C] += dv;
        }
    }
#undef Q
#undef K
#undef V
#undef DY
  kt_check("attention_bf16 att", att, wa, na, 1e-4); /* fp32 scores of exact bf16 products */
  kt_check("attention_bf16 out", out, wo, no, 2e-3);
  kt_check("attention_bf16 dqkv", dqkv, wg, nq, 5e-3);
  if (kt_ref) {
    float *ro = kt_xmalloc(no * 4), *ra = kt_xmalloc(na * 4), *rg = kt_xmalloc(nq * 4);
    memcpy(rg, g0, nq * 4);
    bf16_run(kt_ref, s, qkv, dout, ro, ra, rg);
    kt_check_f("attention_bf16 out (vs cpu)", out, ro, no, 4e-3);
    kt_check_f("attention_bf16 dqkv (vs cpu)", dqkv, rg, nq, 1e-2);
    free(ro);
    free(ra);
    free(rg);
  }
  free(qkv);
  free(dout);
  free(g0);
  free(out);
  free(att);
  free(dqkv);
  free(wo);
  free(wa);
  free(wg);
  free(p);
  free(datt);
  free(ds);
}

void test_attention_bf16(void **state) {
  (void)state;
  kt_seed(82);
  check_attention_bf16((shape){1, 1, 4, 1});
  check_attention_bf16((shape){2, 37, 48, 3});  /* nothing a multiple of a tile */
  check_attention_bf16((shape){2, 64, 128, 2}); /* hs = 64, T = 64: whole tiles */
  assert_int_equal(gt_attention_forward_bf16(kt_be, NULL, NULL, NULL, 1, 4, 6, 4, NULL), GT_EINVAL);
  assert_int_equal(gt_attention_forward_bf16(kt_be, NULL, NULL, NULL, 1, 4, 8, 2, NULL), GT_EINVAL); /* no scratch */
}
