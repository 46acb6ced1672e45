/* AdamW and SGD against scalar references of PyTorch's update rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"
#include "core/backend_engine.h"

typedef struct {
  float *p, *m, *v; /* device state */
  float *g;
} opt_dev;

static void adamw_ref(double *p, double *m, double *v, const float *g, size_t n, const gt_adamw_args *a) {
  double bc1 = 1 - pow(a->beta1, a->step), bc2 = 1 - pow(a->beta2, a->step);
  for (size_t i = 0; i < n; i++) {
    double gi = (double)g[i] * a->grad_scale;
    p[i] *= 1 - (double)a->lr * a->weight_decay;
    m[i] = a->beta1 * m[i] + (1 - (double)a->beta1) * gi;
    v[i] = a->beta2 * v[i] + (1 - (double)a->beta2) * gi * gi;
    p[i] -= a->lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + a->eps);
  }
}

static void adamw_steps(gt_backend *be, float *p, float *m, float *v, float **grads, int steps, size_t n,
                        const gt_adamw_args *a0) {
  opt_dev d = {kt_dput(be, p, n * 4), kt_dput(be, NULL, n * 4), kt_dput(be, NULL, n * 4), kt_dput(be, NULL, n * 4)};
  for (int s = 1; s <= steps; s++) {
    gt_adamw_args a = *a0;
    a.step = s;
    KT_OK(gt_backend_upload(be, d.g, grads[s - 1], n * 4));
    KT_OK(gt_op_adamw_update(be, d.p, d.g, d.m, d.v, n, &a));
  }
  kt_dget(be, p, d.p, n * 4);
  kt_dget(be, m, d.m, n * 4);
  kt_dget(be, v, d.v, n * 4);
  kt_dfree(be, d.p);
  kt_dfree(be, d.m);
  kt_dfree(be, d.v);
  kt_dfree(be, d.g);
}

static void check_adamw(size_t n) {
  enum { STEPS = 3 };
  gt_adamw_args a = {
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f};
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
    free(ep);
    free(em);
    free(ev);
  }
  for (int s = 0; s < STEPS; s++) free(grads[s]);
  free(p0);
  free(p);
  free(m);
  free(v);
  free(rp);
  free(rm);
  free(rv);
}

void test_adamw(void **state) {
  (void)state;
  kt_seed(50);
  check_adamw(1);
  check_adamw(37);
  check_adamw(20011);
  float *buf = kt_dput(kt_be, NULL, 16);
  gt_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0, .grad_scale = 1};
  assert_int_equal(gt_op_adamw_update(kt_be, buf, buf, buf, buf, 4, &a), GT_EINVAL);
  kt_dfree(kt_be, buf);
}

/* AdamW exactly as the CPU kernel computes it: the factors in double,
 * rounded once to float, then each element in the kernel's expression
 * order, in float. This file is compiled in ISO C mode, where GCC does not
 * fuse multiply-adds, so each operation rounds on its own. */
static void adamw_ref_exact(float *p, float *m, float *v, uint16_t *p16, const float *grad, size_t n,
                            const gt_adamw_args *a) {
  float decay = 1.0f - a->lr * a->weight_decay;
  float b1 = a->beta1, b2 = a->beta2, gs = a->grad_scale, eps = a->eps;
  float step_size = (float)(a->lr / (1.0 - pow(a->beta1, a->step)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, a->step));
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * mi / denom;
    p16[i] = gt_f32_to_bf16(p[i]);
  }
}

static void expect_same_bf16(const char *what, const uint16_t *got, const uint16_t *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("%s[%zu]: got 0x%04x, want 0x%04x", what, i, got[i], want[i]);
}

/* adamw_update and adamw_update_bf16 side by side over five steps. On the
 * CPU both must give the reference's bits at whatever instruction-set level
 * runs (the suite runs once per level), so a trainer's results do not
 * depend on the CPU it lands on; elsewhere, they match each other bit for
 * bit and the CPU backend within tolerance. The copy is always the
 * backend's own f32_to_bf16 of the new parameters. */
static void check_adamw_bf16(size_t n) {
  enum { STEPS = 5 };
  gt_adamw_args a = {
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.37f};
  float *p0 = kt_randn_alloc(n, 1), *grads[STEPS];
  for (int s = 0; s < STEPS; s++) grads[s] = kt_randn_alloc(n, 3);
  size_t fb = n * sizeof(float), hb = n * sizeof(uint16_t);
  float *dp = kt_dput(kt_be, p0, fb), *dm = kt_dput(kt_be, NULL, fb), *dv = kt_dput(kt_be, NULL, fb);
  float *ep = kt_dput(kt_be, p0, fb), *em = kt_dput(kt_be, NULL, fb), *ev = kt_dput(kt_be, NULL, fb);
  float *dg = kt_dput(kt_be, NULL, fb);
  uint16_t *d16 = kt_dput(kt_be, NULL, hb), *dconv = kt_dput(kt_be, NULL, hb);
  float *rp = kt_xmalloc(fb), *rm = calloc(n, 4), *rv = calloc(n, 4);
  uint16_t *r16 = kt_xmalloc(hb);
  memcpy(rp, p0, fb);
  float *got = kt_xmalloc(fb), *other = kt_xmalloc(fb);
  uint16_t *got16 = kt_xmalloc(hb), *conv16 = kt_xmalloc(hb);
  for (int s = 1; s <= STEPS; s++) {
    a.step = s;
    KT_OK(gt_backend_upload(kt_be, dg, grads[s - 1], fb));
    KT_OK(gt_op_adamw_update_bf16(kt_be, dp, dg, dm, dv, d16, n, &a));
    KT_OK(gt_op_adamw_update(kt_be, ep, dg, em, ev, n, &a));
    adamw_ref_exact(rp, rm, rv, r16, grads[s - 1], n, &a);
  }
  KT_OK(gt_op_f32_to_bf16(kt_be, dconv, dp, n));
  kt_dget(kt_be, got16, d16, hb);
  kt_dget(kt_be, conv16, dconv, hb);
  expect_same_bf16("adamw_update_bf16 copy vs f32_to_bf16", got16, conv16, n);
  float *dev[] = {dp, dm, dv}, *plain[] = {ep, em, ev}, *ref[] = {rp, rm, rv};
  const char *names[] = {"param", "m", "v"};
  for (int k = 0; k < 3; k++) {
    char what[96];
    kt_dget(kt_be, got, dev[k], fb);
    kt_dget(kt_be, other, plain[k], fb);
    snprintf(what, sizeof what, "adamw_update_bf16 %s vs adamw_update (n=%zu)", names[k], n);
    kt_check_exact(what, got, other, n);
    snprintf(what, sizeof what, "adamw_update_bf16 %s vs the exact reference (n=%zu)", names[k], n);
    if (kt_ref)
      kt_check_backend(what, got, ref[k], n);
    else
      kt_check_exact(what, got, ref[k], n);
  }
  if (!kt_ref) expect_same_bf16("adamw_update_bf16 copy vs the exact reference", got16, r16, n);
  float *all[] = {dp, dm, dv, ep, em, ev, dg};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kt_dfree(kt_be, all[i]);
  kt_dfree(kt_be, d16);
  kt_dfree(kt_be, dconv);
  for (int s = 0; s < STEPS; s++) free(grads[s]);
  free(p0);
  free(rp);
  free(rm);
  free(rv);
  free(r16);
  free(got);
  free(other);
  free(got16);
  free(conv16);
}

void test_adamw_bf16(void **state) {
  (void)state;
  kt_seed(52);
  /* Tails shorter than any vector, and a length whose thread shares and
   * vector tails are all uneven. */
  size_t sizes[] = {1, 7, 17, 1000003};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) check_adamw_bf16(sizes[i]);
  float *buf = kt_dput(kt_be, NULL, 16);
  gt_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1, .grad_scale = 1};
  assert_int_equal(gt_op_adamw_update_bf16(kt_be, buf, buf, buf, buf, NULL, 4, &a), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "param_bf16"));
  a.step = 0;
  assert_int_equal(gt_op_adamw_update_bf16(kt_be, buf, buf, buf, buf, (uint16_t *)buf, 4, &a), GT_EINVAL);
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

static void sgd_steps(gt_backend *be, float *p, float *mom, float **grads, int steps, size_t n, const gt_sgd_args *a) {
  float *dp = kt_dput(be, p, n * 4), *dg = kt_dput(be, NULL, n * 4);
  float *dm = a->momentum != 0.0f ? kt_dput(be, NULL, n * 4) : NULL;
  for (int s = 0; s < steps; s++) {
    KT_OK(gt_backend_upload(be, dg, grads[s], n * 4));
    KT_OK(gt_op_sgd_update(be, dp, dg, dm, n, a));
  }
  kt_dget(be, p, dp, n * 4);
  if (dm) {
    kt_dget(be, mom, dm, n * 4);
    kt_dfree(be, dm);
  }
  kt_dfree(be, dp);
  kt_dfree(be, dg);
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
    free(ep);
    free(em);
  }
  for (int s = 0; s < STEPS; s++) free(grads[s]);
  free(p0);
  free(p);
  free(mom);
  free(rp);
  free(rb);
}

void test_sgd(void **state) {
  (void)state;
  kt_seed(51);
  gt_sgd_args plain = {.lr = 0.1f, .momentum = 0, .weight_decay = 0.01f, .grad_scale = 0.5f};
  gt_sgd_args heavy = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0, .grad_scale = 1};
  gt_sgd_args nest = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true, .grad_scale = 0.25f};
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
