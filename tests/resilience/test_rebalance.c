/* The rebalancing decision on synthetic telemetry: replicas get rows in
 * proportion to their measured speed (a replica at half speed gets a third
 * of two replicas' rows), within the cap, judged by a replica's slowest
 * rank; it switches only when the predicted gain over the horizon pays for
 * the switch, and noise in the measurements does not make it flap. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gt_test.h"
#include "giant/giant.h"
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "resilience/mitigate/rebalance.h"

enum { MAXR = 8, STEPS = 9, T = 32 };

/* nsteps steps of every rank: rank r computes speed[r] rows a second on
 * share[its replica] rows, its time scaled by 1 + noise (a deterministic
 * spread in [-noise, noise]). */
static void synth(const gt_plan *p, const double *speed, const int *share, double noise,
                  gt_step_telemetry tel[STEPS][MAXR]) {
  for (int s = 0; s < STEPS; s++)
    for (int r = 0; r < p->world; r++) {
      gt_grid_coords c;
      OK(gt_grid_coords_of(&p->layout, r, &c));
      int rows = share[c.dp];
      double wobble = noise * sin(1.7 * s + 2.3 * r);
      tel[s][r] = (gt_step_telemetry){.rank = r,
                                      .micro_batches = 1,
                                      .tokens = (int64_t)rows * T,
                                      .seq_sq = (double)rows * T * T,
                                      .compute_s = rows / speed[r] * (1 + wobble)};
    }
}

static gt_plan plan_of(const char *layout, int world) {
  gt_plan p;
  OK(gt_plan_resolve(&(gt_plan_config){.world = world, .layout = layout}, &p));
  return p;
}

/* The decision reads steps of `world` records each, packed. */
static const gt_step_telemetry *pack(const gt_plan *p, gt_step_telemetry tel[STEPS][MAXR],
                                     gt_step_telemetry flat[STEPS * MAXR]) {
  for (int s = 0; s < STEPS; s++)
    for (int r = 0; r < p->world; r++) flat[s * p->world + r] = tel[s][r];
  return flat;
}

static gt_rebalance_decision decide(const gt_plan *p, gt_step_telemetry tel[STEPS][MAXR], const int *shares, int cap,
                                    double transition_s, int *out) {
  gt_rebalance_config cfg = {.cap = cap, .transition_s = transition_s, .horizon = 20};
  gt_rebalance_decision d;
  gt_step_telemetry flat[STEPS * MAXR];
  OK(gt_rebalance_decide(&cfg, p, pack(p, tel, flat), STEPS, shares, out, NULL, &d));
  return d;
}

/* dp=2 at 6 rows each, the second replica at half speed (50 rows/s). */
static const int even6[] = {6, 6};
static gt_plan half_speed_pair(gt_step_telemetry tel[STEPS][MAXR]) {
  gt_plan p = plan_of("dp=2", 2);
  double speed[] = {100, 50};
  synth(&p, speed, even6, 0, tel);
  return p;
}

/* Two replicas, the second at half speed: 12 rows go 8 and 4, and the step
 * falls from 6 rows at half speed to 8 at full, when that pays for the
 * switch. The cap. */
static void test_half_speed_gets_a_third(void **state) {
  (void)state;
  gt_step_telemetry tel[STEPS][MAXR];
  gt_plan p = half_speed_pair(tel);
  int out[2];
  gt_rebalance_decision d = decide(&p, tel, even6, 12, 0.01, out);
  assert_true(d.change);
  assert_int_equal(out[0], 8);
  assert_int_equal(out[1], 4);
  NEAR(d.step_now_s, 6 / 50.0, 1e-12);
  NEAR(d.step_new_s, 8 / 100.0, 1e-12);
  NEAR(d.gain_s, (0.12 - 0.08) * 20 - 0.01, 1e-12);
  /* A switch that cannot pay for itself over the horizon is not made: the
   * gain is 0.04 s a step, 0.8 s over 20 steps. */
  d = decide(&p, tel, even6, 12, 0.9, out);
  assert_false(d.change);
  NEAR(d.gain_s, 0.8 - 0.9, 1e-12);
  assert_int_equal(out[0], 6); /* the current shares come back */
  assert_int_equal(out[1], 6);
  assert_true(decide(&p, tel, even6, 12, 0.7, out).change);
  /* The cap binds: 4 replicas at speeds 8:2:2:1, cap 5 of 16 rows. The
   * fastest takes 5, not its 8; the rest go 5, 4, 2 (or 4, 5, 2): 5 rows at
   * speed 100 is the step, as 2 rows at speed 50 would be 0.04. */
  gt_plan p4 = plan_of("dp=4", 4);
  double s4[] = {400, 100, 100, 50};
  int sh4[] = {4, 4, 4, 4}, o4[4];
  synth(&p4, s4, sh4, 0, tel);
  d = decide(&p4, tel, sh4, 5, 0, o4);
  assert_true(d.change);
  assert_int_equal(o4[0], 5);
  assert_int_equal(o4[1] + o4[2], 9);
  assert_int_equal(o4[3], 2);
  NEAR(d.step_now_s, 4 / 50.0, 1e-12);
  NEAR(d.step_new_s, 5 / 100.0, 1e-12);
}

/* A replica is as fast as its slowest rank: at dp=2,tp=2 one slow tensor-
 * parallel rank slows its whole replica, and pipeline ranks likewise. */
static void test_slowest_rank_of_a_replica(void **state) {
  (void)state;
  const char *layouts[] = {"dp=2,tp=2", "dp=2,pp=2"};
  for (int k = 0; k < 2; k++) {
    gt_plan p = plan_of(layouts[k], 4);
    double speed[4] = {90, 90, 90, 90};
    int shares[] = {6, 6}, out[2];
    for (int r = 0; r < 4; r++) {
      gt_grid_coords c;
      OK(gt_grid_coords_of(&p.layout, r, &c));
      if (c.dp == 1 && (c.tp == 1 || c.pp == 1)) speed[r] = 30; /* one rank of replica 1, a third as fast */
    }
    gt_step_telemetry tel[STEPS][MAXR];
    synth(&p, speed, shares, 0, tel);
    gt_rebalance_decision d = decide(&p, tel, shares, 12, 0, out);
    assert_true(d.change);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[1], 3);
    NEAR(d.step_now_s, 6 / 30.0, 1e-12);
  }
}

/* Noise of +-8% in step times neither moves equal replicas nor moves
 * rebalanced ones back and forth; a single step 5x slower (a hiccup) moves
 * nothing either. */
static void test_no_flapping_on_noise(void **state) {
  (void)state;
  gt_plan p = plan_of("dp=2", 2);
  gt_step_telemetry tel[STEPS][MAXR];
  double equal[] = {100, 100}, half[] = {100, 50};
  int even[] = {8, 8}, balanced[] = {11, 5}, out[2];
  for (int round = 0; round < 20; round++) {
    double jitter[] = {equal[0] * (1 + 0.03 * sin(round)), equal[1] * (1 - 0.03 * sin(round))};
    synth(&p, jitter, even, 0.08, tel);
    assert_false(decide(&p, tel, even, 16, 0, out).change);
    double hj[] = {half[0] * (1 + 0.03 * cos(round)), half[1] * (1 - 0.03 * cos(round))};
    synth(&p, hj, balanced, 0.08, tel);
    assert_false(decide(&p, tel, balanced, 16, 0, out).change);
  }
  synth(&p, equal, even, 0, tel);
  tel[STEPS - 1][1].compute_s *= 5;
  assert_false(decide(&p, tel, even, 16, 0, out).change);
  /* A lasting slowdown (most of the window) does move rows. */
  for (int s = 2; s < STEPS; s++) tel[s][1].compute_s = tel[0][1].compute_s * 2;
  gt_rebalance_decision d = decide(&p, tel, even, 16, 0, out);
  assert_true(d.change);
  assert_true(out[0] > out[1]);
}

static void test_bad_input(void **state) {
  (void)state;
  gt_plan p = plan_of("dp=2", 2);
  gt_step_telemetry tel[STEPS][MAXR] = {{{0}}}, flat[STEPS * MAXR];
  int shares[] = {6, 6}, out[2];
  gt_rebalance_config cfg = {.cap = 12, .horizon = 10};
  gt_rebalance_decision d;
  assert_int_equal(gt_rebalance_decide(&cfg, &p, pack(&p, tel, flat), STEPS, shares, out, NULL, &d), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "rank 0 has no step"));
  double speed[] = {100, 100};
  synth(&p, speed, shares, 0, tel);
  pack(&p, tel, flat);
  cfg.cap = 5;
  assert_int_equal(gt_rebalance_decide(&cfg, &p, flat, STEPS, shares, out, NULL, &d), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "outside 1..5"));
  cfg.cap = 12;
  cfg.horizon = 0;
  assert_int_equal(gt_rebalance_decide(&cfg, &p, flat, STEPS, shares, out, NULL, &d), GT_EINVAL);
  cfg.horizon = 10;
  assert_int_equal(gt_rebalance_decide(&cfg, &p, flat, 0, shares, out, NULL, &d), GT_EINVAL);
  double got[2];
  OK(gt_rebalance_decide(&cfg, &p, flat, STEPS, shares, out, got, &d));
  NEAR(got[0], 100, 1e-9);
  assert_false(d.change);
}

/* The damping's numbers: a switch within the horizon of the one before
 * doubles the decisions the next needs (at most 8x) and adds min_gain to
 * the gain it must promise; quiet for the horizon, it is undamped again. */
static void test_damping_numbers(void **state) {
  (void)state;
  gt_rebalance_damping d;
  gt_rebalance_damping_init(&d, 50);
  assert_int_equal(gt_rebalance_damping_persist(&d, 100, 5), 5);
  NEAR(gt_rebalance_damping_gain(&d, 100, 0.07), 0.07, 1e-12);
  const int steps[] = {100, 120, 130, 140, 150}, persist[] = {5, 10, 20, 40, 40};
  const double gain[] = {0.07, 0.14, 0.21, 0.28, 0.35};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(gt_rebalance_damping_persist(&d, steps[i], 5), persist[i]);
    NEAR(gt_rebalance_damping_gain(&d, steps[i], 0.07), gain[i], 1e-12);
    gt_rebalance_damping_note(&d, steps[i]);
  }
  /* 49 steps after the last switch: still damped; 50: judged afresh. */
  assert_int_equal(gt_rebalance_damping_persist(&d, 199, 2), 16);
  assert_int_equal(gt_rebalance_damping_persist(&d, 200, 2), 2);
  NEAR(gt_rebalance_damping_gain(&d, 200, 0.07), 0.07, 1e-12);
  gt_rebalance_damping_note(&d, 200);
  assert_int_equal(gt_rebalance_damping_persist(&d, 210, 2), 4);
}

/* Agreeing decisions in a row: the same proposal counts up, another
 * starts again at 1, no change resets to 0. */
static void test_agree(void **state) {
  (void)state;
  int proposed[3] = {0}, agreed = 0;
  const int a[3] = {3, 3, 2}, b[3] = {3, 2, 3};
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, a, 3), 1);
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, a, 3), 2);
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, a, 3), 3);
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, b, 3), 1);
  assert_memory_equal(proposed, b, sizeof b);
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, b, 3), 2);
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, false, b, 3), 0);
  assert_int_equal(agreed, 0);
  /* After no change, the same proposal as before starts again at 1. */
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, b, 3), 1);
  /* Only the first n count. */
  const int c[3] = {3, 2, 9};
  assert_int_equal(gt_rebalance_agree(proposed, &agreed, true, c, 2), 2);
}

/* Switches over `steps` steps of a replica whose speed flips between 100
 * and `low` rows/s every `period` steps (a neighbour's load that comes and
 * goes), deciding every step as the workers do: PERSIST agreeing decisions
 * in a row, damped or not. *first: the step of the first switch. */
static int switches(int steps, int period, double low, bool damped, int *first) {
  enum { PERSIST = 5, HORIZON = 50 };
  gt_rebalance_damping d;
  gt_rebalance_damping_init(&d, HORIZON);
  int shares[] = {8, 8}, micro[] = {1, 1}, next[2], proposed[2] = {0, 0}, agreed = 0, n = 0;
  *first = -1;
  for (int step = 0; step < steps; step++) {
    double speed[] = {100, (step / period) % 2 ? 100 : low};
    gt_rebalance_config cfg = {.cap = 16,
                               .transition_s = 0.01,
                               .horizon = HORIZON,
                               .min_gain = damped ? gt_rebalance_damping_gain(&d, step, 0.07) : 0.07};
    gt_rebalance_decision dec;
    OK(gt_rebalance_choose(&cfg, 2, speed, micro, shares, next, &dec));
    gt_rebalance_agree(proposed, &agreed, dec.change, next, 2);
    if (agreed < (damped ? gt_rebalance_damping_persist(&d, step, PERSIST) : PERSIST)) continue;
    memcpy(shares, next, sizeof next);
    agreed = 0;
    n++;
    if (*first < 0) *first = step;
    gt_rebalance_damping_note(&d, step);
  }
  return n;
}

/* A load that comes and goes every 12 steps: undamped, the rows follow
 * every flip (20 switches in 240 steps); damped, the second switch in a
 * row needs 10 agreeing decisions and the third 20, more than a flip
 * lasts, so the rows hold until the horizon has passed quietly: two
 * switches in some 60 steps (8). A lasting slowdown is followed as soon,
 * damped or not, and once. */
static void test_damping_stops_flapping(void **state) {
  (void)state;
  int first, first_damped;
  int undamped = switches(240, 12, 60, false, &first), damped = switches(240, 12, 60, true, &first_damped);
  print_message("a load flipping every 12 steps over 240: %d switches undamped, %d damped\n", undamped, damped);
  assert_true(undamped >= 15);
  assert_true(damped <= undamped / 2);
  assert_int_equal(first_damped, first);
  assert_int_equal(switches(240, 1000, 60, true, &first_damped), 1);
  assert_int_equal(switches(240, 1000, 60, false, &first), 1);
  assert_int_equal(first_damped, first);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_speed_gets_a_third),
      cmocka_unit_test(test_slowest_rank_of_a_replica),
      cmocka_unit_test(test_no_flapping_on_noise),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_damping_numbers),
      cmocka_unit_test(test_damping_stops_flapping),
      cmocka_unit_test(test_agree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
