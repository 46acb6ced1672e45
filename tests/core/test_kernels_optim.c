/* AdamW and SGD against scalar references of PyTorch's update rules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"

typedef struct {
  float *p, *m, *v; /* device state */
  float *g;
} opt_dev;

static void adamw_ref(double *p, double *m, double *v, const float *g, size_t n,
                      const gt_adamw_args *a) {
  double bc1 = 1 - pow(a->beta1, a->step), bc2 = 1 - pow(a->beta2, a->step);
  for (size_t i = 0; i < n; i++) {
    double gi = (double)g[i] * a->grad_scale;
    p[i] *= 1 - (double)a->lr * a->weight_decay;
    m[i] = a->beta1 * m[i] + (1 - (double)a->beta1) * gi;
    v[i] = a->beta2 * v[i] + (1 - (double)a->beta2) * gi * gi;
    p[i] -= a->lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + a->eps);
  }
}

static void adamw_steps(gt_backend *be, float *p, float *m, float *v, float **grads, int steps,
                        size_t n, const gt_adamw_args *a0) {
  opt_dev d = {kt_dput(be, p, n * 4), kt_dput(be, NULL, n * 4), kt_dput(be, NULL, n * 4),
               kt_dput(be, NULL, n * 4)};
  for (int s = 1; s <= steps; s++) {
    gt_adamw_args a = *a0;
    a.step = s;
    KT_OK(gt_backend_upload(be, d.g, grads[s - 1], n * 4));
    KT_OK(gt_op_adamw_update(be, d.p, d.g, d.m, d.v, n, &a));
  }
  kt_dget(be, p, d.p, n * 4), kt_dget(be, m, d.m, n * 4), kt_dget(be, v, d.v, n * 4);
  kt_dfree(be, d.p), kt_dfree(be, d.m), kt_dfree(be, d.v), kt_dfree(be, d.g);
}

static void check_adamw(size_t n) {
  enum { STEPS = 3 };
  gt_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                     .weight_decay = 0.1f, .grad_scale = 0.5f};
  float *p0 = kt_randn_alloc(n, 1), *grads[STEPS];
  for (int s = 0; s < STEPS; s++) grads[s] = kt_randn_alloc(n, 2);
  float *p = kt_xmalloc(n * 4), *m = kt_xmalloc(n * 4), *v = kt_xmalloc(n * 4);
  memcpy(p, p0, n * 4);
  adamw_steps(kt_be, p, m, v, grads, STEPS, n, &a);
  double *rp = kt_to_double(p0, n), *rm = calloc(n, 8), *rv = calloc(n, 8);
  for (int s = 1; s <= STEPS; s++) {
    a.step = s;
    adamw_ref(rp, rm, rv, grads[s - 1], n, &a);
  }
  kt_check("adamw param", p, rp, n, 1e-5);
  kt_check("adamw m", m, rm, n, 1e-5);
  kt_check("adamw v", v, rv, n, 1e-5);
  if (kt_ref) {
    float *ep = kt_xmalloc(n * 4), *em = kt_xmalloc(n * 4), *ev = kt_xmalloc(n * 4);
    memcpy(ep, p0, n * 4);
    adamw_steps(kt_ref, ep, em, ev, grads, STEPS, n, &a);
    kt_check_backend("adamw param", p, ep, n);
    free(ep), free(em), free(ev);
  }
  for (int s = 0; s < STEPS; s++) free(grads[s]);
  free(p0), free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

void test_adamw(void **state) {
  (void)state;
  kt_seed(50);
  check_adamw(1);
  check_adamw(37);
  check_adamw(20011);
  float *buf = kt_dput(kt_be, NULL, 16);
  gt_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0,
                     .grad_scale = 1};
  assert_int_equal(gt_op_adamw_update(kt_be, buf, buf, buf, buf, 4, &a), GT_EINVAL);
  kt_dfree(kt_be, buf);
}

static void sgd_ref(double *p, double *buf, const float *g, size_t n, const gt_sgd_args *a) {
  for (size_t i = 0; i < n; i++) {
    double gi = (double)g[i] * a->grad_scale + (double)a->weight_decay * p[i];
    if (a->momentum != 0.0f) {
      buf[i] = a->momentum * buf[i] + gi;
      gi = a->nesterov ? gi + a->momentum * buf[i] : buf[i];
    }
    p[i] -= a->lr * gi;
  }
}

static void sgd_steps(gt_backend *be, float *p, float *mom, float **grads, int steps, size_t n,
                      const gt_sgd_args *a) {
  float *dp = kt_dput(be, p, n * 4), *dg = kt_dput(be, NULL, n * 4);
  float *dm = a->momentum != 0.0f ? kt_dput(be, NULL, n * 4) : NULL;
  for (int s = 0; s < steps; s++) {
    KT_OK(gt_backend_upload(be, dg, grads[s], n * 4));
    KT_OK(gt_op_sgd_update(be, dp, dg, dm, n, a));
  }
  kt_dget(be, p, dp, n * 4);
  if (dm) kt_dget(be, mom, dm, n * 4), kt_dfree(be, dm);
  kt_dfree(be, dp), kt_dfree(be, dg);
}

static void check_sgd(size_t n, const gt_sgd_args *a) {
  enum { STEPS = 3 };
  float *p0 = kt_randn_alloc(n, 1), *grads[STEPS];
  for (int s = 0; s < STEPS; s++) grads[s] = kt_randn_alloc(n, 2);
  float *p = kt_xmalloc(n * 4), *mom = kt_xmalloc(n * 4);
  memcpy(p, p0, n * 4);
  sgd_steps(kt_be, p, mom, grads, STEPS, n, a);
  double *rp = kt_to_double(p0, n), *rb = calloc(n, 8);
  for (int s = 0; s < STEPS; s++) sgd_ref(rp, rb, grads[s], n, a);
  kt_check("sgd param", p, rp, n, 1e-5);
  if (a->momentum != 0.0f) kt_check("sgd momentum", mom, rb, n, 1e-5);
  if (kt_ref) {
    float *ep = kt_xmalloc(n * 4), *em = kt_xmalloc(n * 4);
    memcpy(ep, p0, n * 4);
    sgd_steps(kt_ref, ep, em, grads, STEPS, n, a);
    kt_check_backend("sgd param", p, ep, n);
    free(ep), free(em);
  }
  for (int s = 0; s < STEPS; s++) free(grads[s]);
  free(p0), free(p), free(mom), free(rp), free(rb);
}

void test_sgd(void **state) {
  (void)state;
  kt_seed(51);
  gt_sgd_args plain = {.lr = 0.1f, .momentum = 0, .weight_decay = 0.01f, .grad_scale = 0.5f};
  gt_sgd_args heavy = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0, .grad_scale = 1};
  gt_sgd_args nest = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true,
                      .grad_scale = 0.25f};
  size_t sizes[] = {1, 37, 20011};
  for (int i = 0; i < 3; i++) {
    check_sgd(sizes[i], &plain);
    check_sgd(sizes[i], &heavy);
    check_sgd(sizes[i], &nest);
  }
  float *buf = kt_dput(kt_be, NULL, 16);
  assert_int_equal(gt_op_sgd_update(kt_be, buf, buf, NULL, 4, &heavy), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "momentum"));
  kt_dfree(kt_be, buf);
}
