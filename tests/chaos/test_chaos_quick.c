/* The chaos suite's quick subset (cases.h, docs/chaos.md): kill a worker,
 * kill an agent, slow a rank, partition a node, each on three emulated
 * nodes of two workers (dp=6), and kill a node's only worker on three
 * nodes of one (dp=3), under giantrun --reshape, with etcd on the nodes'
 * bridge; and the nodes' addresses: none given, and one no other node can
 * reach. Each case checks its own outcome, then the final loss
 * against one process without faults, the sample ledger and the steps
 * lost, that no process of the job is left, that only the job's
 * documented records are left in etcd (and go when it is removed), and
 * that nothing of the emulated network is left afterwards. Four ctest
 * tests of this program: test_chaos_quick (the faults), test_chaos_slow
 * (the slow rank), test_chaos_lone (a node's only worker) and
 * test_chaos_addr (the addresses).
 *
 * Without root, `ip` or etcd the suite says so and exits 77 (skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "chaos/cases.h"
#include "common/gt_test.h"

static void run_case(const char *name) {
  const chaos_case *c = chaos_case_find(name);
  assert_non_null(c);
  chaos_env env;
  int o = chaos_env_open(&env, c->nodes);
  if (o == 1) SKIP_CASE("%s", env.skip); /* main checked; only a change since */
  assert_int_equal(o, 0);
  chaos_result r = {.recover_ms = -1};
  c->run(&env, &r);
  chaos_env copy = env;
  chaos_env_close(&env);
  print_message("%s: %s; recovered in %.0f ms\n", name, r.summary, r.recover_ms);
  if (!r.passed) fail_msg("%s: %s", name, r.why);
  /* Nothing of the emulated network, and no scratch directory, is left. */
  assert_false(chaos_env_leftovers(&copy));
}

static void test_kill_a_worker(void **state) {
  (void)state;
  run_case("kill-worker");
}

static void test_kill_a_lone_worker(void **state) {
  (void)state;
  run_case("kill-lone-worker");
}

static void test_kill_an_agent(void **state) {
  (void)state;
  run_case("kill-agent");
}

static void test_slow_rank(void **state) {
  (void)state;
  run_case("slow-rank");
}

static void test_partition(void **state) {
  (void)state;
  run_case("partition");
}

static void test_auto_address(void **state) {
  (void)state;
  run_case("auto-address");
}

static void test_unreachable_address(void **state) {
  (void)state;
  run_case("unreachable-address");
}

/* argv[1] picks the group: `faults` (kill a worker, kill an agent,
 * partition a node), `slow` (the slow rank, which judges speeds: ctest
 * runs it under the lock of the tests that do), `lone` (kill a node's
 * only worker) or `addr` (no address given, an unreachable one). */
int main(int argc, char **argv) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  /* Every case needs the emulated nodes: without them the whole program is
   * skipped, rather than each case (which CMocka would count as passed). */
  const char *why = chaos_env_unsupported();
  if (*why) {
    fprintf(stderr, "chaos: %s: skipping\n", why);
    return 77;
  }
  const struct CMUnitTest faults[] = {
      cmocka_unit_test(test_kill_a_worker),
      cmocka_unit_test(test_kill_an_agent),
      cmocka_unit_test(test_partition),
  };
  const struct CMUnitTest slow[] = {
      cmocka_unit_test(test_slow_rank),
  };
  const struct CMUnitTest lone[] = {
      cmocka_unit_test(test_kill_a_lone_worker),
  };
  const struct CMUnitTest addr[] = {
      cmocka_unit_test(test_auto_address),
      cmocka_unit_test(test_unreachable_address),
  };
  if (argc == 2 && !strcmp(argv[1], "faults")) return gt_test_exit(cmocka_run_group_tests(faults, NULL, NULL));
  if (argc == 2 && !strcmp(argv[1], "slow")) return gt_test_exit(cmocka_run_group_tests(slow, NULL, NULL));
  if (argc == 2 && !strcmp(argv[1], "lone")) return gt_test_exit(cmocka_run_group_tests(lone, NULL, NULL));
  if (argc == 2 && !strcmp(argv[1], "addr")) return gt_test_exit(cmocka_run_group_tests(addr, NULL, NULL));
  fprintf(stderr, "usage: %s faults|slow|lone|addr\n", argc ? argv[0] : "test_chaos_quick");
  return 2;
}
