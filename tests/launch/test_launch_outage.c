/* etcd goes away at the end of a job for 30 s, longer than a lease TTL plus
 * the agents' patience with running workers: workers that finish meanwhile
 * still finish the job. Their output is forwarded while etcd is away, and
 * once it is back the job is recorded as done and the agents exit 0. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "giant/engine/etcd.h"
#include "launch/launch_etcd.h"

static char dir[256];

#define OUTAGE_S 30.0
#define SPAM_LINES 20000 /* 2 MB a worker: 30 pipes' worth */

static void test_etcd_outage_at_the_end(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-outage"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--nnodes",   "2",      "--rdzv-endpoint", fx.endpoint, "--job-id", "outage",
                         "--rdzv-ttl", LIVE_TTL, "--stop-grace",    "2",         NULL};
  char spam[32];
  snprintf(spam, sizeof spam, "spam=%d", SPAM_LINES);
  const char *w[] = {"gate=1", spam, NULL};
  agent a[2];
  start_two(a, dir, flags, w, START_S);
  assert_int_equal(etcd_fixture_signal(&fx, SIGKILL), 0);
  double down_at = mono_now();
  /* Now the workers write 2 MB each and exit 0. */
  char go[300];
  snprintf(go, sizeof go, "%s/go", dir);
  int fd = open(go, O_WRONLY | O_CREAT, 0644);
  assert_true(fd >= 0);
  close(fd);
  char last[64];
  snprintf(last, sizeof last, "] spam %06d", SPAM_LINES - 1);
  /* Forwarded 0.2 s into the outage on busy cores; the agents would give
   * up on etcd TTL + 10 = 15 s into it were the workers still running:
   * > 50x. */
  int forwarded = 0;
  while (!forwarded && mono_now() - down_at < OUTAGE_S - 2) {
    forwarded = log_has(&a[0], last, 0) && log_has(&a[1], last, 0);
    usleep(50000);
  }
  printf("workers' output forwarded %.2f s into the outage\n", mono_now() - down_at);
  while (mono_now() - down_at < OUTAGE_S) usleep(50000);
  /* Both agents still wait to record the finish: neither gave up. */
  for (int i = 0; i < 2; i++)
    if (waitpid(a[i].pid, NULL, WNOHANG) != 0) {
      dump_log(&a[i]);
      fail_msg("agent %d exited while etcd was away", i);
    }
  assert_int_equal(etcd_fixture_resume(&fx), 0);
  double up_at = mono_now();
  for (int i = 0; i < 2; i++)
    if (agent_wait(&a[i], 90) != 0) { /* 0.3 s on busy cores */
      dump_log(&a[i]);
      fail_msg("agent %d did not exit 0 after the outage", i);
    }
  printf("agents exited 0 %.2f s after etcd came back\n", mono_now() - up_at);
  assert_true(forwarded);
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_OK);
  void *v;
  size_t len;
  assert_int_equal(gt_etcd_get_value(c, "/giant/outage/done", &v, &len, NULL), GT_OK);
  assert_int_equal(len, 7);
  assert_memory_equal(v, "ok gen0", 7);
  free(v);
  gt_etcd_close(c);
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_etcd_outage_at_the_end),
  };
  return RUN_WITH_ETCD(tests);
}
