/* The mitigation ladder (giant/engine/ladder.h) on numbers worked out by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "giant/engine/ladder.h"

static gt_ladder_input base(int dp, int pp, double f) {
  gt_ladder_input in = {
      .dp = dp, .pp = pp, .step_s = 1.0, .slowdown = f, .horizon = 100, .cost_s = {0, 0.01, 0.1, 1.0, 10.0}};
  for (int r = 0; r < 5; r++) in.can[r] = true;
  return in;
}

static void test_rebalance_beats_exclusion_when_rows_can_move(void **state) {
  (void)state;
  gt_ladder_input in = base(4, 1, 4);
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  /* t = 0.25 s; S1: 0.25 * 4 / 3.25; S3 and S4: 0.25 * 4 / 3; no S2 at pp = 1. */
  assert_true(fabs(d.step_s[1] - 0.25 * 4 / 3.25) < 1e-12);
  assert_true(fabs(d.step_s[3] - 0.25 * 4 / 3) < 1e-12);
  assert_true(d.step_s[2] == 0);
  assert_true(fabs(d.total_s[4] - (10 + 100 * 0.25 * 4 / 3)) < 1e-9);
  assert_int_equal(d.rung, GT_LADDER_REBALANCE);
}

static void test_exclusion_without_rebalancing(void **state) {
  (void)state;
  gt_ladder_input in = base(4, 1, 4);
  in.can[GT_LADDER_REBALANCE] = false;
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  assert_int_equal(d.rung, GT_LADDER_EXCLUDE); /* 1 + 33.3 s against 100 s, and S4's 10 s more */
  assert_true(d.step_s[1] == 0);
}

static void test_mild_slowdown_is_left_alone(void **state) {
  (void)state;
  gt_ladder_input in = base(4, 1, 1.1);
  in.can[GT_LADDER_REBALANCE] = false;
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  /* Without the rank: 1/1.1 * 4/3 = 1.21 s, slower than 1 s now. */
  assert_true(d.step_s[3] > 1.0);
  assert_int_equal(d.rung, GT_LADDER_NONE);
}

static void test_transition_cost_over_a_short_horizon(void **state) {
  (void)state;
  gt_ladder_input in = base(4, 1, 2);
  in.can[GT_LADDER_REBALANCE] = false;
  in.horizon = 2;
  in.cost_s[GT_LADDER_EXCLUDE] = 5;
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  assert_int_equal(d.rung, GT_LADDER_NONE); /* 2 s now against 5 + 2 * 0.67 s */
  in.horizon = 100;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  assert_int_equal(d.rung, GT_LADDER_EXCLUDE);
}

static void test_pipeline_only_recuts(void **state) {
  (void)state;
  gt_ladder_input in = base(1, 4, 3);
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  assert_int_equal(d.rung, GT_LADDER_RECUT);
  /* One replica: no rank can be left out, and rows cannot move. */
  assert_true(d.step_s[1] == 0 && d.step_s[3] == 0 && d.step_s[4] == 0);
}

static void test_a_floor_on_shares_favours_exclusion(void **state) {
  (void)state;
  gt_ladder_input in = base(2, 1, 10);
  in.min_share = 0.5; /* the slow replica keeps half an even share at least */
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_OK);
  /* t = 0.1; S1: the slow replica's quarter of the work at 1/10 speed: 0.5 s;
   * S3: 0.1 * 2 = 0.2 s. */
  assert_true(fabs(d.step_s[1] - 0.5) < 1e-12);
  assert_true(fabs(d.step_s[3] - 0.2) < 1e-12);
  assert_int_equal(d.rung, GT_LADDER_EXCLUDE);
}

static void test_bad_input(void **state) {
  (void)state;
  gt_ladder_decision d;
  gt_ladder_input in = base(4, 1, 0.5);
  assert_int_equal(gt_ladder_decide(&in, &d), GT_EINVAL);
  in = base(4, 1, 2);
  in.step_s = NAN;
  assert_int_equal(gt_ladder_decide(&in, &d), GT_EINVAL);
  in = base(0, 1, 2);
  assert_int_equal(gt_ladder_decide(&in, &d), GT_EINVAL);
  assert_string_equal(gt_ladder_rung_name(GT_LADDER_EXCLUDE), "S3 exclude");
}

/* A node's link: 130 ms steps of which 125 ms wait on it (5 ms normally),
 * two of six replicas behind it. */
static gt_ladder_link_input link_base(void) {
  gt_ladder_link_input in = {.dp = 6,
                             .replicas = 2,
                             .step_s = 0.130,
                             .wait_s = 0.125,
                             .wait_base_s = 0.005,
                             .horizon = 100,
                             .cost_s = {0, 0, 0, 0.5, 30}};
  for (int r = 0; r < 5; r++) in.can[r] = true;
  return in;
}

static void test_link_left_out(void **state) {
  (void)state;
  gt_ladder_link_input in = link_base();
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide_link(&in, &d), GT_OK);
  /* Without the wait: 0.130 - 0.120 = 0.010 s, over 4 replicas of 6: 0.015 s. */
  assert_true(fabs(d.step_s[3] - 0.015) < 1e-12);
  assert_true(fabs(d.total_s[3] - (0.5 + 100 * 0.015)) < 1e-9);
  assert_true(d.step_s[1] == 0 && d.step_s[2] == 0); /* moving compute moves no traffic */
  assert_int_equal(d.rung, GT_LADDER_EXCLUDE);
}

static void test_link_not_worth_it(void **state) {
  (void)state;
  gt_ladder_link_input in = link_base();
  in.wait_s = 0.010; /* 5 ms more a step: 0.125 s * 6 / 4 = 0.1875 s without them */
  gt_ladder_decision d;
  assert_int_equal(gt_ladder_decide_link(&in, &d), GT_OK);
  assert_true(fabs(d.step_s[3] - 0.125 * 6 / 4) < 1e-12);
  assert_int_equal(d.rung, GT_LADDER_NONE);
  in = link_base();
  in.horizon = 3; /* the change costs more than three slow steps */
  assert_int_equal(gt_ladder_decide_link(&in, &d), GT_OK);
  assert_int_equal(d.rung, GT_LADDER_NONE);
  in = link_base();
  in.replicas = 6; /* nobody left to train */
  assert_int_equal(gt_ladder_decide_link(&in, &d), GT_OK);
  assert_true(d.step_s[3] == 0);
  assert_int_equal(d.rung, GT_LADDER_NONE);
  in = link_base();
  in.wait_s = NAN;
  assert_int_equal(gt_ladder_decide_link(&in, &d), GT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rebalance_beats_exclusion_when_rows_can_move),
      cmocka_unit_test(test_exclusion_without_rebalancing),
      cmocka_unit_test(test_mild_slowdown_is_left_alone),
      cmocka_unit_test(test_transition_cost_over_a_short_horizon),
      cmocka_unit_test(test_pipeline_only_recuts),
      cmocka_unit_test(test_a_floor_on_shares_favours_exclusion),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_link_left_out),
      cmocka_unit_test(test_link_not_worth_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
