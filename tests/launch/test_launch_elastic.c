/* Several giantrun agents on this machine against one real etcd: a 3-node
 * job forms with the right ranks and environment; killing an agent makes
 * the others re-form as 2 nodes in bounded time; a late node is admitted at
 * the next round; nothing of the job is left afterwards. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "localkit/etcd_server.h"
#include "giant/engine/etcd.h"
#include "launch/launch_test.h"

static etcd_fixture fx;
static char dir[256];

static int setup(void **state) {
  (void)state;
  if (!etcd_fixture_available()) return -1;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

/* --rdzv-settle: agents started together register 0.1-0.3 s apart on busy
 * cores, and a round of MIN nodes closes SETTLE_S after MIN came: 3 s is
 * > 10x, so the round takes every node started. A kill is noticed a
 * LIVE_TTL after the node's last renewal, and the smaller round closes
 * SETTLE_S later. */
#define SETTLE_S 3
#define SETTLE_ARG "3"

static void start_node(agent *a, const char *job, const char *node, const char *nnodes, const char *nproc,
                       const char *sleep0) {
  char log[512];
  snprintf(log, sizeof log, "%s/agent-%s.log", dir, node);
  const char *args[] = {"--nnodes",
                        nnodes,
                        "--nproc-per-node",
                        nproc,
                        "--rdzv-endpoint",
                        fx.endpoint,
                        "--job-id",
                        job,
                        "--node-id",
                        node,
                        "--rdzv-ttl",
                        LIVE_TTL,
                        "--rdzv-settle",
                        SETTLE_ARG,
                        "--max-restarts",
                        "3",
                        "--stop-grace",
                        "2",
                        "--rdzv-timeout",
                        "60",
                        worker_bin(),
                        sleep0,
                        "sleep=1",
                        "allreduce=1",
                        NULL};
  assert_int_equal(agent_start(a, log, args), 0);
}

/* Keys under prefix in the fixture's etcd. */
static size_t count_keys(const char *prefix) {
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  gt_etcd_get_opts o = {.prefix = 1, .keys_only = 1};
  gt_etcd_kvs kvs;
  assert_int_equal(gt_etcd_get(c, prefix, &o, &kvs), GT_OK);
  size_t n = kvs.n;
  gt_etcd_kvs_free(&kvs);
  gt_etcd_close(c);
  return n;
}

static void check_world(int gen, int world, int nproc, int nnodes, int restarts, const char *job, const char *secret) {
  char expect_store[256], v[512];
  snprintf(expect_store, sizeof expect_store, "etcd://%s/giant/%s/gen%d/store/", fx.endpoint, job, gen);
  for (int r = 0; r < world; r++) {
    assert_int_equal(env_long(dir, gen, r, "GT_RANK"), r);
    assert_int_equal(env_long(dir, gen, r, "job.rank"), r);
    assert_int_equal(env_long(dir, gen, r, "GT_WORLD_SIZE"), world);
    assert_int_equal(env_long(dir, gen, r, "job.world"), world);
    assert_int_equal(env_long(dir, gen, r, "GT_LOCAL_RANK"), r % nproc);
    assert_int_equal(env_long(dir, gen, r, "GT_LOCAL_WORLD_SIZE"), nproc);
    assert_int_equal(env_long(dir, gen, r, "GT_NODE_RANK"), r / nproc);
    assert_int_equal(env_long(dir, gen, r, "GT_NNODES"), nnodes);
    assert_int_equal(env_long(dir, gen, r, "GT_GENERATION"), gen);
    assert_int_equal(env_long(dir, gen, r, "GT_RESTART_COUNT"), restarts);
    /* Each worker leads its own process group. */
    assert_int_equal(env_long(dir, gen, r, "pgid"), env_long(dir, gen, r, "pid"));
    /* A communicator formed over the generation's store: sum of rank+1. */
    assert_int_equal(env_long(dir, gen, r, "allreduce"), world * (world + 1) / 2);
    env_str(dir, gen, r, "GT_JOB_ID", v, sizeof v);
    assert_string_equal(v, job);
    env_str(dir, gen, r, "GT_STORE", v, sizeof v);
    assert_string_equal(v, expect_store);
    env_str(dir, gen, r, "GT_JOB_SECRET", v, sizeof v);
    assert_string_equal(v, secret);
  }
}

/* The node ranks follow the sorted node ids: node i's workers are children
 * of agent i (after removing the dead ones). */
static void check_parents(int gen, int world, int nproc, const agent *const *agents) {
  for (int r = 0; r < world; r++) assert_int_equal(env_long(dir, gen, r, "ppid"), agents[r / nproc]->pid);
}

static void test_kill_agent_reforms(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-kill"), 0);
  setenv("LW_DIR", dir, 1);
  agent a[3];
  start_node(&a[0], "kill", "n0", "2:3", "2", "sleep=60@g0");
  start_node(&a[1], "kill", "n1", "2:3", "2", "sleep=60@g0");
  start_node(&a[2], "kill", "n2", "2:3", "2", "sleep=60@g0");
  if (!wait_gen(dir, 0, 6, START_S)) {
    for (int i = 0; i < 3; i++) dump_log(&a[i]);
    fail_msg("generation 0 with 6 workers did not start within %d s", START_S);
  }
  char secret[128];
  env_str(dir, 0, 0, "GT_JOB_SECRET", secret, sizeof secret);
  assert_int_equal(strlen(secret), 64);
  assert_int_equal(strspn(secret, "0123456789abcdef"), 64);
  check_world(0, 6, 2, 3, 0, "kill", secret);
  const agent *order0[] = {&a[0], &a[1], &a[2]};
  check_parents(0, 6, 2, order0);

  double killed_at = mono_now();
  kill(a[1].pid, SIGKILL);
  assert_int_equal(agent_wait(&a[1], STOP_S), 128 + SIGKILL);
  /* The TTL (5 s) and the settle time (3 s) are waited out by design;
   * the back-off before a restart is at most 1 s; the rest (noticing the
   * lapse, stopping the old workers, starting the new ones and their
   * allreduce) takes 0.5-1 s on busy cores: reform_s leaves 20 s, > 20x,
   * for that rest. */
  const double reform_s = atoi(LIVE_TTL) + SETTLE_S + 1 + 20;
  if (!wait_gen(dir, 1, 4, 2 * reform_s)) {
    dump_log(&a[0]);
    dump_log(&a[2]);
    fail_msg("generation 1 with 4 workers did not start within %.0f s of the kill", 2 * reform_s);
  }
  double up = 0;
  for (int r = 0; r < 4; r++) {
    double s = env_double(dir, 1, r, "started");
    if (s > up) up = s;
  }
  double took = up - killed_at;
  fprintf(stderr, "re-formed as 2 nodes, workers running again %.2f s after SIGKILL (TTL %s s, settle %d s)\n", took,
          LIVE_TTL, SETTLE_S);
  assert_true(took > 0 && took < reform_s);
  check_world(1, 4, 2, 2, 1, "kill", secret);
  const agent *order1[] = {&a[0], &a[2]};
  check_parents(1, 4, 2, order1);

  /* Generation 1's workers exit 0 after a second: the job ends. */
  assert_int_equal(agent_wait(&a[0], RUN_S), 0);
  assert_int_equal(agent_wait(&a[2], RUN_S), 0);
  /* The end is recorded, and it is all that is left of the job: the
   * generations' keys, their stores included, went with it. */
  assert_int_equal(count_keys("/giant/kill/done"), 1);
  assert_int_equal(count_keys("/giant/kill/"), 1);
  char path[600];
  assert_int_not_equal(access(env_path(path, sizeof path, dir, 2, 0), F_OK), 0);
  /* The killed agent's workers died with it (PR_SET_PDEATHSIG); none left. */
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_late_node_admitted(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-late"), 0);
  setenv("LW_DIR", dir, 1);
  agent a[3];
  start_node(&a[0], "late", "a", "2:3", "1", "sleep=60@g0");
  start_node(&a[1], "late", "b", "2:3", "1", "sleep=60@g0");
  if (!wait_gen(dir, 0, 2, START_S)) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("generation 0 did not start within %d s", START_S);
  }
  char secret[128];
  env_str(dir, 0, 0, "GT_JOB_SECRET", secret, sizeof secret);
  check_world(0, 2, 1, 2, 0, "late", secret);
  start_node(&a[2], "late", "c", "2:3", "1", "sleep=60@g0");
  /* Admission (the old workers stopped, a round of all three, new workers
   * and their allreduce) takes about 1 s on busy cores: 60 s is > 50x. */
  if (!wait_gen(dir, 1, 3, 60)) {
    for (int i = 0; i < 3; i++) dump_log(&a[i]);
    fail_msg("the late node was not admitted within 60 s");
  }
  /* Admission is no failure: the restart count stays 0. */
  check_world(1, 3, 1, 3, 0, "late", secret);
  const agent *order[] = {&a[0], &a[1], &a[2]};
  check_parents(1, 3, 1, order);
  for (int i = 0; i < 3; i++) {
    if (agent_wait(&a[i], RUN_S) != 0) {
      dump_log(&a[i]);
      fail_msg("agent %d exited %d", i, a[i].code);
    }
  }
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

/* etcd restarts under a running job: the agents ride it out (their leases
 * survive; etcd refreshes them on restart) and the job ends well. */
static void test_etcd_restart_survived(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-etcdrs"), 0);
  setenv("LW_DIR", dir, 1);
  agent a[2];
  start_node(&a[0], "etcdrs", "a", "2", "1", "sleep=4@g0");
  start_node(&a[1], "etcdrs", "b", "2", "1", "sleep=4@g0");
  if (!wait_gen(dir, 0, 2, START_S)) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("generation 0 did not start within %d s", START_S);
  }
  assert_int_equal(etcd_fixture_restart(&fx), 0);
  for (int i = 0; i < 2; i++) {
    if (agent_wait(&a[i], RUN_S) != 0) {
      dump_log(&a[i]);
      fail_msg("agent %d exited %d after the etcd restart", i, a[i].code);
    }
  }
  char path[600];
  fprintf(stderr, "etcd restarted under the job: %s\n",
          access(env_path(path, sizeof path, dir, 1, 0), F_OK) == 0 ? "the job moved to gen1 and ended"
                                                                    : "the job ended in gen0, no restart");
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_agent_reforms),
      cmocka_unit_test(test_late_node_admitted),
      cmocka_unit_test(test_etcd_restart_survived),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
