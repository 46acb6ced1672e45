/* Causal multi-head self-attention on the whole score matrix
 * (attention_full_*), forward and backward; the tiled kernels are checked
 * against these and a reference in test_kernels_attn_tiled.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  int B, T, C, NH;
  double *qkv;
  const double *W;
} attn_ref;

/* out (B,T,C) and, when att is not NULL, the probabilities (B,NH,T,T). */
static void attn_forward_ref(const attn_ref *r, double *out, double *att) {
  int T = r->T, C = r->C, NH = r->NH, hs = C / NH;
  double scale = 1.0 / sqrt(hs), *p = kt_xmalloc((size_t)T * sizeof *p);
  for (int b = 0; b < r->B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = r->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const double *k = r->qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
          double s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
        double *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int j = 0; j <= t; j++) {
          p[j] /= sum;
          const double *v = r->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; i++) o[i] += p[j] * v[i];
        }
        if (att)
          for (int j = 0; j < T; j++) att[(((size_t)b * NH + h) * T + t) * T + j] = j <= t ? p[j] : 0.0;
      }
  free(p);
}

static double attn_loss(void *p) {
  attn_ref *r = p;
  size_t n = (size_t)r->B * r->T * r->C;
  double *out = kt_xmalloc(n * 8), L = 0;
  attn_forward_ref(r, out, NULL);
  for (size_t i = 0; i < n; i++) L += out[i] * r->W[i];
  free(out);
  return L;
}

static void attn_run(gt_backend *be, int B, int T, int C, int NH, const float *qkv, const float *dout, float *out,
                     float *att, float *dqkv) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *dq_in = kt_dput(be, qkv, nq * 4), *dy = kt_dput(be, dout, no * 4);
  float *o = kt_dput(be, NULL, no * 4), *a = kt_dput(be, NULL, na * 4), *g = kt_dput(be, dqkv, nq * 4);
  /* datt is scratch: fill it with NaN so a kernel that reads it first fails. */
  float *nan = kt_xmalloc(na * 4);
  for (size_t i = 0; i < na; i++) nan[i] = NAN;
  float *scratch = kt_dput(be, nan, na * 4);
  KT_OK(gt_op_attention_full_forward(be, o, a, dq_in, B, T, C, NH));
  KT_OK(gt_op_attention_full_backward(be, g, scratch, dy, dq_in, a, B, T, C, NH));
  kt_dget(be, out, o, no * 4);
  kt_dget(be, att, a, na * 4);
  kt_dget(be, dqkv, g, nq * 4);
  kt_dfree(be, dq_in);
  kt_dfree(be, dy);
  kt_dfree(be, o);
  kt_dfree(be, a);
  kt_dfree(be, g);
  kt_dfree(be, scratch);
  free(nan);
}

static void check_attention(int B, int T, int C, int NH, size_t every) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *qkv = kt_randn_alloc(nq, 1.0f), *W = kt_randn_alloc(no, 1), *g0 = kt_randn_alloc(nq, 1);
  float *out = kt_xmalloc(no * 4), *att = kt_xmalloc(na * 4), *dqkv = kt_xmalloc(nq * 4);
  memcpy(dqkv, g0, nq * 4);
  attn_run(kt_be, B, T, C, NH, qkv, W, out, att, dqkv);

  attn_ref r = {B, T, C, NH, kt_to_double(qkv, nq), kt_to_double(W, no)};
  double *wo = kt_xmalloc(no * 8), *wa = kt_xmalloc(na * 8);
  attn_forward_ref(&r, wo, wa);
  kt_check("attention out", out, wo, no, 1e-4);
  kt_check("attention att", att, wa, na, 1e-4);
  for (size_t i = 0; i < na; i++)
    if (wa[i] == 0.0 && att[i] != 0.0f) fail_msg("attention att[%zu] above the diagonal is %g", i, att[i]);

  double *fd = kt_xmalloc(nq * 8);
  kt_fd(attn_loss, &r, r.qkv, nq, every, fd);
  double *want = kt_plus(g0, fd, nq);
  kt_check("attention dqkv", dqkv, want, nq, 1e-3);
  if (kt_ref) {
    float *ro = kt_xmalloc(no * 4), *ra = kt_xmalloc(na * 4), *rg = kt_xmalloc(nq * 4);
    memcpy(rg, g0, nq * 4);
    attn_run(kt_ref, B, T, C, NH, qkv, W, ro, ra, rg);
    kt_check_backend("attention out", out, ro, no);
    kt_check_backend("attention att", att, ra, na);
    kt_check_backend("attention dqkv", dqkv, rg, nq);
    free(ro);
    free(ra);
    free(rg);
  }
  free(qkv);
  free(W);
  free(g0);
  free(out);
  free(att);
  free(dqkv);
  free(r.qkv);
  free((void *)r.W);
  free(wo);
  free(wa);
  free(fd);
  free(want);
}

void test_attention(void **state) {
  (void)state;
  kt_seed(30);
  check_attention(1, 1, 4, 1, 1); /* one token */
  check_attention(2, 5, 6, 3, 1); /* head size 2 */
  check_attention(1, 7, 9, 3, 1); /* odd head size */
  check_attention(2, 16, 32, 2, 3);
  check_attention(1, 33, 12, 1, 5);  /* one head */
  check_attention(3, 20, 24, 4, 7);  /* more pairs than threads */
  check_attention(1, 150, 8, 2, 13); /* several row blocks */
}

void test_attention_errors(void **state) {
  (void)state;
  gt_backend *be = kt_be;
  float *buf = kt_dput(be, NULL, 64 * 4);
  assert_int_equal(gt_op_attention_full_forward(be, buf, buf, buf, 1, 2, 6, 4), GT_EINVAL);
  if (gt_backend_kind(be) == GT_DEVICE_CPU) assert_non_null(strstr(gt_last_error(), "NH"));
  assert_int_equal(gt_op_attention_full_forward(be, buf, buf, buf, 1, 2, 6, 0), GT_EINVAL);
  assert_int_equal(gt_op_attention_full_backward(be, buf, buf, buf, buf, buf, -1, 2, 6, 2), GT_EINVAL);
  assert_int_equal(gt_op_attention_tiled_forward(be, buf, buf, buf, 1, 2, 6, 4), GT_EINVAL);
  assert_int_equal(gt_op_attention_tiled_forward(be, buf, NULL, buf, 1, 2, 6, 2), GT_EINVAL);
  if (gt_backend_kind(be) == GT_DEVICE_CPU) assert_non_null(strstr(gt_last_error(), "lse"));
  assert_int_equal(gt_op_attention_tiled_backward(be, buf, buf, buf, buf, buf, 1, -2, 6, 2), GT_EINVAL);
  assert_int_equal(gt_op_attention_tiled_backward(be, buf, buf, buf, NULL, buf, 1, 2, 6, 2), GT_EINVAL);
  KT_OK(gt_op_attention_tiled_forward(be, NULL, NULL, NULL, 0, 2, 6, 2)); /* nothing to do */
  kt_dfree(be, buf);
}
