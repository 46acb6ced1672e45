/* Softmax cross-entropy: values, stability, ignored targets, aliasing and
 * out-of-range targets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  int N, V;
  double *logits;
  const int32_t *tgt;
  double dloss;
} xent_ref;

/* losses and probs in double; returns dloss * sum(losses). */
static double xent_forward_ref(const xent_ref *r, double *losses, double *probs) {
  double L = 0;
  for (int i = 0; i < r->N; i++) {
    const double *x = r->logits + (size_t)i * r->V;
    double mx = x[0], sum = 0;
    for (int j = 0; j < r->V; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < r->V; j++) sum += exp(x[j] - mx);
    if (probs)
      for (int j = 0; j < r->V; j++) probs[(size_t)i * r->V + j] = exp(x[j] - mx) / sum;
    double l = r->tgt[i] < 0 ? 0 : log(sum) - (x[r->tgt[i]] - mx);
    if (losses) losses[i] = l;
    L += l;
  }
  return r->dloss * L;
}

static double xent_loss(void *p) { return xent_forward_ref(p, NULL, NULL); }

/* Forward then backward; with alias the probabilities overwrite the logits
 * and the gradient overwrites the probabilities. */
static void xent_run(gt_backend *be, int N, int V, const float *logits, const int32_t *tgt, float dloss, int alias,
                     float *losses, float *probs, float *dlogits) {
  size_t n = (size_t)N * V;
  float *dx = kt_dput(be, logits, n * 4), *dl = kt_dput(be, NULL, N * 4);
  int32_t *dt = kt_dput(be, tgt, N * 4);
  float *dp = alias ? dx : kt_dput(be, NULL, n * 4), *dg = alias ? dp : kt_dput(be, NULL, n * 4);
  KT_OK(gt_op_softmax_xent_forward(be, dl, dp, dx, dt, N, V));
  kt_dget(be, probs, dp, n * 4);
  kt_dget(be, losses, dl, N * 4);
  KT_OK(gt_op_softmax_xent_backward(be, dg, dp, dt, dloss, N, V));
  kt_dget(be, dlogits, dg, n * 4);
  kt_dfree(be, dx);
  kt_dfree(be, dl);
  kt_dfree(be, dt);
  if (!alias) {
    kt_dfree(be, dp);
    kt_dfree(be, dg);
  }
}

static void check_xent(int N, int V, int alias) {
  size_t n = (size_t)N * V;
  float *x = kt_randn_alloc(n, 3.0f);
  int32_t *tgt = kt_xmalloc(N * sizeof *tgt);
  for (int i = 0; i < N; i++) tgt[i] = i % 4 == 3 ? -1 : kt_randint(V);
  if (N > 2) /* a row that overflows a naive exp */
    for (int j = 0; j < V; j++) x[(size_t)2 * V + j] = j % 2 ? 1000.0f : -1000.0f + (float)j;
  float dloss = 0.37f;
  float *losses = kt_xmalloc(N * 4), *probs = kt_xmalloc(n * 4), *dlog = kt_xmalloc(n * 4);
  xent_run(kt_be, N, V, x, tgt, dloss, alias, losses, probs, dlog);

  xent_ref r = {N, V, kt_to_double(x, n), tgt, dloss};
  double *wl = kt_xmalloc(N * 8), *wp = kt_xmalloc(n * 8), *fd = kt_xmalloc(n * 8);
  xent_forward_ref(&r, wl, wp);
  kt_check("xent losses", losses, wl, N, 1e-5);
  kt_check("xent probs", probs, wp, n, 1e-5);
  kt_fd(xent_loss, &r, r.logits, n, n > 5000 ? 31 : 1, fd);
  kt_check("xent dlogits", dlog, fd, n, 1e-4);
  for (int i = 0; i < N; i++)
    for (int j = 0; tgt[i] < 0 && j < V; j++)
      if (dlog[(size_t)i * V + j] != 0.0f) fail_msg("xent: ignored row %d has gradient at %d", i, j);
  if (kt_ref) {
    float *rl = kt_xmalloc(N * 4), *rp = kt_xmalloc(n * 4), *rd = kt_xmalloc(n * 4);
    xent_run(kt_ref, N, V, x, tgt, dloss, alias, rl, rp, rd);
    kt_check_backend("xent losses", losses, rl, N);
    kt_check_backend("xent probs", probs, rp, n);
    kt_check_backend("xent dlogits", dlog, rd, n);
    free(rl);
    free(rp);
    free(rd);
  }
  free(x);
  free(tgt);
  free(losses);
  free(probs);
  free(dlog);
  free(r.logits);
  free(wl);
  free(wp);
  free(fd);
}

void test_softmax_xent(void **state) {
  (void)state;
  kt_seed(40);
  check_xent(1, 1, 0); /* one class: probability 1, loss 0 */
  check_xent(5, 7, 0);
  check_xent(5, 7, 1);
  check_xent(13, 1001, 1);
  check_xent(40, 500, 0); /* threaded */
}

void test_softmax_xent_errors(void **state) {
  (void)state;
  gt_backend *be = kt_be;
  int N = 4, V = 5;
  int32_t tgt[4] = {0, 4, 5, -1};
  float *buf = kt_dput(be, NULL, (size_t)N * V * 4);
  int32_t *dt = kt_dput(be, tgt, sizeof tgt);
  /* On CUDA targets are checked on the host before upload, and the
   * device's own check is a debugging option (test_cuda_backend). */
  if (gt_backend_kind(be) == GT_DEVICE_CPU) {
    assert_int_equal(gt_op_softmax_xent_forward(be, buf, buf, buf, dt, N, V), GT_ERANGE);
    assert_non_null(strstr(gt_last_error(), "position 2"));
    assert_non_null(strstr(gt_last_error(), "5"));
    assert_int_equal(gt_op_softmax_xent_backward(be, buf, buf, dt, 1.0f, N, V), GT_ERANGE);
  }
  assert_int_equal(gt_op_softmax_xent_forward(be, buf, buf, buf, dt, N, 0), GT_EINVAL);
  kt_dfree(be, buf);
  kt_dfree(be, dt);
}
