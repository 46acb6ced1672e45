/* The coordinator on etcd: health records that survive a round trip and
 * refuse garbage, and leader election against a real etcd, where a dead
 * leader (a process killed with SIGKILL) is replaced within its lease's TTL
 * and a resigning one at once. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "giant/engine/coord.h"
#include "giant/log.h"
#include "resilience/coord_fixture.h"
#include "common/gt_test.h"
#include "giant/engine/etcd.h"
#include "resilience/coord/records.h"

static gt_health_record sample(int rank) {
  gt_health_record r = {.rank = rank,
                        .state = GT_HEALTH_SLOW,
                        .kind = GT_HEALTH_LINK,
                        .peer = rank + 1,
                        .ratio = 2.0625,
                        .observed_ms = 412.5,
                        .predicted_ms = 200.25,
                        .step = 57,
                        .time = 1795000000.125};
  snprintf(r.by, sizeof r.by, "node-%d", rank % 2);
  return r;
}

static void assert_same(const gt_health_record *a, const gt_health_record *b) {
  assert_int_equal(a->rank, b->rank);
  assert_int_equal(a->state, b->state);
  assert_int_equal(a->kind, b->kind);
  assert_int_equal(a->peer, b->peer);
  NEAR(a->ratio, b->ratio, 1e-4);
  NEAR(a->observed_ms, b->observed_ms, 1e-3);
  NEAR(a->predicted_ms, b->predicted_ms, 1e-3);
  assert_int_equal(a->step, b->step);
  NEAR(a->time, b->time, 1e-3);
  assert_string_equal(a->by, b->by);
}

static void test_health_line(void **state) {
  (void)state;
  gt_health_record r = sample(3), back;
  char line[GT_HEALTH_LINE_MAX];
  OK(gt_health_format(&r, line, sizeof line));
  OK(gt_health_parse(line, strlen(line), 3, &back));
  assert_same(&r, &back);

  static const struct {
    const char *line, *words;
  } bad[] = {
      {"kind=compute peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "state is missing"},
      {"state=fast kind=compute peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "state is missing"},
      {"state=ok kind=disk peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "kind is missing"},
      {"state=ok kind=none peer=-1 ratio=x observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "ratio=x is not a number"},
      {"state=ok kind=none peer=-1 ratio=nan observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "ratio=nan"},
      {"state=ok kind=none peer=-1 ratio=1 predicted_ms=1 step=1 time=1 by=a", "no observed_ms="},
      {"state=ok kind=none peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=-3 time=1 by=a", "is not a step"},
      {"state=ok kind=none peer=1.5 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1 by=a", "is not a rank"},
      {"state=ok kind=none peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1 by=a/b", "not a node id"},
      {"state=ok kind=none peer=-1 ratio=1 observed_ms=1 predicted_ms=1 step=1 time=1", "by is missing"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    expect_error(gt_health_parse(bad[i].line, strlen(bad[i].line), 2, &back), GT_EFORMAT, bad[i].words);
  /* Not text at all: an embedded NUL, and a line longer than any record. */
  expect_error(gt_health_parse("state=ok\0x", 10, 2, &back), GT_EFORMAT, "not a line of text");
  char longline[GT_HEALTH_LINE_MAX + 8];
  memset(longline, 'a', sizeof longline);
  expect_error(gt_health_parse(longline, sizeof longline, 2, &back), GT_EFORMAT, "not a line of text");
}

static void test_health_records(void **state) {
  (void)state;
  /* Written out of order; listed by rank, as the job's table shows them. */
  int ranks[] = {10, 2, 0};
  for (int i = 0; i < 3; i++) {
    gt_health_record r = sample(ranks[i]);
    OK(gt_health_put(cli, "hjob", &r));
  }
  gt_health_record got[8];
  int n = 0;
  OK(gt_health_list(cli, "hjob", got, 8, &n));
  assert_int_equal(n, 3);
  for (int i = 0; i < 3; i++) {
    gt_health_record want = sample(i == 0 ? 0 : i == 1 ? 2 : 10);
    assert_same(&got[i], &want);
  }
  /* A record updated in place: the newest is what is read. */
  gt_health_record ok = {.rank = 2, .state = GT_HEALTH_OK, .peer = -1, .ratio = 1.01, .step = 80, .time = 1};
  OK(gt_health_put(cli, "hjob", &ok));
  OK(gt_health_list(cli, "hjob", got, 8, &n));
  assert_int_equal(got[1].state, GT_HEALTH_OK);
  assert_int_equal(got[1].step, 80);

  /* giant-etcd shows the table. */
  char tool[512];
  build_path("tools/giant-etcd", tool, sizeof tool);
  char *argv[] = {tool, "--endpoints", fx.endpoint, "health", "hjob", NULL};
  run_result rr;
  /* giant-etcd reads a few keys: ~20 ms, well under 1 s on loaded cores
   * under ASan; 60 s only bounds a hang. */
  run_cmd(argv, NULL, 60, &rr);
  assert_int_equal(rr.exit_code, 0);
  assert_non_null(strstr(rr.output, "leader: none"));
  assert_non_null(strstr(rr.output, "slow"));
  assert_non_null(strstr(rr.output, "link"));
  char *argv_bad[] = {tool, "--endpoints", fx.endpoint, "health", "no/such", NULL};
  run_cmd(argv_bad, NULL, 60, &rr);
  assert_int_equal(rr.exit_code, 2);

  /* Garbage under health/ fails the listing, naming the key; a bad job id
   * and a bad record are refused before anything is written. */
  OK(gt_etcd_put(cli, "/giant/hjob/health/5", "state=sick", 10, 0, NULL, NULL));
  expect_error(gt_health_list(cli, "hjob", got, 8, &n), GT_EFORMAT, "/giant/hjob/health/5");
  OK(gt_etcd_put(cli, "/giant/hjob/health/five", "x", 1, 0, NULL, NULL));
  OK(gt_etcd_del(cli, "/giant/hjob/health/5", 0, NULL));
  expect_error(gt_health_list(cli, "hjob", got, 8, &n), GT_EFORMAT, "health/five");
  expect_error(gt_health_put(cli, "h job", &ok), GT_EINVAL, "not a valid job id");
  gt_health_record bogus = sample(1);
  bogus.state = (gt_health_state)7;
  expect_error(gt_health_put(cli, "hjob", &bogus), GT_EINVAL, "unknown state");
}

static gt_leader *open_leader(const char *job, const char *node, int ttl) {
  gt_leader *l = NULL;
  gt_leader_config cfg = {
      .etcd = {.endpoints = fx.endpoint, .timeout_ms = ETCD_TIMEOUT_MS}, .job_id = job, .node_id = node, .ttl_s = ttl};
  OK(gt_leader_open(&cfg, &l));
  return l;
}

/* Two campaigners: one leads, the other does not; the leader resigns and
 * the other takes over at once, in a later term.
 *
 * The handover takes 0.2 to 0.3 s on loaded cores (the revoke, the watch
 * event, a campaign), measured. The leases' TTL is long (30 s) so that a
 * takeover on the lease's expiry instead of the revoke could not come
 * sooner than 20 s (the keepalive renews every TTL/3): a bound of 10 s is
 * then > 30x the handover and still tells the two apart. */
#define RESIGN_TTL_S 30
#define RESIGN_WITHIN_S 10.0
static void test_leader_resign(void **state) {
  (void)state;
  gt_leader *a = open_leader("ljob", "node-a", RESIGN_TTL_S);
  OK(gt_leader_wait(a, 30000)); /* the first campaigner leads in a few ms */
  gt_leader *b = open_leader("ljob", "node-b", RESIGN_TTL_S);
  char node[64];
  int64_t term1 = 0, term2 = 0;
  OK(gt_leader_current(b, node, sizeof node, &term1));
  assert_string_equal(node, "node-a");
  assert_true(term1 > 0);
  assert_false(gt_leader_is_leader(b));
  double t0 = gt_now();
  gt_leader_close(a);
  /* Past the lease's expiry (<= 30 s), so that a missed revoke fails on
   * the elapsed time below rather than on this wait. */
  OK(gt_leader_wait(b, 60000));
  double took = gt_now() - t0;
  printf("resignation: node-b led %.2f s after node-a resigned\n", took);
  assert_true(took < RESIGN_WITHIN_S); /* not a lease expiry: the revoke deletes the key */
  OK(gt_leader_current(b, node, sizeof node, &term2));
  assert_string_equal(node, "node-b");
  assert_true(term2 > term1);
  gt_leader_close(b);
}

/* A leader killed with SIGKILL: its lease runs out and another campaigner
 * leads within the TTL (plus etcd's expiry tick and a generous margin for a
 * loaded machine: TAKEOVER_SLACK_S). The TTL is short, so that the test is
 * short too, and still safe: the live campaigner's keepalive renews every
 * 1 s, so a false expiry would need it starved for 2 s, where a renewal
 * takes ~50 ms loaded. */
static void test_leader_dies(void **state) {
  (void)state;
  const int ttl = 3;
  long long dead_term = 0;
  pid_t pid = start_campaigner("kjob", "node-dead", ttl, &dead_term);

  gt_leader *b = open_leader("kjob", "node-b", ttl);
  char node[64];
  OK(gt_leader_current(b, node, sizeof node, NULL));
  assert_string_equal(node, "node-dead");
  double t0 = gt_now();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  OK(gt_leader_wait(b, 60000)); /* a bound on a broken etcd; the check is the next one */
  double took = gt_now() - t0;
  printf("takeover: node-b led %.2f s after the leader was killed (TTL %d s)\n", took, ttl);
  assert_true(took <= ttl + TAKEOVER_SLACK_S);
  int64_t term = 0;
  OK(gt_leader_current(b, node, sizeof node, &term));
  assert_string_equal(node, "node-b");
  assert_true(term > dead_term);
  gt_leader_close(b);
}

static void test_leader_bad_config(void **state) {
  (void)state;
  gt_leader *l = NULL;
  gt_leader_config cfg = {.etcd = {.endpoints = fx.endpoint}, .job_id = "a job", .node_id = "n"};
  expect_error(gt_leader_open(&cfg, &l), GT_EINVAL, "not a valid id");
  cfg.job_id = "job";
  cfg.node_id = "";
  expect_error(gt_leader_open(&cfg, &l), GT_EINVAL, "node id");
  cfg.node_id = "n";
  cfg.ttl_s = -1;
  expect_error(gt_leader_open(&cfg, &l), GT_EINVAL, "ttl");
  assert_null(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_line),       cmocka_unit_test(test_health_records),
      cmocka_unit_test(test_leader_bad_config), cmocka_unit_test(test_leader_resign),
      cmocka_unit_test(test_leader_dies),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
