/* gt_init: the fields it reads from the environment giantrun sets, the
 * store it connects (etcd under the generation's prefix, or a private TCP
 * store for a job of one), and malformed values rejected by name. */
#include <unistd.h>

#include "localkit/etcd_server.h"
#include "giant/engine/etcd.h"
#include "giant/engine/init.h"
#include "launch/launch_test.h"
#include "giant/engine/store.h"

static etcd_fixture fx;

static const char *const vars[] = {"GT_RANK",      "GT_LOCAL_RANK", "GT_WORLD_SIZE",   "GT_LOCAL_WORLD_SIZE",
                                   "GT_NODE_RANK", "GT_NNODES",     "GT_GENERATION",   "GT_RESTART_COUNT",
                                   "GT_JOB_ID",    "GT_STORE",      "GT_STORE_CACERT", "GT_STORE_CERT",
                                   "GT_STORE_KEY", "GT_JOB_SECRET", "GT_PLAN",         NULL};

static void clear_env(void) {
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
}

static void good_env(void) {
  char store[128];
  snprintf(store, sizeof store, "etcd://%s/giant/j1/gen3/store/", fx.endpoint);
  clear_env();
  setenv("GT_RANK", "5", 1);
  setenv("GT_LOCAL_RANK", "1", 1);
  setenv("GT_WORLD_SIZE", "6", 1);
  setenv("GT_LOCAL_WORLD_SIZE", "2", 1);
  setenv("GT_NODE_RANK", "2", 1);
  setenv("GT_GENERATION", "3", 1);
  setenv("GT_JOB_ID", "j1", 1);
  setenv("GT_STORE", store, 1);
  setenv("GT_JOB_SECRET", "00112233445566778899aabbccddeeff", 1);
  setenv("GT_PLAN", "dp=3,tp=2", 1);
}

static int setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  clear_env();
  etcd_fixture_destroy(&fx);
  return 0;
}

static void test_alone(void **state) {
  (void)state;
  clear_env();
  gt_job *job;
  assert_int_equal(gt_init(&job), GT_OK);
  assert_int_equal(job->rank, 0);
  assert_int_equal(job->world_size, 1);
  assert_int_equal(job->local_rank, 0);
  assert_int_equal(job->local_world_size, 1);
  assert_int_equal(job->node_rank, 0);
  assert_int_equal(job->generation, 0);
  assert_string_equal(job->generation_name, "gen0");
  assert_string_equal(job->plan, "");
  assert_int_equal(strlen(job->secret), 64);
  assert_int_equal(strspn(job->secret, "0123456789abcdef"), 64);
  assert_non_null(job->store);
  int64_t sum;
  assert_int_equal(gt_store_add(job->store, "n", 5, &sum), GT_OK);
  assert_int_equal(gt_store_add(job->store, "n", 2, &sum), GT_OK);
  assert_int_equal(sum, 7);
  /* A barrier of one on a local store: milliseconds; 5 s. */
  assert_int_equal(gt_store_barrier(job->store, "b", 0, 1, 5000), GT_OK);
  gt_job_destroy(job);
}

static void test_from_env(void **state) {
  (void)state;
  good_env();
  gt_job *job;
  if (gt_init(&job) != GT_OK) fail_msg("gt_init: %s", gt_last_error());
  assert_int_equal(job->rank, 5);
  assert_int_equal(job->local_rank, 1);
  assert_int_equal(job->world_size, 6);
  assert_int_equal(job->local_world_size, 2);
  assert_int_equal(job->node_rank, 2);
  assert_int_equal(job->generation, 3);
  assert_string_equal(job->generation_name, "gen3");
  assert_string_equal(job->job_id, "j1");
  assert_string_equal(job->plan, "dp=3,tp=2");
  assert_string_equal(job->secret, "00112233445566778899aabbccddeeff");
  /* The store's keys live under GT_STORE's prefix in etcd. */
  assert_int_equal(gt_store_set(job->store, "addr/5", "10.0.0.5:7000", 13), GT_OK);
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  void *v;
  size_t len;
  assert_int_equal(gt_etcd_get_value(c, "/giant/j1/gen3/store/addr/5", &v, &len, NULL), GT_OK);
  assert_int_equal(len, 13);
  assert_memory_equal(v, "10.0.0.5:7000", 13);
  free(v);
  gt_etcd_close(c);
  gt_job_destroy(job);
  /* Optional variables default from the required ones. */
  good_env();
  unsetenv("GT_LOCAL_RANK");
  unsetenv("GT_LOCAL_WORLD_SIZE");
  unsetenv("GT_NODE_RANK");
  unsetenv("GT_GENERATION");
  unsetenv("GT_PLAN");
  assert_int_equal(gt_init(&job), GT_OK);
  assert_int_equal(job->local_rank, 5);
  assert_int_equal(job->local_world_size, 6);
  assert_int_equal(job->generation, 0);
  assert_string_equal(job->plan, "");
  gt_job_destroy(job);
}

typedef struct bad_case {
  const char *var, *value; /* value NULL: unset */
  const char *message;     /* in gt_last_error() */
} bad_case;

static void test_malformed(void **state) {
  (void)state;
  static char long_id[300];
  memset(long_id, 'a', sizeof long_id - 1);
  const bad_case cases[] = {
      {"GT_RANK", "abc", "GT_RANK='abc' is not an integer"},
      {"GT_RANK", "6", "GT_RANK=6 is out of range [0, 5]"},
      {"GT_RANK", "-1", "GT_RANK=-1 is out of range"},
      {"GT_RANK", "", "GT_RANK='' is not an integer"},
      {"GT_RANK", NULL, "GT_RANK is not set"},
      {"GT_WORLD_SIZE", "0", "GT_WORLD_SIZE=0 is out of range"},
      {"GT_WORLD_SIZE", "4x", "GT_WORLD_SIZE='4x' is not an integer"},
      {"GT_WORLD_SIZE", "99999999999999999999", "GT_WORLD_SIZE='99999999999999999999' is not an integer"},
      {"GT_LOCAL_RANK", "2", "GT_LOCAL_RANK=2 is out of range [0, 1]"},
      {"GT_LOCAL_WORLD_SIZE", "7", "GT_LOCAL_WORLD_SIZE=7 is out of range [1, 6]"},
      {"GT_NODE_RANK", "x", "GT_NODE_RANK='x'"},
      {"GT_GENERATION", "-3", "GT_GENERATION=-3 is out of range"},
      {"GT_JOB_ID", long_id, "GT_JOB_ID is 299 characters long"},
      {"GT_PLAN", long_id, "GT_PLAN is 299 characters long"},
      {"GT_JOB_SECRET", NULL, "GT_JOB_SECRET is not set"},
      {"GT_STORE", NULL, "GT_STORE is not set"},
      {"GT_STORE", "redis://127.0.0.1:1/x", "unknown scheme"},
      {"GT_STORE", "etcd://127.0.0.1:2379", "expected etcd://HOST:PORT[,HOST:PORT]/PREFIX"},
      {"GT_STORE", "etcd:///giant/x/", "expected etcd://HOST:PORT[,HOST:PORT]/PREFIX"},
      {"GT_STORE", "etcd://127.0.0.1:2379/", "expected etcd://HOST:PORT[,HOST:PORT]/PREFIX"},
      {"GT_STORE", "etcds://127.0.0.1:2379", "expected etcd://HOST:PORT[,HOST:PORT]/PREFIX"},
      {"GT_STORE", "etcd://127.0.0.1:2379,, x/p", "endpoints are HOST:PORT separated by commas"},
      {"GT_STORE", "tcp://127.0.0.1", "expected tcp://HOST:PORT"},
      {"GT_STORE", "tcp://127.0.0.1:70000", "expected tcp://HOST:PORT"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    good_env();
    if (cases[i].value)
      setenv(cases[i].var, cases[i].value, 1);
    else
      unsetenv(cases[i].var);
    gt_job *job = (gt_job *)1;
    gt_status st = gt_init(&job);
    if (st != GT_EINVAL || !strstr(gt_last_error(), cases[i].message))
      fail_msg("%s=%s: got %s '%s', expected GT_EINVAL with '%s'", cases[i].var,
               cases[i].value ? cases[i].value : "(unset)", gt_status_name(st), gt_last_error(), cases[i].message);
    assert_null(job);
  }
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alone),
      cmocka_unit_test(test_from_env),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
