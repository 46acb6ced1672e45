/* Pipeline schedules: exact step lists for small cases, the checker on every
 * schedule of p <= 8, m <= 16, v <= 4 and on broken ones, and simulated
 * bubbles and in-flight peaks against the closed forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "giant/engine/pipeline.h"

/* A rank's steps as text: "F0 F1 B0 ..." (chunk as ".c" when interleaved). */
static void steps_text(const gt_pp_schedule *s, int r, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < s->nsteps[r]; i++) {
    gt_pp_step t = s->steps[r][i];
    at += (size_t)snprintf(buf + at, n - at, i ? " %c%d" : "%c%d", t.op == GT_PP_FORWARD ? 'F' : 'B', t.micro_batch);
    if (s->chunks > 1) at += (size_t)snprintf(buf + at, n - at, ".%d", t.chunk);
  }
}

static void expect_steps(gt_pp_kind kind, int p, int m, int v, int r, const char *want) {
  gt_pp_schedule *s;
  OK(gt_pp_schedule_build(kind, p, m, v, &s));
  char got[1024];
  steps_text(s, r, got, sizeof got);
  if (strcmp(got, want))
    fail_msg("%s p=%d m=%d v=%d rank %d: got '%s', want '%s'", gt_pp_name(kind), p, m, v, r, got, want);
  gt_pp_schedule_free(s);
}

static void test_step_lists(void **state) {
  (void)state;
  expect_steps(GT_PP_GPIPE, 3, 3, 1, 1, "F0 F1 F2 B0 B1 B2");
  expect_steps(GT_PP_1F1B, 4, 6, 1, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  expect_steps(GT_PP_1F1B, 4, 6, 1, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  expect_steps(GT_PP_1F1B, 4, 6, 1, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  expect_steps(GT_PP_1F1B, 4, 2, 1, 0, "F0 F1 B0 B1"); /* warm-up capped at m */
  /* Megatron's order for p=2, m=4, v=2, rank 0: warm-up 2*(2-0-1) + (2-1)*2 = 4
   * forwards (micro-batches 0,1 through chunk 0, then chunk 1), then 1F1B,
   * backwards through chunk 1 first. */
  expect_steps(GT_PP_INTERLEAVED, 2, 4, 2, 0,
               "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  expect_steps(GT_PP_INTERLEAVED, 2, 4, 2, 1,
               "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  /* One chunk: interleaved is 1F1B. */
  expect_steps(GT_PP_INTERLEAVED, 4, 8, 1, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  gt_pp_schedule *s;
  OK(gt_pp_schedule_build(GT_PP_INTERLEAVED, 4, 8, 3, &s));
  assert_int_equal(gt_pp_virtual_stage(s, 1, 0), 1);
  assert_int_equal(gt_pp_virtual_stage(s, 1, 2), 9);
  gt_pp_schedule_free(s);
}

static void test_every_schedule_checks(void **state) {
  (void)state;
  int built = 0;
  for (int k = 0; k < 3; k++)
    for (int p = 1; p <= 8; p++)
      for (int m = 1; m <= 16; m++)
        for (int v = 1; v <= 4; v++) {
          if (k != GT_PP_INTERLEAVED && v > 1) continue;
          gt_pp_schedule *s;
          gt_status st = gt_pp_schedule_build((gt_pp_kind)k, p, m, v, &s);
          if (k == GT_PP_INTERLEAVED && m % p) {
            expect_error(st, GT_EINVAL, "multiple of the pipeline stages");
            continue;
          }
          OK(st);
          OK(gt_pp_schedule_check(s));
          gt_pp_schedule_free(s);
          built++;
        }
  /* gpipe and 1f1b: 8*16 each; interleaved: 4 chunks x sum over p of 16/p. */
  assert_int_equal(built, 2 * 128 + 4 * (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2));
}

static void test_checker_finds_broken_schedules(void **state) {
  (void)state;
  gt_pp_schedule *s;
  /* 1F1B p=3 m=4, rank 0: F0 F1 F2 B0 F3 B1 B2 B3; swap F0 and B0. */
  OK(gt_pp_schedule_build(GT_PP_1F1B, 3, 4, 1, &s));
  gt_pp_step keep = s->steps[0][0];
  s->steps[0][0] = s->steps[0][3];
  s->steps[0][3] = keep;
  expect_error(gt_pp_schedule_check(s), GT_EINVAL, "comes before its forward");
  gt_pp_schedule_free(s);

  /* Rank 1: F0 F1 B0 ...; its F1 made a second F0, then out of range. */
  OK(gt_pp_schedule_build(GT_PP_1F1B, 3, 4, 1, &s));
  s->steps[1][1].micro_batch = 0;
  expect_error(gt_pp_schedule_check(s), GT_EINVAL, "appears twice");
  s->steps[1][1].micro_batch = 9;
  expect_error(gt_pp_schedule_check(s), GT_EINVAL, "out of range");
  gt_pp_schedule_free(s);

  /* GPipe p=3 m=2 with rank 1 reordered to F1 B1 F0 B0: rank 2 (F0 F1 B0
   * B1) needs rank 1's F0, which follows rank 1's B1, which needs rank 2's
   * B1, which follows rank 2's F0: a cycle. */
  OK(gt_pp_schedule_build(GT_PP_GPIPE, 3, 2, 1, &s));
  gt_pp_step *r1 = s->steps[1];
  r1[0] = (gt_pp_step){GT_PP_FORWARD, 1, 0};
  r1[1] = (gt_pp_step){GT_PP_BACKWARD, 1, 0};
  r1[2] = (gt_pp_step){GT_PP_FORWARD, 0, 0};
  r1[3] = (gt_pp_step){GT_PP_BACKWARD, 0, 0};
  expect_error(gt_pp_schedule_check(s), GT_ESTATE, "deadlocks");
  gt_pp_schedule_free(s);

  OK(gt_pp_schedule_build(GT_PP_GPIPE, 2, 2, 1, &s));
  s->nsteps[1] = 3;
  expect_error(gt_pp_schedule_check(s), GT_EINVAL, "expected 4");
  gt_pp_schedule_free(s);
  expect_error(gt_pp_schedule_check(NULL), GT_EINVAL, "not a pipeline schedule");
}

static void test_bad_arguments(void **state) {
  (void)state;
  gt_pp_schedule *s = (gt_pp_schedule *)&s;
  expect_error(gt_pp_schedule_build(GT_PP_1F1B, 0, 4, 1, &s), GT_EINVAL, ">= 1");
  assert_null(s);
  expect_error(gt_pp_schedule_build(GT_PP_1F1B, 2, 0, 1, &s), GT_EINVAL, ">= 1");
  expect_error(gt_pp_schedule_build(GT_PP_GPIPE, 2, 4, 0, &s), GT_EINVAL, ">= 1");
  expect_error(gt_pp_schedule_build(GT_PP_1F1B, 2, 4, 2, &s), GT_EINVAL, "needs the interleaved schedule");
  expect_error(gt_pp_schedule_build(GT_PP_INTERLEAVED, 4, 6, 2, &s), GT_EINVAL, "use 4 or 8 micro-batches");
  expect_error(gt_pp_schedule_build((gt_pp_kind)7, 2, 4, 1, &s), GT_EINVAL, "unknown");
  gt_pp_kind k;
  OK(gt_pp_parse("interleaved", &k));
  assert_int_equal(k, GT_PP_INTERLEAVED);
  OK(gt_pp_parse("1f1b", &k));
  assert_int_equal(k, GT_PP_1F1B);
  expect_error(gt_pp_parse("1F1B-x", &k), GT_EINVAL, "use gpipe, 1f1b or interleaved");
  expect_error(gt_pp_parse(NULL, &k), GT_EINVAL, "unknown");

  OK(gt_pp_schedule_build(GT_PP_1F1B, 2, 2, 1, &s));
  double ok[2] = {1, 1}, bad[2] = {1, -1}, nan_[2] = {NAN, 1};
  gt_pp_sim_result r;
  expect_error(gt_pp_simulate(s, &(gt_pp_costs){.fwd = ok, .bwd = bad}, &r), GT_EINVAL, "non-finite");
  expect_error(gt_pp_simulate(s, &(gt_pp_costs){.fwd = nan_, .bwd = ok}, &r), GT_EINVAL, "non-finite");
  expect_error(gt_pp_simulate(s, &(gt_pp_costs){.fwd = ok, .bwd = ok, .p2p_seconds = -1}, &r), GT_EINVAL, "p2p");
  expect_error(gt_pp_simulate(s, &(gt_pp_costs){.fwd = ok}, &r), GT_EINVAL, "backward times");
  gt_pp_schedule_free(s);
}

static gt_pp_sim_result simulate(gt_pp_kind k, int p, int m, int v, double tf, double tb, double p2p) {
  gt_pp_schedule *s;
  OK(gt_pp_schedule_build(k, p, m, v, &s));
  double f[64], b[64], a[64];
  for (int i = 0; i < p * v; i++) {
    f[i] = tf / v;
    b[i] = tb / v;
    a[i] = 1000.0 * (i + 1);
  }
  gt_pp_sim_result r;
  OK(gt_pp_simulate(s, &(gt_pp_costs){.fwd = f, .bwd = b, .p2p_seconds = p2p, .act_bytes = a}, &r));
  gt_pp_schedule_free(s);
  return r;
}

/* Equal stages, forward t_f and backward t_b per rank (split over v chunks):
 *   GPipe and 1F1B: makespan (m+p-1)(t_f+t_b), bubble (p-1)/(m+p-1);
 *   interleaved:     makespan (m + (p-1)/v)(t_f+t_b), bubble (p-1)/(v m + p - 1),
 * i.e. Megatron's bubble-to-ideal ratio (p-1)/(v m). Peaks on rank 0:
 * GPipe m, 1F1B min(p, m), interleaved (Megatron's warm-up + 1)
 * (micro-batch, chunk) units: min(2(p-1) + (v-1)p + 1, v m), or v m when m == p. */
static void test_bubbles_and_peaks(void **state) {
  (void)state;
  const int ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 4, 5, 8, 16};
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
    for (size_t j = 0; j < sizeof ms / sizeof *ms; j++) {
      int p = ps[i], m = ms[j];
      double want = (double)(p - 1) / (m + p - 1);
      for (int k = 0; k < 2; k++) {
        gt_pp_sim_result r = simulate((gt_pp_kind)k, p, m, 1, 1.0, 2.0, 0);
        NEAR(r.bubble, want, 1e-12);
        NEAR(r.makespan, (m + p - 1) * 3.0, 1e-9);
        assert_int_equal(r.peak_in_flight[0], k == GT_PP_GPIPE ? m : (p < m ? p : m));
        for (int q = 0; q < p; q++) {
          NEAR(r.busy[q], 3.0 * m, 1e-9);
          int lim = k == GT_PP_GPIPE ? m : (p - q < m ? p - q : m);
          assert_int_equal(r.peak_in_flight[q], lim);
          NEAR(r.peak_act_bytes[q], lim * 1000.0 * (q + 1), 1e-6);
        }
        gt_pp_sim_free(&r);
      }
      if (m % p) continue;
      for (int v = 1; v <= 4; v++) {
        gt_pp_sim_result r = simulate(GT_PP_INTERLEAVED, p, m, v, 1.0, 2.0, 0);
        NEAR(r.bubble, (double)(p - 1) / (v * m + p - 1), 1e-12);
        NEAR(r.makespan, (m + (double)(p - 1) / v) * 3.0, 1e-9);
        int warm = 2 * (p - 1) + (v - 1) * p + 1;
        int peak = v == 1 ? (p < m ? p : m) : m == p ? v * m : (warm < v * m ? warm : v * m);
        assert_int_equal(r.peak_in_flight[0], peak);
        gt_pp_sim_free(&r);
      }
    }
}

/* Uneven stages and a p2p delay d, 1F1B, p=2, m=3, forward (1, 3) and
 * backward (2, 6) per stage: rank 1, the slow one, starts at 1 + d and then
 * never waits (27 s of work); rank 0's last backward follows it after d. */
static void test_uneven_with_latency(void **state) {
  (void)state;
  gt_pp_schedule *s;
  OK(gt_pp_schedule_build(GT_PP_1F1B, 2, 3, 1, &s));
  double f[2] = {1, 3}, b[2] = {2, 6}, d = 0.5;
  gt_pp_sim_result r;
  OK(gt_pp_simulate(s, &(gt_pp_costs){.fwd = f, .bwd = b, .p2p_seconds = d}, &r));
  NEAR(r.makespan, 1 + d + 27 + d + 2, 1e-12);
  NEAR(r.busy[0], 9, 1e-12);
  NEAR(r.busy[1], 27, 1e-12);
  NEAR(r.bubble, 1 - 36 / (2 * r.makespan), 1e-12);
  gt_pp_sim_free(&r);
  gt_pp_schedule_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_step_lists),
      cmocka_unit_test(test_every_schedule_checks),
      cmocka_unit_test(test_checker_finds_broken_schedules),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_bubbles_and_peaks),
      cmocka_unit_test(test_uneven_with_latency),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
