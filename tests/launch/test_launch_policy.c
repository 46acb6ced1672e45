/* What a failure costs: a usage error (exit 2) ends the job at once;
 * restarts back off exponentially; --max-restarts counts only the failures
 * within --restart-window. */
#include <signal.h>
#include <unistd.h>

#include "launch/launch_etcd.h"

static char dir[256];

static int exists(int gen, int rank) {
  char path[600];
  return access(env_path(path, sizeof path, dir, gen, rank), F_OK) == 0;
}

static void test_usage_error_stops_the_job(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-usage"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--nnodes",       "2", "--rdzv-endpoint", fx.endpoint, "--job-id", "usage",
                         "--max-restarts", "5", "--stop-grace",    "2",         NULL};
  /* Rank 1 exits 2, as a program does on a bad flag; rank 0 would run on. */
  const char *w[] = {"sleep=30", "exit=2@r1", "sleep=0@r1", NULL};
  agent a[2];
  assert_int_equal(node_start(&a[0], dir, "x", flags, w), 0);
  assert_int_equal(node_start(&a[1], dir, "y", flags, w), 0);
  expect_exit(&a[0], 1, RUN_S);
  expect_exit(&a[1], 1, RUN_S);
  /* No restart: generation 1 never ran, though five were allowed. */
  assert_true(exists(0, 1));
  assert_false(exists(1, 0) || exists(1, 1));
  for (int i = 0; i < 2; i++) {
    char *log = slurp(a[i].log);
    assert_non_null(strstr(log, "the job failed"));
    assert_non_null(strstr(log, "exited with status 2, a usage or configuration error"));
    free(log);
  }
  assert_int_equal(alive_count(dir, GONE_S), 0);
  rm_rf(dir);
}

static void test_restarts_back_off(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-backoff"), 0);
  setenv("LW_DIR", dir, 1);
  const char *flags[] = {"--rdzv-endpoint", fx.endpoint, "--job-id", "backoff", "--max-restarts", "3", NULL};
  const char *w[] = {"exit=1", NULL}; /* a crash loop */
  agent a;
  assert_int_equal(node_start(&a, dir, "x", flags, w), 0);
  /* Three back-offs of at most 1 + 2 + 4 s, and four short generations
   * (0.2-0.4 s each on busy cores): about 6 s, 120 s is > 15x. */
  expect_exit(&a, 1, RUN_S);
  /* Restart k waits 2^(k-1) s times a factor in [0.5, 1): gen k starts at
   * least 0.5 * 2^(k-1) s after gen k-1 did (a lower bound: a slow
   * machine only adds to the gaps). */
  for (int g = 1; g <= 3; g++) {
    double gap = env_double(dir, g, 0, "started") - env_double(dir, g - 1, 0, "started");
    printf("gen%d started %.2f s after gen%d\n", g, gap, g - 1);
    assert_true(gap >= 0.5 * (1 << (g - 1)));
  }
  assert_false(exists(4, 0));
  rm_rf(dir);
}

static void test_restart_window(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-window"), 0);
  setenv("LW_DIR", dir, 1);
  /* Gen0 fails at once, gen1 after 4 s, gen2 succeeds: two failures, more
   * than 4 s apart, against --max-restarts 1. A window of 3 s is shorter
   * than that gap on any machine; one of 120 s is > 20x the gap (4 s, the
   * back-off of at most 1 s, and a start of 0.2-0.4 s). */
  const char *w[] = {"exit=1@g0", "exit=1@g1", "sleep=4@g1", NULL};
  const char *in3[] = {"--rdzv-endpoint",  fx.endpoint, "--job-id", "window3", "--max-restarts", "1",
                       "--restart-window", "3",         NULL};
  agent a;
  assert_int_equal(node_start(&a, dir, "x", in3, w), 0);
  expect_exit(&a, 0, RUN_S); /* the first failure left the 3 s window */
  assert_true(exists(2, 0));
  assert_int_equal(env_long(dir, 2, 0, "GT_RESTART_COUNT"), 2);
  rm_rf(dir);
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-window"), 0);
  setenv("LW_DIR", dir, 1);
  const char *in120[] = {"--rdzv-endpoint",  fx.endpoint, "--job-id", "window120", "--max-restarts", "1",
                         "--restart-window", "120",       NULL};
  assert_int_equal(node_start(&a, dir, "x", in120, w), 0);
  expect_exit(&a, 1, RUN_S); /* both failures fall in a 120 s window */
  assert_false(exists(2, 0));
  char *log = slurp(a.log);
  assert_non_null(strstr(log, "2 failure(s) within --restart-window, more than --max-restarts 1 allows"));
  free(log);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_error_stops_the_job),
      cmocka_unit_test(test_restarts_back_off),
      cmocka_unit_test(test_restart_window),
  };
  return RUN_WITH_ETCD(tests);
}
