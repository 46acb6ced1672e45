/* The rendezvous API in one process: rounds close with sorted node ranks
 * and rank bases from each node's worker count, wait out the settle time
 * between MIN and MAX, move on when a node fails, end when all finish, and
 * reject malformed keys written under the job by someone else. */
#include <pthread.h>
#include <unistd.h>

#include "localkit/etcd_server.h"
#include "giant/engine/etcd.h"
#include "giant/log.h"
#include "resilience/rdzv/rdzv.h"
#include "launch/launch_test.h"

#define OK(expr)                                                                           \
  do {                                                                                     \
    gt_status s_ = (expr);                                                                 \
    if (s_ != GT_OK) fail_msg("%s -> %s: %s", #expr, gt_status_name(s_), gt_last_error()); \
  } while (0)

static etcd_fixture fx;

static int setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

/* No test here waits for a lease to lapse: a TTL of 30 s keeps every node
 * a member unless its renewals (every 10 s, each a few ms) stall for 20 s.
 * A round of threads in one process joins in 10-100 ms on busy cores: a
 * join timeout of 20 s is > 200x. */
static gt_rdzv_config config(const char *job, const char *node, int min, int max, int nproc) {
  gt_rdzv_config c = {.endpoints = fx.endpoint,
                      .job_id = job,
                      .node_id = node,
                      .min_nodes = min,
                      .max_nodes = max,
                      .nproc = nproc,
                      .max_restarts = 1,
                      .ttl_s = 30,
                      .settle_ms = 0,
                      .join_timeout_ms = 20000,
                      .poll_ms = 20};
  return c;
}

typedef struct joiner {
  gt_rdzv_config cfg;
  gt_rdzv *r;
  gt_rdzv_round round;
  gt_rdzv_event ev;
  gt_status st;
  double took;
} joiner;

static void *join_main(void *arg) {
  joiner *j = arg;
  double t0 = gt_now();
  j->st = j->r ? GT_OK : gt_rdzv_open(&j->cfg, &j->r); /* a later round reuses the handle */
  if (j->st == GT_OK) j->st = gt_rdzv_join(j->r, &j->round, &j->ev);
  j->took = gt_now() - t0;
  return NULL;
}

static void join_all(joiner *j, int n) {
  pthread_t t[8];
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, join_main, &j[i]);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++) {
    if (j[i].st != GT_OK) fail_msg("node %s: %s", j[i].cfg.node_id, gt_last_error());
    assert_int_equal(j[i].ev, GT_RDZV_RUNNING);
  }
}

static void test_round_ranks(void **state) {
  (void)state;
  /* Nodes come in any order; ranks follow the sorted ids; each node's
   * workers take consecutive global ranks. */
  joiner j[3] = {{.cfg = config("ranks", "c", 3, 3, 3)},
                 {.cfg = config("ranks", "a", 3, 3, 1)},
                 {.cfg = config("ranks", "b", 3, 3, 2)}};
  join_all(j, 3);
  const int node_rank[3] = {2, 0, 1}, base[3] = {3, 0, 1};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(j[i].round.generation, 0);
    assert_int_equal(j[i].round.nnodes, 3);
    assert_int_equal(j[i].round.world_size, 6);
    assert_int_equal(j[i].round.node_rank, node_rank[i]);
    assert_int_equal(j[i].round.rank_base, base[i]);
    assert_int_equal(j[i].round.restarts, 0);
    assert_string_equal(j[i].round.store_prefix, "/giant/ranks/gen0/store/");
    assert_int_equal(strlen(j[i].round.secret), 64);
    assert_string_equal(j[i].round.secret, j[0].round.secret);
  }
  /* Node b fails: everyone moves to generation 1 with one restart. */
  OK(gt_rdzv_fail(j[2].r, "test failure"));
  for (int i = 0; i < 3; i++) {
    gt_rdzv_event ev;
    OK(gt_rdzv_check(j[i].r, &ev));
    assert_int_equal(ev, GT_RDZV_RESTART);
    assert_non_null(strstr(gt_rdzv_reason(j[i].r), "node b: test failure"));
  }
  join_all(j, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(j[i].round.generation, 1);
    assert_int_equal(j[i].round.restarts, 1);
    assert_int_equal(j[i].round.world_size, 6);
    assert_string_equal(j[i].round.secret, j[0].round.secret); /* one secret per job */
  }
  /* All finish: the job is done, for every node. */
  for (int i = 0; i < 3; i++) OK(gt_rdzv_finish(j[i].r));
  for (int i = 0; i < 3; i++) {
    gt_rdzv_event ev;
    OK(gt_rdzv_check(j[i].r, &ev));
    assert_int_equal(ev, GT_RDZV_DONE);
  }
  for (int i = 0; i < 3; i++) gt_rdzv_close(j[i].r);
}

static void test_restarts_exhausted(void **state) {
  (void)state;
  joiner j[2] = {{.cfg = config("exhaust", "a", 2, 2, 1)}, {.cfg = config("exhaust", "b", 2, 2, 1)}};
  j[0].cfg.max_restarts = j[1].cfg.max_restarts = 0;
  join_all(j, 2);
  OK(gt_rdzv_fail(j[0].r, "boom"));
  for (int i = 0; i < 2; i++) {
    gt_rdzv_event ev;
    OK(gt_rdzv_check(j[i].r, &ev));
    assert_int_equal(ev, GT_RDZV_FAILED);
    assert_non_null(strstr(gt_rdzv_reason(j[i].r), "failed: node a: boom"));
  }
  /* A later join learns the job ended. */
  gt_rdzv_round rd;
  gt_rdzv_event ev;
  OK(gt_rdzv_join(j[1].r, &rd, &ev));
  assert_int_equal(ev, GT_RDZV_FAILED);
  for (int i = 0; i < 2; i++) gt_rdzv_close(j[i].r);
}

/* Checks the round as an agent does, every poll_ms, until it is no longer
 * running. The watch brings a change in milliseconds, and a full read
 * comes every 5 s regardless: 20 s is > 4 reads. */
static gt_rdzv_event check_until_changed(gt_rdzv *r, int poll_ms) {
  gt_rdzv_event ev = GT_RDZV_RUNNING;
  double until = gt_now() + 20;
  while (ev == GT_RDZV_RUNNING && gt_now() < until) {
    OK(gt_rdzv_check(r, &ev));
    if (ev == GT_RDZV_RUNNING) usleep((useconds_t)poll_ms * 1000);
  }
  return ev;
}

/* A node whose lease lapses after the other finished (its workers died
 * after the job's last step was committed). With reshaping the finished
 * node's workers trained on without it: the node is let go and the job
 * ends, not a new round whose workers resume at the last step and do
 * nothing. Without reshaping the job moves on to a new round, which
 * resumes from the last checkpoint whatever the lost node had left
 * undone. The lapse is played by deleting the node's key, as etcd does
 * when its lease expires. */
static void leaves_after_finish(const char *job, int reshape, gt_rdzv_event want) {
  joiner j[2] = {{.cfg = config(job, "a", 2, 2, 1)}, {.cfg = config(job, "b", 2, 2, 1)}};
  j[0].cfg.reshape = j[1].cfg.reshape = reshape;
  join_all(j, 2);
  OK(gt_rdzv_finish(j[1].r));
  gt_etcd_config ec = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *cli;
  OK(gt_etcd_connect(&ec, &cli));
  char key[128];
  snprintf(key, sizeof key, "/giant/%s/gen0/nodes/a", job);
  int64_t deleted = 0;
  OK(gt_etcd_del(cli, key, 0, &deleted));
  assert_int_equal(deleted, 1);
  gt_rdzv_event ev = check_until_changed(j[1].r, j[1].cfg.poll_ms);
  print_message("%s: %s\n", reshape ? "reshaping" : "not reshaping", gt_rdzv_reason(j[1].r));
  assert_int_equal(ev, want);
  if (want == GT_RDZV_DONE)
    assert_non_null(strstr(gt_rdzv_reason(j[1].r), "1 node(s) left before"));
  else
    assert_non_null(strstr(gt_rdzv_reason(j[1].r), "node a left gen0"));
  gt_etcd_close(cli);
  for (int i = 0; i < 2; i++) gt_rdzv_close(j[i].r);
}

static void test_leaves_after_finish(void **state) {
  (void)state;
  leaves_after_finish("lateleave", 0, GT_RDZV_RESTART);
  leaves_after_finish("lateleave-reshape", 1, GT_RDZV_DONE);
}

static void test_settle(void **state) {
  (void)state;
  /* MIN=1 of MAX=3: a lone node waits the settle time, then goes alone. */
  joiner j = {.cfg = config("settle", "solo", 1, 3, 1)};
  j.cfg.settle_ms = 600;
  join_all(&j, 1);
  assert_int_equal(j.round.nnodes, 1);
  /* The settle time, and the join's own 10-100 ms: 15 s is > 100x. */
  assert_true(j.took >= 0.6 && j.took < 15);
  gt_rdzv_close(j.r);
  /* MAX reached: no settle wait. The join takes 10-100 ms; 10 s is
   * > 100x, and short of the 30 s settle time (past the 20 s join
   * timeout, which would fail the join). */
  joiner k = {.cfg = config("nosettle", "solo", 1, 1, 1)};
  k.cfg.settle_ms = 30000;
  join_all(&k, 1);
  assert_true(k.took < 10);
  gt_rdzv_close(k.r);
}

static void test_bad_config_and_keys(void **state) {
  (void)state;
  gt_rdzv *r = (gt_rdzv *)1;
  gt_rdzv_config c = config("cfg", "n", 3, 2, 1);
  assert_int_equal(gt_rdzv_open(&c, &r), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "MIN=3 MAX=2"));
  assert_null(r);
  c = config("a/b", "n", 1, 1, 1);
  assert_int_equal(gt_rdzv_open(&c, &r), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "bad job id 'a/b'"));
  c = config("cfg", "", 1, 1, 1);
  assert_int_equal(gt_rdzv_open(&c, &r), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "bad node id"));
  c = config("cfg", "n", 1, 1, 0);
  assert_int_equal(gt_rdzv_open(&c, &r), GT_EINVAL);

  /* Keys someone else wrote under the job: a clear error, no crash. */
  gt_etcd_config ec = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *cli;
  OK(gt_etcd_connect(&ec, &cli));
  OK(gt_etcd_put(cli, "/giant/junk1/current", "banana", 6, 0, NULL, NULL));
  OK(gt_etcd_put(cli, "/giant/junk2/current", "0 0", 3, 0, NULL, NULL));
  OK(gt_etcd_put(cli, "/giant/junk2/gen0/closed", "no-newline", 10, 0, NULL, NULL));
  OK(gt_etcd_put(cli, "/giant/junk3/current", "0 0", 3, 0, NULL, NULL));
  OK(gt_etcd_put(cli, "/giant/junk3/gen0/closed", "bad/id 1\n", 9, 0, NULL, NULL));
  const char *jobs[] = {"junk1", "junk2", "junk3"};
  const char *msgs[] = {"holds 'banana'", "member list", "member list"};
  for (int i = 0; i < 3; i++) {
    c = config(jobs[i], "n", 1, 1, 1);
    OK(gt_rdzv_open(&c, &r));
    gt_rdzv_round rd;
    gt_rdzv_event ev;
    gt_status st = gt_rdzv_join(r, &rd, &ev);
    if (st != GT_EFORMAT || !strstr(gt_last_error(), msgs[i]))
      fail_msg("job %s: got %s '%s'", jobs[i], gt_status_name(st), gt_last_error());
    gt_rdzv_close(r);
  }
  gt_etcd_close(cli);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_ranks),         cmocka_unit_test(test_restarts_exhausted),
      cmocka_unit_test(test_leaves_after_finish), cmocka_unit_test(test_settle),
      cmocka_unit_test(test_bad_config_and_keys),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
