/* Training on CUDA against training on the CPU: the example GPT from one
 * seed, AdamW, the same fixed batches, compared step by step through the
 * loss curve, in fp32 and in mixed bf16 precision. Skipped (77) without a
 * GPU.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

enum { V = 64, T = 16, B = 4, C = 32, NH = 4, L = 2, STEPS = 20, NBATCH = 2 };

/* fp32, CPU vs CUDA: both backends run the same operations on the same
 * numbers and differ only in the order of fp32 summations (cuBLAS tiles vs
 * OpenBLAS, block reductions vs loops), a relative rounding difference of
 * about 1e-6 per reduction. Twenty AdamW steps of a model this small carry
 * that to well under 1e-4 of the loss (perturbing every parameter by a
 * relative 1e-6 before each step moves this curve by about 3e-6); more
 * than that means a kernel computes something else. */
#define TOL_FP32 1e-4
/* bf16, CPU vs CUDA: products of bf16 values are exact in fp32, so both
 * accumulate identical operands in fp32 and again differ in summation
 * order; on top of that an activation that lands within rounding error of
 * a bf16 rounding boundary may round to neighbouring bf16 values (2^-8
 * apart) on the two backends. Those are isolated elements and average out
 * in the loss (the same perturbation as above moves the bf16 curve by
 * about 4e-4): 2e-3 leaves room for them, while a wrong transpose, a lost
 * bias or an fp32 product would change the loss far more. */
#define TOL_BF16 2e-3
/* bf16 vs fp32 on one backend: the bf16 rounding of weights and
 * activations (relative 2^-9) changes every product slightly; over twenty
 * steps the curves must still agree to a few percent while both fall (on
 * the CPU they differ by about 3e-3). */
#define TOL_MIXED 5e-2

static gt_backend *cpu, *gpu;
static int32_t tok[NBATCH][B * T + 1];

static void tokens(int32_t *t, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = (int32_t)((seed >> 33) % (uint64_t)V);
  }
}

/* Trains a fresh model on be for STEPS steps in precision p, cycling over
 * the fixed batches, and writes the loss of each step. *init receives the
 * initial parameters (malloc'd, *n_init floats) when init is not NULL. */
static void train(gt_backend *be, gt_precision p, float *losses, float **init, size_t *n_init) {
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 4321};
  gt_model *m;
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  if (init) {
    *n_init = gt_model_buffer_floats(m);
    *init = malloc(*n_init * sizeof(float));
    assert_non_null(*init);
    OK(gt_model_get_params(m, *init, *n_init));
  }
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .precision = p,
                          .schedule = {.lr_max = 1e-2f, .lr_min = 1e-3f, .warmup = 2, .total = STEPS}};
  gt_trainer *t;
  OK(gt_trainer_create(m, &tc, &t));
  assert_int_equal(gt_model_get_precision(m), p); /* the trainer's setting reached the model */
  for (int s = 0; s < STEPS; s++) {
    int32_t *x = tok[s % NBATCH];
    gt_batch b = {.B = B, .T = T, .inputs = x, .targets = x + 1};
    gt_step_stats st;
    OK(gt_trainer_step_batches(t, &b, 1, &st));
    assert_true(isfinite(st.loss));
    losses[s] = st.loss;
  }
  gt_trainer_destroy(t);
  gt_model_destroy(m);
}

/* Largest per-step |a - b| / |b|, with both curves printed when over tol. */
static double compare(const char *what, const float *a, const float *b, double tol) {
  double worst = 0;
  int at = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs((double)a[s] - b[s]) / fabs((double)b[s]);
    if (d > worst) {
      worst = d;
      at = s;
    }
  }
  print_message("%s: loss %.5f -> %.5f, worst relative difference %.2e at step %d (tolerance %.0e)\n", what, b[0],
                b[STEPS - 1], worst, at, tol);
  if (!(worst <= tol)) {
    for (int s = 0; s < STEPS; s++) print_message("  step %2d: %.7f vs %.7f\n", s, a[s], b[s]);
    fail_msg("%s: loss curves differ by %.2e relative at step %d, more than %.0e", what, worst, at, tol);
  }
  return worst;
}

static void test_fp32_cuda_matches_cpu(void **state) {
  (void)state;
  float lc[STEPS], lg[STEPS];
  float *pc, *pg;
  size_t nc, ng;
  train(cpu, GT_PRECISION_FP32, lc, &pc, &nc);
  train(gpu, GT_PRECISION_FP32, lg, &pg, &ng);
  /* Initialisation is a function of the seed alone: both start equal. */
  assert_int_equal(nc, ng);
  assert_memory_equal(pc, pg, nc * sizeof(float));
  free(pc);
  free(pg);
  compare("fp32 cuda vs cpu", lg, lc, TOL_FP32);
  assert_true(lg[STEPS - 1] < lg[0] - 0.1f); /* it learns, so the comparison means something */
}

static void test_bf16_cuda_matches_cpu(void **state) {
  (void)state;
  float lc[STEPS], lg[STEPS];
  train(cpu, GT_PRECISION_BF16, lc, NULL, NULL);
  train(gpu, GT_PRECISION_BF16, lg, NULL, NULL);
  compare("bf16 cuda vs cpu", lg, lc, TOL_BF16);
  assert_true(lg[STEPS - 1] < lg[0] - 0.1f);
}

static void test_bf16_tracks_fp32_on_cuda(void **state) {
  (void)state;
  float l32[STEPS], l16[STEPS];
  train(gpu, GT_PRECISION_FP32, l32, NULL, NULL);
  train(gpu, GT_PRECISION_BF16, l16, NULL, NULL);
  double worst = compare("cuda bf16 vs fp32", l16, l32, TOL_MIXED);
  /* bf16 rounding must show: identical curves would mean the setting was
   * ignored and the products ran in fp32. */
  assert_true(worst > 0.0);
  assert_true(l16[STEPS - 1] < l16[0] - 0.1f);
}

static int setup(void **state) {
  (void)state;
  gt_backend_config cc = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  gt_backend_config gc = {.kind = GT_DEVICE_CUDA, .device = 0};
  if (gt_backend_create(&cc, &cpu) != GT_OK || gt_backend_create(&gc, &gpu) != GT_OK) {
    fprintf(stderr, "test_cuda_train: cannot create the backends: %s\n", gt_last_error());
    gt_backend_destroy(cpu); /* teardown does not run after a failed setup */
    return -1;
  }
  /* Skip the peak measurement: MFU is not under test. */
  gt_backend_set_peak_flops(cpu, 1e9);
  gt_backend_set_peak_flops(gpu, 1e12);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(gpu);
  gt_backend_destroy(cpu);
  return 0;
}

int main(void) {
  char why[256] = "";
  if (!gt_backend_available(GT_DEVICE_CUDA, why, sizeof why)) {
    printf("skipping CUDA training against the CPU: %s\n", why);
    return 77;
  }
  unsetenv("GT_LOCAL_RANK");
  unsetenv("GT_CUDA_TF32"); /* TF32 products would be far outside TOL_FP32 */
  for (int i = 0; i < NBATCH; i++) tokens(tok[i], B * T + 1, 11 + (uint64_t)i);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp32_cuda_matches_cpu),
      cmocka_unit_test(test_bf16_cuda_matches_cpu),
      cmocka_unit_test(test_bf16_tracks_fp32_on_cuda),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
