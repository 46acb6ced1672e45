/* What a job leaves in etcd after each kind of end: a finished or failed
 * job only its `done` record (which giant-etcd shows and removes), a
 * stopped job only `current`. While it runs, its secret is on a lease. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "giant/engine/etcd.h"
#include "launch/launch_etcd.h"

static char dir[256];

/* The job's keys, one a line, in etcd's (sorted) order; the secret's lease
 * into *secret_lease when asked. */
static void job_keys(const char *job, char *out, size_t n, int64_t *secret_lease) {
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  char prefix[128];
  snprintf(prefix, sizeof prefix, "/giant/%s/", job);
  gt_etcd_get_opts o = {.prefix = 1};
  gt_etcd_kvs kvs;
  assert_int_equal(gt_etcd_get(c, prefix, &o, &kvs), GT_OK);
  size_t used = 0;
  out[0] = 0;
  for (size_t i = 0; i < kvs.n && used < n; i++) {
    used += (size_t)snprintf(out + used, n - used, "%s\n", kvs.kvs[i].key + strlen(prefix));
    if (secret_lease && !strcmp(kvs.kvs[i].key + strlen(prefix), "secret")) *secret_lease = kvs.kvs[i].lease;
  }
  gt_etcd_kvs_free(&kvs);
  gt_etcd_close(c);
}

/* Opens the gate the workers wait at (gate=1). */
static void open_gate(void) {
  char go[300];
  snprintf(go, sizeof go, "%s/go", dir);
  FILE *f = fopen(go, "w");
  assert_non_null(f);
  fclose(f);
}

/* Runs a job of two nodes whose workers wait at the gate until the test has
 * looked at the running job's keys, then follow w. */
static void run_job(const char *job, const char *const *w, int code) {
  const char *flags[] = {"--nnodes",   "2",      "--rdzv-endpoint", fx.endpoint, "--job-id", job,
                         "--rdzv-ttl", LIVE_TTL, "--stop-grace",    "2",         NULL};
  const char *args[8] = {"gate=1"};
  for (int i = 0; w[i] && i < 6; i++) args[i + 1] = w[i];
  agent a[2];
  start_two(a, dir, flags, args, START_S);
  char keys[8192];
  int64_t lease = 0;
  job_keys(job, keys, sizeof keys, &lease);
  open_gate();
  /* Running: the generation's store holds the workers' keys, and the
   * secret is on a lease, so it cannot outlive the agents. */
  assert_non_null(strstr(keys, "gen0/store/"));
  assert_true(lease != 0);
  for (int i = 0; i < 2; i++)
    if (agent_wait(&a[i], RUN_S) != code) {
      dump_log(&a[i]);
      fail_msg("job %s: an agent did not exit %d", job, code);
    }
}

/* giant-etcd ARGS against the fixture; its stdout into out. */
static int giant_etcd(const char *args, char *out, size_t n) {
  const char *bd = getenv("GT_BUILD_DIR");
  char cmd[1024];
  /* One call on loopback: 10-50 ms on busy cores; 20 s is > 400x. */
  snprintf(cmd, sizeof cmd, "timeout 20 %s/tools/giant-etcd --endpoints %s %s", bd ? bd : ".", fx.endpoint, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_finished_job_leaves_done(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-keys-ok"), 0);
  setenv("LW_DIR", dir, 1);
  run_job("keys-ok", (const char *[]){NULL}, 0);
  char keys[8192], out[1024];
  job_keys("keys-ok", keys, sizeof keys, NULL);
  assert_string_equal(keys, "done\n");
  /* The record as giant-etcd shows it, and its removal. */
  assert_int_equal(giant_etcd("get /giant/keys-ok/ --prefix", out, sizeof out), 0);
  assert_string_equal(out, "/giant/keys-ok/done\nok gen0\n");
  assert_int_equal(giant_etcd("del /giant/keys-ok/ --prefix", out, sizeof out), 0);
  assert_string_equal(out, "1\n");
  job_keys("keys-ok", keys, sizeof keys, NULL);
  assert_string_equal(keys, "");
  rm_rf(dir);
}

static void test_failed_job_leaves_done(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-keys-fail"), 0);
  setenv("LW_DIR", dir, 1);
  run_job("keys-fail", (const char *[]){"sleep=60", "exit=1@r0", "sleep=0@r0", NULL}, 1);
  char keys[8192], out[1024];
  job_keys("keys-fail", keys, sizeof keys, NULL);
  assert_string_equal(keys, "done\n");
  assert_int_equal(giant_etcd("get /giant/keys-fail/done", out, sizeof out), 0);
  assert_non_null(strstr(out, "failed: node x: worker rank 0"));
  rm_rf(dir);
}

static void test_stopped_job_leaves_current(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-keys-stop"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--nnodes",   "2",      "--rdzv-endpoint", fx.endpoint, "--job-id", "keys-stop",
                         "--rdzv-ttl", LIVE_TTL, "--stop-grace",    "2",         NULL};
  const char *w[] = {"sleep=60", NULL};
  agent a[2];
  start_two(a, dir, flags, w, START_S);
  kill(a[0].pid, SIGTERM);
  kill(a[1].pid, SIGTERM);
  assert_int_equal(agent_wait(&a[0], STOP_S), 128 + SIGTERM);
  assert_int_equal(agent_wait(&a[1], STOP_S), 128 + SIGTERM);
  /* The secret's lease lapses a TTL (5 s) after the last agent is gone
   * (etcd looks for lapsed leases every 0.5 s); `current` stays, so a
   * relaunch goes on counting generations. 60 s is the TTL and 10x its
   * length again. */
  char keys[8192];
  for (double end = mono_now() + 60; mono_now() < end; usleep(100000)) {
    job_keys("keys-stop", keys, sizeof keys, NULL);
    if (!strcmp(keys, "current\n")) break;
  }
  assert_string_equal(keys, "current\n");
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_finished_job_leaves_done),
      cmocka_unit_test(test_failed_job_leaves_done),
      cmocka_unit_test(test_stopped_job_leaves_current),
  };
  return RUN_WITH_ETCD(tests);
}
