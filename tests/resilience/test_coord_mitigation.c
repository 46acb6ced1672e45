/* Mitigation records (giant/engine/coord.h): the workers' report and the
 * leader's decision survive a round trip as lines and refuse garbage; the
 * decision is gt_rebalance_choose's on the report; a decision is written
 * only under the term that leads, so when a leader is killed the next one
 * (leading within the TTL) writes and the dead one's term is refused; and
 * giant-etcd health shows the leader, its term, the decision and the
 * health records. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "giant/engine/coord.h"
#include "giant/log.h"
#include "resilience/coord_fixture.h"
#include "common/gt_test.h"
#include "resilience/coord/records.h"
#include "resilience/mitigate/decide.h"
#include "resilience/mitigate/rebalance.h"

/* Replica 1 computes at half replica 0's speed, at even shares of 16. */
static gt_mitigation_report slow_report(void) {
  gt_mitigation_report r = {.step = 30,
                            .epoch = 0,
                            .dp = 2,
                            .cap = 16,
                            .urgent = 0,
                            .transition_s = 0.0625,
                            .shares = {8, 8},
                            .micro = {1, 1},
                            .speed = {40, 20}};
  return r;
}

static void test_lines(void **state) {
  (void)state;
  gt_mitigation_report r = slow_report(), rb;
  char line[GT_MITIGATION_LINE_MAX];
  OK(gt_mitigation_report_format(&r, line, sizeof line));
  OK(gt_mitigation_report_parse(line, strlen(line), &rb));
  assert_int_equal(rb.step, 30);
  assert_int_equal(rb.dp, 2);
  assert_int_equal(rb.cap, 16);
  assert_int_equal(rb.shares[1], 8);
  NEAR(rb.speed[1], 20, 1e-9);
  NEAR(rb.transition_s, 0.0625, 1e-9);

  gt_mitigation m = {.epoch = 3,
                     .term = 57,
                     .step = 40,
                     .dp = 2,
                     .shares = {11, 5},
                     .step_now_s = 0.4,
                     .step_new_s = 0.275,
                     .gain_s = 6.1875,
                     .by = "node-a"},
                mb;
  OK(gt_mitigation_format(&m, line, sizeof line));
  OK(gt_mitigation_parse(line, strlen(line), &mb));
  assert_int_equal(mb.epoch, 3);
  assert_int_equal(mb.term, 57);
  assert_int_equal(mb.step, 40);
  assert_int_equal(mb.shares[0], 11);
  assert_int_equal(mb.shares[1], 5);
  NEAR(mb.gain_s, 6.1875, 1e-9);
  assert_string_equal(mb.by, "node-a");

  static const struct {
    const char *line, *words;
  } bad[] = {
      {"epoch=0 term=1 step=1 dp=1 shares=4 step_now_s=1 step_new_s=1 gain_s=1 by=a", "epoch=0"},
      {"epoch=1 step=1 dp=1 shares=4 step_now_s=1 step_new_s=1 gain_s=1 by=a", "no term="},
      {"epoch=1 term=1 step=1 dp=2 shares=4 step_now_s=1 step_new_s=1 gain_s=1 by=a", "not 2 comma-separated"},
      {"epoch=1 term=1 step=1 dp=2 shares=4,x step_now_s=1 step_new_s=1 gain_s=1 by=a", "not 2 comma-separated"},
      {"epoch=1 term=1 step=1 dp=1 shares=0 step_now_s=1 step_new_s=1 gain_s=1 by=a", "entry 0 (0)"},
      {"epoch=1 term=1 step=1 dp=1 shares=4 step_now_s=1 step_new_s=1 gain_s=1 by=a/b", "not a node id"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    expect_error(gt_mitigation_parse(bad[i].line, strlen(bad[i].line), &mb), GT_EFORMAT, bad[i].words);
  const char *bad_report = "step=1 epoch=0 dp=2 cap=8 urgent=0 transition_s=0 shares=4,4 micro=1,1 speeds=1,-2";
  expect_error(gt_mitigation_report_parse(bad_report, strlen(bad_report), &rb), GT_EFORMAT, "speeds: entry 1");
  const char *over_cap = "step=1 epoch=0 dp=2 cap=8 urgent=0 transition_s=0 shares=4,9 micro=1,1 speeds=1,2";
  expect_error(gt_mitigation_report_parse(over_cap, strlen(over_cap), &rb), GT_EFORMAT, "shares: entry 1");
  r.dp = 0;
  expect_error(gt_mitigation_report_format(&r, line, sizeof line), GT_EINVAL, "dp=0");
}

/* Speeds 40 and 20 rows/s at 8 rows each: 11 and 5 finish together best
 * (0.275 s and 0.25 s against 0.4 s now), a gain of 0.125 s a step over 50
 * steps less the transition; with the transition costing more than that,
 * no switch. */
static void test_decide(void **state) {
  (void)state;
  gt_mitigation_report r = slow_report();
  int next[2];
  gt_rebalance_decision d;
  OK(gt_mitigation_decide(&r, 50, 0.07, next, &d));
  assert_true(d.change);
  assert_int_equal(next[0], 11);
  assert_int_equal(next[1], 5);
  NEAR(d.step_now_s, 0.4, 1e-12);
  NEAR(d.step_new_s, 0.275, 1e-12);
  NEAR(d.gain_s, 0.125 * 50 - 0.0625, 1e-9);
  r.transition_s = 7;
  OK(gt_mitigation_decide(&r, 50, 0.07, next, &d));
  assert_false(d.change);
  assert_int_equal(next[0], 8);
  assert_int_equal(next[1], 8);
}

/* A pipeline of two stages, six layers of equal FLOPs cut 3 and 3, the
 * second stage taking twice as long: the report and the decision carry the
 * cut through their lines, and the leader's cut gives the first stage four
 * layers, both stages then taking 4/3 of the first's time now. */
static void test_pipeline_cut(void **state) {
  (void)state;
  gt_mitigation_report r = slow_report(), rb;
  r.pp = 2;
  r.layers = 6;
  int cut[3] = {0, 3, 6};
  memcpy(r.cut, cut, sizeof cut);
  r.stage_s[0] = 0.1;
  r.stage_s[1] = 0.2;
  for (int i = 0; i < 6; i++) r.layer_flops[i] = 1e9;
  char line[GT_MITIGATION_LINE_MAX];
  OK(gt_mitigation_report_format(&r, line, sizeof line));
  OK(gt_mitigation_report_parse(line, strlen(line), &rb));
  assert_int_equal(rb.pp, 2);
  assert_int_equal(rb.layers, 6);
  assert_memory_equal(rb.cut, cut, sizeof cut);
  NEAR(rb.stage_s[1], 0.2, 1e-9);
  NEAR(rb.layer_flops[5], 1e9, 1);
  gt_rebalance_cut c;
  OK(gt_mitigation_decide_cut(&rb, 50, 0.07, &c));
  assert_true(c.change);
  assert_int_equal(c.next[1], 4);
  NEAR(c.step_now_s, 0.2, 1e-12);
  NEAR(c.step_new_s, 0.4 / 3, 1e-9);
  NEAR(c.gain_s, (0.2 - 0.4 / 3) * 50 - 2 * rb.transition_s, 1e-9);
  rb.stage_s[1] = 0.1; /* as fast as the first: the cut stays */
  OK(gt_mitigation_decide_cut(&rb, 50, 0.07, &c));
  assert_false(c.change);
  assert_int_equal(c.next[1], 3);

  gt_mitigation m = {.epoch = 4, .term = 9, .step = 50, .dp = 1, .shares = {8}, .by = "x", .pp = 2, .cut = {0, 4, 6}},
                mb;
  OK(gt_mitigation_format(&m, line, sizeof line));
  OK(gt_mitigation_parse(line, strlen(line), &mb));
  assert_int_equal(mb.pp, 2);
  assert_int_equal(mb.cut[1], 4);
  assert_int_equal(mb.cut[2], 6);
  m.pp = 0;
  OK(gt_mitigation_format(&m, line, sizeof line));
  OK(gt_mitigation_parse(line, strlen(line), &mb));
  assert_int_equal(mb.pp, 0);
  const char *empty_stage =
      "epoch=1 term=1 step=1 dp=1 shares=4 step_now_s=1 step_new_s=1 gain_s=1 by=a pp=2 cut=0,3,3";
  expect_error(gt_mitigation_parse(empty_stage, strlen(empty_stage), &mb), GT_EFORMAT, "stage 1 holds no layer");
}

/* The leader is killed: another leads within the TTL, its decision is
 * written under its term, and one written under the dead leader's is
 * refused and leaves the record as it was. */
static void test_failover_refuses_the_deposed(void **state) {
  (void)state;
  /* Short, so that the failover is: the campaigner's keepalive renews every
   * 1 s, so a false expiry would need it starved for 2 s (a renewal takes
   * ~50 ms on loaded cores). */
  const int ttl = 3;
  long long dead_term = 0;
  pid_t pid = start_campaigner("mjob", "node-a", ttl, &dead_term);
  gt_mitigation m = {.epoch = 1,
                     .step = 30,
                     .dp = 2,
                     .shares = {11, 5},
                     .step_now_s = 0.4,
                     .step_new_s = 0.275,
                     .gain_s = 6.1875,
                     .by = "node-a"};
  m.term = dead_term;
  OK(gt_mitigation_put(cli, "mjob", dead_term, &m));

  gt_leader *b = NULL;
  gt_leader_config cfg = {.etcd = {.endpoints = fx.endpoint, .timeout_ms = ETCD_TIMEOUT_MS},
                          .job_id = "mjob",
                          .node_id = "node-b",
                          .ttl_s = ttl};
  OK(gt_leader_open(&cfg, &b));
  assert_int_equal(gt_leader_term(b), 0);
  double t0 = gt_now();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  OK(gt_leader_wait(b, 60000)); /* a bound on a broken etcd; the check is the next one */
  double took = gt_now() - t0;
  printf("failover: node-b led %.2f s after node-a was killed (TTL %d s)\n", took, ttl);
  assert_true(took <= ttl + TAKEOVER_SLACK_S); /* the TTL, and etcd's expiry: see coord_fixture.h */
  int64_t term = gt_leader_term(b);
  assert_true(term > dead_term);

  gt_mitigation stale = m;
  stale.epoch = 2;
  stale.shares[0] = 12;
  stale.shares[1] = 4;
  expect_error(gt_mitigation_put(cli, "mjob", dead_term, &stale), GT_ESTATE, "no longer leads");
  gt_mitigation got;
  int found = 0;
  OK(gt_mitigation_get(cli, "mjob", &got, &found));
  assert_int_equal(found, 1);
  assert_int_equal(got.epoch, 1);
  assert_int_equal(got.term, dead_term);

  gt_mitigation mine = m;
  mine.epoch = 2;
  mine.term = term;
  mine.step = 42;
  mine.shares[0] = 10;
  mine.shares[1] = 6;
  snprintf(mine.by, sizeof mine.by, "node-b");
  OK(gt_mitigation_put(cli, "mjob", term, &mine));
  OK(gt_mitigation_get(cli, "mjob", &got, &found));
  assert_int_equal(got.epoch, 2);
  assert_int_equal(got.term, term);
  assert_string_equal(got.by, "node-b");
  assert_int_equal(got.shares[1], 6);

  /* The status: leader and term, the decision, the health table. */
  gt_health_record h = {.rank = 1,
                        .state = GT_HEALTH_SLOW,
                        .kind = GT_HEALTH_COMPUTE,
                        .peer = -1,
                        .ratio = 2.0,
                        .observed_ms = 80,
                        .predicted_ms = 40,
                        .step = 41,
                        .time = 1795000000,
                        .by = "rank-0"};
  OK(gt_health_put(cli, "mjob", &h));
  char tool[512], want[160];
  build_path("tools/giant-etcd", tool, sizeof tool);
  char *argv[] = {tool, "--endpoints", fx.endpoint, "health", "mjob", NULL};
  run_result *rr = malloc(sizeof *rr);
  assert_non_null(rr);
  run_cmd(argv, NULL, 60, rr); /* a few etcd reads: ~20 ms, < 1 s loaded under ASan; 60 s bounds a hang */
  assert_int_equal(rr->exit_code, 0);
  snprintf(want, sizeof want, "leader: node-b (term %lld)", (long long)term);
  if (!strstr(rr->output, want)) run_fail(rr, "no '%s' in its output (above)", want);
  snprintf(want, sizeof want, "mitigation: epoch 2 (term %lld, by node-b) at step 42: rows 10,6", (long long)term);
  if (!strstr(rr->output, want)) run_fail(rr, "no '%s' in its output (above)", want);
  if (!strstr(rr->output, "slow") || !strstr(rr->output, "compute"))
    run_fail(rr, "no health table in its output (above)");
  free(rr);
  gt_leader_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lines),
      cmocka_unit_test(test_decide),
      cmocka_unit_test(test_pipeline_cut),
      cmocka_unit_test(test_failover_refuses_the_deposed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
