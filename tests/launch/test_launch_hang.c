/* Stuck workers: a worker whose step stops advancing is failed after
 * --hang-timeout; a stopped worker still stops promptly (SIGCONT goes with
 * SIGTERM); step lines reach the agent as they are printed. */
#include <signal.h>
#include <unistd.h>

#include "launch/launch_etcd.h"

static char dir[256];

/* 1 when process pid is stopped (state T) within timeout_s. */
static int worker_stopped(long pid, double timeout_s) {
  for (double end = mono_now() + timeout_s; mono_now() < end; usleep(20000)) {
    char st = proc_state(pid);
    if (!st) return 0;
    if (st == 'T' || st == 't') return 1;
  }
  return 0;
}

static void test_hung_worker_is_failed(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-hang"), 0);
  setenv("LW_DIR", dir, 1);
  /* A grace far longer than the test allows: the stopped worker must die
   * of the SIGTERM, not of the SIGKILL after the grace. The hang timeout
   * must pass before the stopped worker is failed, so the test waits it
   * out; 2 s is 40x the 50 ms between rank 0's steps, which on busy cores
   * come at most a few tens of ms late (rank 0 is never taken for hung). */
  const char *flags[] = {
      "--nproc-per-node", "2", "--rdzv-endpoint", fx.endpoint, "--job-id", "hang", "--hang-timeout", "2",
      "--max-restarts",   "1", "--stop-grace",    "60",        NULL};
  /* In gen0, rank 1 takes five steps and stops (SIGSTOP), as a worker
   * blocked in a collective or paging would; rank 0 keeps stepping (for
   * 50 s, far longer than the test waits for the restart). */
  const char *w[] = {"steps=5", "stop=1@g0@r1", "steps=1000@g0@r0", NULL};
  agent a;
  assert_int_equal(node_start(&a, dir, "x", flags, w), 0);
  if (!wait_gen(dir, 0, 2, START_S)) {
    dump_log(&a);
    fail_msg("gen0 did not start");
  }
  /* Noticed after 2 s without a step, stopped at once, run again: 3.4 s
   * after the hung worker started on busy cores, of which 0.25 s are its
   * five steps, 2 s the hang timeout and up to 1 s the restart's back-off.
   * 40 s is > 10x. */
  if (!wait_gen(dir, 1, 2, 40)) {
    dump_log(&a);
    fail_msg("the hung worker was not noticed and restarted");
  }
  double gap = env_double(dir, 1, 0, "started") - env_double(dir, 0, 1, "started");
  printf("hung worker restarted %.2f s after it started\n", gap);
  assert_true(gap < 40);
  assert_int_equal(agent_wait(&a, RUN_S), 0);
  char *log = slurp(a.log);
  assert_non_null(strstr(log, "worker rank 1 (pid"));
  assert_null(strstr(log, "worker rank 0 (pid"));
  assert_non_null(strstr(log, "made no progress for"));
  assert_non_null(strstr(log, "after step 5 (hang timeout 2 s"));
  free(log);
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_stopped_worker_stops_promptly(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-sigcont"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--rdzv-endpoint", fx.endpoint, "--job-id", "sigcont", "--stop-grace", "60", NULL};
  const char *w[] = {"stop=1", NULL};
  agent a;
  assert_int_equal(node_start(&a, dir, "x", flags, w), 0);
  assert_true(wait_gen(dir, 0, 1, START_S));
  /* It stops itself right after writing its file: wait until it has. */
  if (!worker_stopped(env_long(dir, 0, 0, "pid"), START_S)) {
    dump_log(&a);
    fail_msg("the worker did not stop itself");
  }
  double t0 = mono_now();
  kill(a.pid, SIGTERM);
  assert_int_equal(agent_wait(&a, 40), 128 + SIGTERM);
  printf("agent with a stopped worker exited %.2f s after SIGTERM\n", mono_now() - t0);
  /* 0.35 s on busy cores: 20 s is > 50x, and well short of the 60 s
   * grace after which a worker that ignored the SIGTERM is killed. */
  assert_true(mono_now() - t0 < 20);
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_step_lines_arrive_as_printed(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-lines"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--rdzv-endpoint", fx.endpoint, "--job-id", "lines", "--stop-grace", "2", NULL};
  /* Three step lines, never flushed by the program, then a long sleep: the
   * lines must arrive while it sleeps. */
  const char *w[] = {"steps=3", "sleep=60", NULL};
  agent a;
  assert_int_equal(node_start(&a, dir, "x", flags, w), 0);
  /* The lines come 0.15 s after the worker starts, which is 0.3-0.5 s
   * after the agent does; 50 s, still within the worker's 60 s sleep, is
   * > 50x. */
  int arrived = log_has(&a, "[rank 0] step 3\n", 50);
  if (!arrived) dump_log(&a);
  kill(a.pid, SIGTERM);
  assert_int_equal(agent_wait(&a, STOP_S), 128 + SIGTERM);
  assert_true(arrived);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hung_worker_is_failed),
      cmocka_unit_test(test_stopped_worker_stops_promptly),
      cmocka_unit_test(test_step_lines_arrive_as_printed),
  };
  return RUN_WITH_ETCD(tests);
}
