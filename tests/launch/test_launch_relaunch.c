/* Relaunching a job after every agent was killed: the new agents open a new
 * generation at once (they do not wait out the dead agents' leases, and do
 * not rejoin the dead round and read its store), ten times in a row. */
#include <signal.h>
#include <unistd.h>

#include "launch/launch_etcd.h"

static char dir[256];

/* A relaunch's workers are up 0.2-0.5 s after its agents start on busy
 * cores (a communicator formed, its allreduce done): 15 s is > 30x, and
 * well short of the 120 s TTL that waiting out the dead agents would take. */
#define RELAUNCH_S 15

static void test_relaunch_after_all_agents_killed(void **state) {
  (void)state;
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-relaunch"), 0);
  setenv("LW_DIR", dir, 1);
  /* The default --max-restarts 0 and a TTL far longer than a relaunch: the
   * dead agents' registrations are still live when the new ones come, and
   * new agents that waited them out would not be up within the wait below
   * (RELAUNCH_S). */
  const char *flags[] = {"--nnodes", "2",        "--nproc-per-node", "1",   "--rdzv-endpoint", fx.endpoint,
                         "--job-id", "relaunch", "--rdzv-ttl",       "120", "--stop-grace",    "2",
                         NULL};
  /* The workers form a communicator: ranks that read a dead generation's
   * addresses would never get past it. */
  const char *w[] = {"allreduce=1", "sleep=120", NULL};
  agent a[2];
  for (int k = 0; k <= 10; k++) {
    double t0 = mono_now();
    assert_int_equal(node_start(&a[0], dir, "x", flags, w), 0);
    assert_int_equal(node_start(&a[1], dir, "y", flags, w), 0);
    int up = wait_gen(dir, k, 2, k == 0 ? START_S : RELAUNCH_S);
    double dt = mono_now() - t0;
    if (!up || (k > 0 && dt > RELAUNCH_S)) {
      dump_log(&a[0]);
      dump_log(&a[1]);
      fail_msg("launch %d: gen%d's workers %s after %.2f s", k, k, up ? "stepped" : "did not step", dt);
    }
    printf("launch %d: first step of gen%d after %.2f s\n", k, k, dt);
    assert_float_equal(env_double(dir, k, 0, "allreduce"), 3.0, 0.0);
    assert_int_equal(env_long(dir, k, 1, "GT_RESTART_COUNT"), 0);
    /* Kill every agent outright; their workers die with them. */
    kill(a[0].pid, SIGKILL);
    kill(a[1].pid, SIGKILL);
    assert_int_equal(agent_wait(&a[0], STOP_S), 128 + SIGKILL);
    assert_int_equal(agent_wait(&a[1], STOP_S), 128 + SIGKILL);
    assert_int_equal(alive_count(dir, GONE_S), 0);
  }
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_relaunch_after_all_agents_killed),
  };
  return RUN_WITH_ETCD(tests);
}
