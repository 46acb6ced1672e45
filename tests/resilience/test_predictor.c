/* The predictor on workloads with known costs: it starts from the cost
 * model's prior, learns a rank's true coefficients, follows a change, and
 * tells a long batch from a slow rank through its peers' fits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "common/gt_test.h"
#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "giant/engine/predictor.h"

/* Rank r's step of B rows of length T over 5 layers. */
static gt_step_telemetry work(int rank, int T, double seconds) {
  return (gt_step_telemetry){
      .rank = rank, .layers = 5, .micro_batches = 1, .tokens = 16 * T, .seq_sq = 16.0 * T * T, .compute_s = seconds};
}

/* The cost a rank "really" has: a per token, b per seq_sq*layer, c per step. */
static double truth(const gt_step_telemetry *w, double a, double b, double c) {
  return a * w->tokens + b * w->seq_sq * w->layers + c;
}

static void test_prior_from_model(void **state) {
  (void)state;
  gt_backend *be;
  gt_model *m;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = 64, .seed = 1}, &m));
  OK(gpt_add_layers(m, &(gpt_config){.vocab_size = 64, .T_max = 64, .C = 32, .NH = 2, .L = 2, .tie_weights = true}));
  OK(gt_model_build(m));
  gt_predictor_prior pr;
  OK(gt_predictor_prior_from_model(m, 5, 1e9, &pr));
  /* The prior reproduces the cost model: three forwards' FLOPs over the peak. */
  for (int T = 8; T <= 64; T *= 2) {
    gt_step_telemetry w = {.layers = 5, .tokens = 2 * T, .seq_sq = 2.0 * T * T};
    NEAR(pr.a * w.tokens + pr.b * w.seq_sq * 5 + pr.c, 3 * gt_model_flops(m, 2, T) / 1e9, 1e-12);
  }
  assert_true(pr.b > 0);
  expect_error(gt_predictor_prior_from_model(m, 5, 0, &pr), GT_EINVAL, "peak FLOP/s must be > 0");
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

static void test_learns(void **state) {
  (void)state;
  const double a = 2e-5, b = 3e-8, c = 4e-3;
  gt_predictor *p;
  /* A prior 2.5 times too fast, with no fixed cost: a GPU at 40% of peak. */
  OK(gt_predictor_create(&(gt_predictor_config){.nranks = 2, .prior = {.a = a / 2.5, .b = b / 2.5}}, &p));
  gt_step_telemetry w0 = work(0, 100, 0);
  NEAR(gt_predictor_own(p, &w0), truth(&w0, a / 2.5, b / 2.5, 0), 1e-15); /* predicts from step 1 */
  for (int s = 0; s < 150; s++) {
    gt_step_telemetry w = work(0, 32 + (s * 37) % 480, 0);
    w.compute_s = truth(&w, a, b, c);
    OK(gt_predictor_update(p, &w));
  }
  assert_int_equal(gt_predictor_updates(p, 0), 150);
  for (int T = 16; T <= 1024; T *= 4) { /* lengths it never saw, too */
    gt_step_telemetry w = work(0, T, 0);
    NEAR(gt_predictor_own(p, &w) / truth(&w, a, b, c), 1, 0.01);
  }
  /* Rank 1 never learnt: its own prediction is still the prior, while its
   * peers' fits (rank 0's) already know the device. */
  gt_step_telemetry w1 = work(1, 300, 0);
  NEAR(gt_predictor_own(p, &w1), truth(&w1, a / 2.5, b / 2.5, 0), 1e-15);
  NEAR(gt_predictor_peers(p, &w1) / truth(&w1, a, b, c), 1, 0.01);
  /* Rank 1's work under rank 0's fit; no fit of rank 1's to use yet. */
  NEAR(gt_predictor_with(p, 0, &w1), gt_predictor_peers(p, &w1), 1e-15);
  assert_true(isnan(gt_predictor_with(p, 1, &w1)));
  assert_true(isnan(gt_predictor_with(p, 2, &w1)));
  /* The device becomes twice as slow: forgetting follows it. */
  for (int s = 0; s < 200; s++) {
    gt_step_telemetry w = work(0, 32 + (s * 37) % 480, 0);
    w.compute_s = 2 * truth(&w, a, b, c);
    OK(gt_predictor_update(p, &w));
  }
  NEAR(gt_predictor_own(p, &w0) / truth(&w0, a, b, c), 2, 0.05);
  gt_predictor_destroy(p);
}

static void test_bad_input(void **state) {
  (void)state;
  gt_predictor *p;
  expect_error(gt_predictor_create(&(gt_predictor_config){.nranks = 0, .prior = {.a = 1}}, &p), GT_EINVAL,
               "nranks must be >= 1");
  expect_error(gt_predictor_create(&(gt_predictor_config){.nranks = 1}, &p), GT_EINVAL, "not all 0");
  expect_error(gt_predictor_create(&(gt_predictor_config){.nranks = 1, .prior = {.a = 1}, .forget = 1.5}, &p),
               GT_EINVAL, "forget must be in (0, 1]");
  OK(gt_predictor_create(&(gt_predictor_config){.nranks = 1, .prior = {.a = 1}}, &p));
  gt_step_telemetry w = work(3, 10, 1);
  expect_error(gt_predictor_update(p, &w), GT_EINVAL, "rank 3 is outside the job's 1 ranks");
  w = work(0, 10, -1);
  expect_error(gt_predictor_update(p, &w), GT_EINVAL, "is not a time");
  assert_true(isnan(gt_predictor_peers(p, &w))); /* one rank has no peers */
  gt_predictor_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prior_from_model),
      cmocka_unit_test(test_learns),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
