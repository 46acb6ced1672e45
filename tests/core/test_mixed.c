/* Mixed precision through the model and the trainer: bf16 products track
 * the fp32 ones within bf16's resolution and no closer (so the bf16 path is
 * really taken), the master weights keep updates a bf16 copy would lose,
 * the bf16 copy follows every change of the parameters, training curves
 * agree, fp32 stays available, and the steady state allocates nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

enum { V = 61, T = 16, B = 4, C = 32, NH = 4, L = 2 };

static gt_backend *be;

static int setup(void **state) {
  (void)state;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  if (gt_backend_create(&c, &be) != GT_OK) return -1;
  gt_backend_set_peak_flops(be, 1e9); /* skip the measurement; MFU is not under test here */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

static gt_model *make_model(gt_precision p) {
  gt_model *m;
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 77};
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  OK(gt_model_set_precision(m, p));
  return m;
}

static gt_trainer *make_trainer(gt_model *m, gt_precision p, gt_optim_config oc, float lr, float clip) {
  gt_trainer *t;
  gt_trainer_config tc = {.optim = oc,
                          .grad_clip = clip,
                          .grad_accum = 1,
                          .precision = p,
                          .schedule = {.lr_max = lr, .lr_min = lr, .warmup = 0, .total = 0}};
  OK(gt_trainer_create(m, &tc, &t));
  return t;
}

static int32_t tok[B * T + 64];

static void make_tokens(void) {
  uint64_t s = 9;
  for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((s >> 33) % V);
  }
}

static gt_batch batch(int step) {
  gt_batch b = {.B = B, .T = T, .inputs = tok + step, .targets = tok + step + 1};
  return b;
}

static float *host_buf(const gt_model *m) {
  float *x = malloc(gt_model_buffer_floats(m) * sizeof *x);
  assert_non_null(x);
  return x;
}

/* ||a - b|| / ||b|| over the buffer. */
static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += (a[i] - b[i]) * (double)(a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return sqrt(d / r);
}

/* One forward and backward: the loss and the gradients. */
static float loss_and_grads(gt_model *m, float *grads) {
  gt_acts *a;
  OK(gt_acts_create(m, &a));
  OK(gt_model_zero_grads(m));
  gt_batch b = batch(0);
  float loss;
  OK(gt_model_forward(m, a, &b, &loss));
  OK(gt_model_backward(m, a, 1.0f / (float)(B * T)));
  OK(gt_model_get_grads(m, grads, gt_model_buffer_floats(m)));
  gt_acts_destroy(a);
  return loss;
}

/* The bf16 model's loss and gradients sit within bf16's resolution of the
 * fp32 ones (8 significant bits: 2^-9 relative per rounding, compounded over
 * the layers), and not closer than a tenth of it: were the products still
 * fp32, they would agree to ~1e-7. */
static void test_bf16_tracks_fp32_within_its_resolution(void **state) {
  (void)state;
  gt_model *m32 = make_model(GT_PRECISION_FP32), *m16 = make_model(GT_PRECISION_BF16);
  assert_int_equal(gt_model_get_precision(m16), GT_PRECISION_BF16);
  size_t n = gt_model_buffer_floats(m32);
  float *g32 = host_buf(m32), *g16 = host_buf(m16);
  float l32 = loss_and_grads(m32, g32), l16 = loss_and_grads(m16, g16);
  double dl = fabs(l16 - l32) / l32, dg = rel_diff(g16, g32, n);
  printf("loss fp32 %.7f bf16 %.7f (rel %.2e); gradient rel diff %.2e\n", l32, l16, dl, dg);
  assert_true(dl < 2e-3);
  assert_true(dg < 3e-2);
  assert_true(dg > 2e-4);
  free(g32);
  free(g16);
  gt_model_destroy(m32);
  gt_model_destroy(m16);
}

static float bf16_ulp(float x) {
  uint16_t h = gt_f32_to_bf16(x);
  float lo = gt_bf16_to_f32(h), hi = gt_bf16_to_f32((uint16_t)(h + 1));
  return fabsf(hi - lo);
}

/* A step of plain SGD changes each fp32 master weight by exactly -lr * g,
 * even where that is far below what a bf16 weight can resolve. */
static void test_master_weights_keep_small_updates(void **state) {
  (void)state;
  gt_model *m = make_model(GT_PRECISION_FP32);
  gt_optim_config oc = gt_optim_defaults(GT_OPTIM_SGD);
  oc.momentum = 0.0f;
  oc.weight_decay = 0.0f;
  const float lr = 1e-3f;
  gt_trainer *t = make_trainer(m, GT_PRECISION_BF16, oc, lr, 0.0f);
  assert_int_equal(gt_model_get_precision(m), GT_PRECISION_BF16);
  size_t n = gt_model_buffer_floats(m);
  float *p0 = host_buf(m), *p1 = host_buf(m), *g = host_buf(m);
  OK(gt_model_get_params(m, p0, n));
  gt_batch b = batch(0);
  OK(gt_trainer_step_batches(t, &b, 1, NULL));
  OK(gt_model_get_params(m, p1, n));
  OK(gt_model_get_grads(m, g, n));
  size_t moved = 0, below_bf16 = 0;
  for (size_t i = 0; i < n; i++) {
    /* Within a rounding of the fp32 weight (the kernel may fuse the
     * multiply-add). */
    double want = (double)p0[i] - (double)lr * g[i];
    if (fabs(p1[i] - want) > 1.2e-7 * fmax(fabs(p0[i]), fabs(want)))
      fail_msg("param %zu: %.9g, want %.9g - %g * %.9g", i, p1[i], p0[i], lr, g[i]);
    if (p1[i] == p0[i]) continue;
    moved++;
    if (fabsf(p1[i] - p0[i]) < 0.5f * bf16_ulp(p0[i])) below_bf16++;
  }
  printf("%zu of %zu parameters moved, %zu by less than half a bf16 step\n", moved, n, below_bf16);
  assert_true(moved > n / 2);
  assert_true(below_bf16 > moved / 4);
  free(p0);
  free(p1);
  free(g);
  gt_trainer_destroy(t);
  gt_model_destroy(m);
}

/* The bf16 copy is rebuilt after gt_model_set_params: the forward sees the
 * new weights. */
static void test_bf16_copy_follows_new_params(void **state) {
  (void)state;
  gt_model *m16 = make_model(GT_PRECISION_BF16), *m32 = make_model(GT_PRECISION_FP32);
  size_t n = gt_model_buffer_floats(m16);
  float *p = host_buf(m16);
  gt_acts *a16, *a32;
  OK(gt_acts_create(m16, &a16));
  OK(gt_acts_create(m32, &a32));
  gt_batch b = batch(3);
  float before, after, ref;
  OK(gt_model_forward(m16, a16, &b, &before));
  OK(gt_model_get_params(m16, p, n));
  for (size_t i = 0; i < n; i++) p[i] *= 3.0f; /* sharper logits: a clearly different loss */
  OK(gt_model_set_params(m16, p, n));
  OK(gt_model_set_params(m32, p, n));
  OK(gt_model_forward(m16, a16, &b, &after));
  OK(gt_model_forward(m32, a32, &b, &ref));
  printf("loss before %.6f, after %.6f, fp32 after %.6f\n", before, after, ref);
  assert_true(fabs(after - before) > 0.05);
  NEAR(after, ref, 5e-3 * ref);
  gt_acts_destroy(a16);
  gt_acts_destroy(a32);
  free(p);
  gt_model_destroy(m16);
  gt_model_destroy(m32);
}

/* AdamW writes the bf16 twin in the pass that updates the master weights
 * (no conversion pass is left for the next forward): after each step the
 * twin, read back, is the conversion of the new weights, bit for bit. */
static void test_adamw_writes_the_bf16_twin(void **state) {
  (void)state;
  gt_model *m = make_model(GT_PRECISION_BF16);
  gt_trainer *t = make_trainer(m, GT_PRECISION_BF16, gt_optim_defaults(GT_OPTIM_ADAMW), 1e-3f, 1.0f);
  size_t n = gt_model_buffer_floats(m);
  float *p = host_buf(m);
  uint16_t *twin = malloc(n * sizeof *twin);
  assert_non_null(twin);
  for (int s = 0; s < 3; s++) {
    gt_batch b = batch(s);
    gt_step_stats st;
    OK(gt_trainer_step_batches(t, &b, 1, &st));
    OK(gt_model_get_params(m, p, n));
    uint16_t *dev = gt_model_params_bf16(m);
    assert_non_null(dev);
    OK(gt_backend_download(be, twin, dev, n * sizeof *twin));
    for (size_t i = 0; i < n; i++)
      if (twin[i] != gt_f32_to_bf16(p[i]))
        fail_msg("step %d: twin[%zu] = 0x%04x, want 0x%04x", s, i, twin[i], gt_f32_to_bf16(p[i]));
  }
  free(twin);
  free(p);
  gt_trainer_destroy(t);
  gt_model_destroy(m);
}

/* 40 AdamW steps: the bf16 curve follows the fp32 one and both learn. */
static void test_training_curve_matches_fp32(void **state) {
  (void)state;
  enum { STEPS = 40 };
  float loss[2][STEPS];
  for (int k = 0; k < 2; k++) {
    gt_precision p = k ? GT_PRECISION_BF16 : GT_PRECISION_FP32;
    gt_model *m = make_model(GT_PRECISION_FP32);
    gt_trainer *t = make_trainer(m, p, gt_optim_defaults(GT_OPTIM_ADAMW), 3e-3f, 1.0f);
    for (int s = 0; s < STEPS; s++) {
      gt_batch b = batch(s % 8);
      gt_step_stats st;
      OK(gt_trainer_step_batches(t, &b, 1, &st));
      loss[k][s] = st.loss;
    }
    gt_trainer_destroy(t);
    gt_model_destroy(m);
  }
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(loss[1][s] - loss[0][s]) / loss[0][s];
    if (d > worst) worst = d;
  }
  printf("loss %.4f -> %.4f (fp32), %.4f -> %.4f (bf16); largest relative gap %.2e\n", loss[0][0], loss[0][STEPS - 1],
         loss[1][0], loss[1][STEPS - 1], worst);
  assert_true(worst < 2e-2);
  assert_true(worst > 0); /* the two runs did differ */
  assert_true(loss[1][STEPS - 1] < 0.75f * loss[1][0]);
}

/* Switching back to fp32 gives exactly the fp32 model again. */
static void test_fp32_stays_available(void **state) {
  (void)state;
  gt_model *a = make_model(GT_PRECISION_FP32), *b = make_model(GT_PRECISION_BF16);
  OK(gt_model_set_precision(b, GT_PRECISION_FP32));
  size_t n = gt_model_buffer_floats(a);
  float *ga = host_buf(a), *gb = host_buf(b);
  float la = loss_and_grads(a, ga), lb = loss_and_grads(b, gb);
  assert_true(la == lb);
  assert_memory_equal(ga, gb, n * sizeof *ga);
  free(ga);
  free(gb);
  gt_model_destroy(a);
  gt_model_destroy(b);
}

/* After the first step (which sizes the bf16 scratch), no allocation. */
static void test_steady_state_allocates_nothing(void **state) {
  (void)state;
  gt_model *m = make_model(GT_PRECISION_FP32);
  gt_trainer *t = make_trainer(m, GT_PRECISION_BF16, gt_optim_defaults(GT_OPTIM_ADAMW), 1e-3f, 1.0f);
  gt_batch b = batch(0);
  OK(gt_trainer_step_batches(t, &b, 1, NULL));
  gt_arena *ar = gt_model_arena(m);
  size_t allocs = gt_arena_device_allocs(ar), peak = gt_arena_peak(ar);
  for (int i = 0; i < 3; i++) OK(gt_trainer_step_batches(t, &b, 1, NULL));
  assert_int_equal(gt_arena_device_allocs(ar), allocs);
  assert_int_equal(gt_arena_peak(ar), peak);
  gt_trainer_destroy(t);
  gt_model_destroy(m);
}

static void test_bad_precision(void **state) {
  (void)state;
  gt_precision p;
  expect_error(gt_precision_parse("fp16", &p), GT_EINVAL, "use fp32 or bf16");
  OK(gt_precision_parse("bf16", &p));
  assert_int_equal(p, GT_PRECISION_BF16);
  assert_string_equal(gt_precision_name(GT_PRECISION_FP32), "fp32");
  gt_model *m;
  gt_model_config mc = {.B_max = 1, .T_max = 4, .seed = 1};
  OK(gt_model_create(be, &mc, &m));
  expect_error(gt_model_set_precision(m, GT_PRECISION_BF16), GT_ESTATE, "after gt_model_build");
  gt_model_destroy(m);
  m = make_model(GT_PRECISION_FP32);
  expect_error(gt_model_set_precision(m, (gt_precision)7), GT_EINVAL, "unknown precision");
  gt_trainer *t;
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW), .grad_accum = 1, .precision = (gt_precision)3};
  expect_error(gt_trainer_create(m, &tc, &t), GT_EINVAL, "unknown precision");
  gt_model_destroy(m);
}

/* The CPU's bf16 kernel is chosen from GT_CPU_BF16; a value it does not
 * know stops backend creation with the choices named. */
static void test_cpu_bf16_kernel_choice(void **state) {
  (void)state;
  const char *old = getenv("GT_CPU_BF16");
  char *saved = old ? strdup(old) : NULL;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 1};
  gt_backend *b = NULL;
  setenv("GT_CPU_BF16", "fast", 1);
  expect_error(gt_backend_create(&c, &b), GT_EINVAL, "use auto, amx or widen");
  assert_null(b);
  setenv("GT_CPU_BF16", "widen", 1);
  OK(gt_backend_create(&c, &b));
  gt_backend_destroy(b);
  if (saved)
    setenv("GT_CPU_BF16", saved, 1);
  else
    unsetenv("GT_CPU_BF16");
  free(saved);
}

int main(void) {
  make_tokens();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_tracks_fp32_within_its_resolution),
      cmocka_unit_test(test_master_weights_keep_small_updates),
      cmocka_unit_test(test_bf16_copy_follows_new_params),
      cmocka_unit_test(test_adamw_writes_the_bf16_twin),
      cmocka_unit_test(test_training_curve_matches_fp32),
      cmocka_unit_test(test_fp32_stays_available),
      cmocka_unit_test(test_steady_state_allocates_nothing),
      cmocka_unit_test(test_bad_precision),
      cmocka_unit_test(test_cpu_bf16_kernel_choice),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
