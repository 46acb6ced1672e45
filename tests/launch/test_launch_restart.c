/* Worker failures: a worker exiting 1 moves the job to the next generation
 * on every node; --max-restarts bounds how often; SIGTERM to the agents
 * stops everything and removes their registration at once; SIGKILL to the
 * agents leaves no worker and no worker's child behind. Output is
 * prefixed with the rank and copied to --log-dir. */
#include <signal.h>
#include <unistd.h>

#include "localkit/etcd_server.h"
#include "giant/engine/etcd.h"
#include "launch/launch_test.h"

static etcd_fixture fx;
static char dir[256];

static int setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

/* 1 when node's registration for generation gen of job is in etcd within
 * timeout_s. */
static int registered(const char *job, int gen, const char *node, double timeout_s) {
  char key[300];
  snprintf(key, sizeof key, "/giant/%s/gen%d/nodes/%s", job, gen, node);
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  int found = 0;
  for (double end = mono_now() + timeout_s; !found && mono_now() < end;) {
    gt_etcd_get_opts o = {.keys_only = 1};
    gt_etcd_kvs kvs;
    if (gt_etcd_get(c, key, &o, &kvs) == GT_OK) {
      found = kvs.n > 0;
      gt_etcd_kvs_free(&kvs);
    }
    if (!found) usleep(20000);
  }
  gt_etcd_close(c);
  return found;
}

static void start_node(agent *a, const char *job, const char *node, const char *restarts, const char *ttl,
                       const char *const *wargs) {
  char log[512], logdir[300];
  snprintf(log, sizeof log, "%s/agent-%s.log", dir, node);
  snprintf(logdir, sizeof logdir, "%s/logs", dir);
  const char *args[40] = {"--nnodes",       "2",      "--nproc-per-node", "1",  "--rdzv-endpoint", fx.endpoint,
                          "--job-id",       job,      "--node-id",        node, "--rdzv-ttl",      ttl,
                          "--max-restarts", restarts, "--stop-grace",     "2",  "--rdzv-timeout",  "60",
                          "--log-dir",      logdir,   worker_bin()};
  int n = 0;
  while (args[n]) n++;
  for (int i = 0; wargs[i] && n < 39; i++) args[n++] = wargs[i];
  args[n] = NULL;
  assert_int_equal(agent_start(a, log, args), 0);
}

static void test_worker_failure_restarts(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-restart"), 0);
  setenv("LW_DIR", dir, 1);
  /* Rank 1 fails in generation 0 only. */
  const char *w[] = {"sleep=0.5", "exit=1@g0@r1", NULL};
  agent a[2];
  start_node(&a[0], "restart", "x", "2", "10", w);
  start_node(&a[1], "restart", "y", "2", "10", w);
  expect_exit(&a[0], 0, RUN_S);
  expect_exit(&a[1], 0, RUN_S);
  assert_true(wait_gen(dir, 0, 2, 0));
  assert_true(wait_gen(dir, 1, 2, 0));
  assert_int_equal(env_long(dir, 1, 0, "GT_RESTART_COUNT"), 1);
  assert_int_equal(env_long(dir, 1, 1, "GT_GENERATION"), 1);
  char path[600];
  assert_int_not_equal(access(env_path(path, sizeof path, dir, 2, 0), F_OK), 0);
  char *log = slurp(a[1].log);
  assert_non_null(log);
  assert_non_null(strstr(log, "worker rank 1 (pid"));
  assert_non_null(strstr(log, "exited with status 1"));
  free(log);
  /* Prefixed output on the agent, plain output in the log files. */
  log = slurp(a[0].log);
  assert_non_null(strstr(log, "[rank 0] worker rank 0 of 2 in gen1 up"));
  free(log);
  snprintf(path, sizeof path, "%s/logs/restart/gen1/rank1.log", dir);
  log = slurp(path);
  assert_non_null(log);
  assert_string_equal(log, "worker rank 1 of 2 in gen1 up\n");
  free(log);
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_max_restarts_honoured(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-maxr"), 0);
  setenv("LW_DIR", dir, 1);
  /* Rank 0 always fails: generations 0 and 1 run, then the job fails. */
  const char *w[] = {"sleep=5", "exit=1@r0", "sleep=0@r0", NULL};
  agent a[2];
  start_node(&a[0], "maxr", "x", "1", "10", w);
  start_node(&a[1], "maxr", "y", "1", "10", w);
  expect_exit(&a[0], 1, RUN_S);
  expect_exit(&a[1], 1, RUN_S);
  /* Generation 1 ran: its rank 0 failed again. Its rank 1 may never have
   * started, when the failure reached its agent first. */
  assert_true(wait_gen(dir, 1, 1, 0));
  assert_int_equal(env_long(dir, 1, 0, "GT_RESTART_COUNT"), 1);
  char path[600];
  assert_int_not_equal(access(env_path(path, sizeof path, dir, 2, 0), F_OK), 0);
  for (int i = 0; i < 2; i++) {
    char *log = slurp(a[i].log);
    assert_non_null(strstr(log, "the job failed"));
    assert_non_null(strstr(log, "--max-restarts"));
    free(log);
  }
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_sigterm_stops_cleanly(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-term"), 0);
  setenv("LW_DIR", dir, 1);
  /* Workers with a child each, and a long TTL: only a revoke removes the
   * registrations quickly. */
  const char *w[] = {"sleep=60", "child=1", NULL};
  agent a[2];
  start_node(&a[0], "term", "x", "0", "60", w);
  start_node(&a[1], "term", "y", "0", "60", w);
  if (!wait_gen(dir, 0, 2, START_S)) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("generation 0 did not start");
  }
  double t0 = mono_now();
  kill(a[0].pid, SIGTERM);
  kill(a[1].pid, SIGTERM);
  expect_exit(&a[0], 128 + SIGTERM, STOP_S);
  expect_exit(&a[1], 128 + SIGTERM, STOP_S);
  /* At once: both exit 0.1-0.4 s after the signal on busy cores; 15 s is
   * > 35x, and still far from the 60 s a lease would take to lapse. */
  assert_true(mono_now() - t0 < 15);
  /* Workers and their children are gone. */
  assert_int_equal(alive_count(dir, GONE_S), 0);
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  gt_etcd_get_opts o = {.prefix = 1, .keys_only = 1};
  gt_etcd_kvs kvs;
  assert_int_equal(gt_etcd_get(c, "/giant/term/gen0/nodes/", &o, &kvs), GT_OK);
  assert_int_equal(kvs.n, 0);
  gt_etcd_kvs_free(&kvs);
  gt_etcd_close(c);
  rm_rf(dir);
}

/* An agent killed with SIGKILL cannot stop anything itself: its keeper
 * kills the workers' process groups, their children included. */
static void test_sigkill_leaves_nothing(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-kill"), 0);
  setenv("LW_DIR", dir, 1);
  const char *w[] = {"sleep=60", "child=1", NULL};
  agent a[2];
  start_node(&a[0], "kill9", "x", "0", "60", w);
  start_node(&a[1], "kill9", "y", "0", "60", w);
  if (!wait_gen(dir, 0, 2, START_S)) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("generation 0 did not start");
  }
  /* Two workers and their two children, all running. */
  assert_int_equal(alive_count(dir, 0), 4);
  kill(a[0].pid, SIGKILL);
  kill(a[1].pid, SIGKILL);
  expect_exit(&a[0], 128 + SIGKILL, STOP_S);
  expect_exit(&a[1], 128 + SIGKILL, STOP_S);
  /* Generous: the keeper acts as soon as the pipe closes (milliseconds). */
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_duplicate_node_id(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-dup"), 0);
  setenv("LW_DIR", dir, 1);
  const char *w[] = {"sleep=0", NULL};
  agent a[2];
  /* TTL 3 s: the first agent renews every second and keeps the id unless
   * its renewals stall for 2 s (they take milliseconds); the second gives
   * up TTL + 2 = 5 s after it first finds the id taken. */
  start_node(&a[0], "dup", "same", "0", "3", w);
  /* The first holds the id (its registration is in etcd); the second,
   * with the same id, gives up after the TTL (it could have been a
   * restarted agent's old lease). */
  if (!registered("dup", 0, "same", START_S)) {
    dump_log(&a[0]);
    fail_msg("the first agent did not register within %d s", START_S);
  }
  start_node(&a[1], "dup", "same", "0", "3", w);
  /* 5 s of TTL + 2 s, plus its start (0.1-0.3 s): 60 s is > 10x. */
  expect_exit(&a[1], 1, 60);
  char *log = slurp(a[1].log);
  assert_non_null(strstr(log, "node id 'same' is held by another agent"));
  free(log);
  kill(a[0].pid, SIGTERM);
  expect_exit(&a[0], 128 + SIGTERM, STOP_S);
  rm_rf(dir);
}

static void test_rendezvous_timeout_and_ended_job(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-tmo"), 0);
  setenv("LW_DIR", dir, 1);
  char log[512];
  snprintf(log, sizeof log, "%s/alone.log", dir);
  /* Two nodes wanted, one comes: a clear message once --rdzv-timeout ends. */
  agent a;
  double t0 = mono_now();
  assert_int_equal(agent_start(&a, log,
                               (const char *[]){"--nnodes", "2", "--rdzv-endpoint", fx.endpoint, "--job-id", "tmo",
                                                "--rdzv-timeout", "2", worker_bin(), NULL}),
                   0);
  /* The 2 s of --rdzv-timeout plus the agent's start (0.1-0.3 s) and
   * exit: 30 s is > 10x, and far below the default's 600 s. */
  expect_exit(&a, 1, 60);
  assert_true(mono_now() - t0 < 30);
  char *out = slurp(log);
  assert_non_null(strstr(out, "did not complete in 2 s (need 2 node(s))"));
  free(out);
  /* A job that ended is not run again under the same id. */
  const char *w[] = {"sleep=0", NULL};
  agent b[2];
  start_node(&b[0], "once", "x", "0", "10", w);
  start_node(&b[1], "once", "y", "0", "10", w);
  expect_exit(&b[0], 0, RUN_S);
  expect_exit(&b[1], 0, RUN_S);
  start_node(&b[0], "once", "x", "0", "10", w);
  expect_exit(&b[0], 1, RUN_S);
  out = slurp(b[0].log);
  assert_non_null(strstr(out, "job 'once' has already ended in etcd (ok gen0): choose a new --job-id"));
  free(out);
  rm_rf(dir);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_failure_restarts), cmocka_unit_test(test_max_restarts_honoured),
      cmocka_unit_test(test_sigterm_stops_cleanly),   cmocka_unit_test(test_sigkill_leaves_nothing),
      cmocka_unit_test(test_duplicate_node_id),       cmocka_unit_test(test_rendezvous_timeout_and_ended_job),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
