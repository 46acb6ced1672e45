/* Leases: grant, ttl, revoke, keepalive, and loss once renewals stop. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;
static gt_etcd_client *cli;

static int setup(void **state) {
  (void)state;
  return etcd_test_up(&fx, &cli, ETCD_CALL_MS);
}

static int teardown(void **state) {
  (void)state;
  return etcd_test_down(&fx, cli);
}

static int key_exists(const char *key) {
  gt_etcd_kvs r;
  ETCD_OK(gt_etcd_get(cli, key, NULL, &r));
  int n = (int)r.n;
  gt_etcd_kvs_free(&r);
  return n;
}

/* Waits up to limit_s for the key to disappear; returns seconds taken or -1.
 * Polled, so a generous limit costs nothing when the key goes. */
static double wait_gone(const char *key, double limit_s) {
  double t0 = gt_now();
  while (gt_now() - t0 < limit_s) {
    if (!key_exists(key)) return gt_now() - t0;
    usleep(50000);
  }
  return -1;
}

static void test_grant_ttl_revoke(void **state) {
  (void)state;
  int64_t id = 0, ttl = 0, granted = 0;
  ETCD_OK(gt_etcd_lease_grant(cli, 30, &id));
  assert_true(id != 0);
  ETCD_OK(gt_etcd_lease_ttl(cli, id, &ttl, &granted));
  assert_int_equal(granted, 30);
  assert_true(ttl >= 28 && ttl <= 30);
  ETCD_OK(gt_etcd_put(cli, "lease/a", "1", 1, id, NULL, NULL));
  gt_etcd_kvs r;
  ETCD_OK(gt_etcd_get(cli, "lease/a", NULL, &r));
  assert_int_equal(r.n, 1);
  assert_int_equal(r.kvs[0].lease, id);
  gt_etcd_kvs_free(&r);
  ETCD_OK(gt_etcd_lease_revoke(cli, id));
  assert_int_equal(key_exists("lease/a"), 0);
  assert_int_equal(gt_etcd_lease_ttl(cli, id, &ttl, NULL), GT_ENOTFOUND);
  assert_int_equal(gt_etcd_lease_revoke(cli, id), GT_ENOTFOUND);
  assert_int_equal(gt_etcd_put(cli, "lease/b", "1", 1, id, NULL, NULL), GT_ENOTFOUND);
}

static void test_keepalive_then_expiry(void **state) {
  (void)state;
  int64_t id;
  ETCD_OK(gt_etcd_lease_grant(cli, 2, &id));
  ETCD_OK(gt_etcd_put(cli, "lease/kept", "1", 1, id, NULL, NULL));
  gt_etcd_keepalive *ka;
  ETCD_OK(gt_etcd_keepalive_start(cli, id, NULL, NULL, &ka));
  /* Twice the TTL: without renewals the lease would be gone. Not a bound
   * on the library: it renews every 0.67 s, a renewal takes milliseconds,
   * so a renewal may be over 1 s late before the lease is in danger. */
  sleep(4);
  assert_int_equal(gt_etcd_keepalive_lost(ka), 0);
  assert_int_equal(key_exists("lease/kept"), 1);
  int64_t ttl;
  ETCD_OK(gt_etcd_lease_ttl(cli, id, &ttl, NULL));
  assert_true(ttl >= 1);
  assert_int_equal(gt_etcd_keepalive_ttl(ka), 2);
  gt_etcd_keepalive_stop(ka);
  /* Without renewals the lease, and its key, go within about the TTL
   * (1.9 s measured; etcd checks for expired leases every 0.5 s): 30 s is
   * > 10x, and only a lease that is still renewed gets that far. */
  double gone = wait_gone("lease/kept", 30);
  print_message("lease gone %.2f s after the last renewal stopped\n", gone);
  assert_true(gone >= 0);
  assert_int_equal(gt_etcd_lease_ttl(cli, id, &ttl, NULL), GT_ENOTFOUND);
}

static atomic_int lost_calls;
static atomic_llong lost_id;
static void on_lost(void *arg, int64_t id) {
  assert_ptr_equal(arg, &lost_calls);
  atomic_store(&lost_id, id);
  atomic_fetch_add(&lost_calls, 1);
}

static void test_keepalive_reports_revoke(void **state) {
  (void)state;
  int64_t id;
  ETCD_OK(gt_etcd_lease_grant(cli, 3, &id));
  gt_etcd_keepalive *ka;
  atomic_store(&lost_calls, 0);
  ETCD_OK(gt_etcd_keepalive_start(cli, id, on_lost, &lost_calls, &ka));
  /* Nothing to see in 0.3 s but a keepalive that fails at once, which
   * load can only make less likely: not a bound. */
  usleep(300000);
  assert_int_equal(gt_etcd_keepalive_lost(ka), 0);
  ETCD_OK(gt_etcd_lease_revoke(cli, id));
  /* Seen at the next renewal, within a third of the TTL (1 s): 30 s is
   * 30x, polled. */
  double t0 = gt_now();
  while (!gt_etcd_keepalive_lost(ka) && gt_now() - t0 < 30) usleep(20000);
  assert_int_equal(gt_etcd_keepalive_lost(ka), 1);
  /* The flag is set before the callback runs: stopping joins the
   * keepalive's thread, after which the count is final. */
  gt_etcd_keepalive_stop(ka);
  assert_int_equal(atomic_load(&lost_calls), 1);
  assert_int_equal(atomic_load(&lost_id), id);
}

static void test_keepalive_lost_when_server_gone(void **state) {
  (void)state;
  int64_t id;
  ETCD_OK(gt_etcd_lease_grant(cli, 2, &id));
  gt_etcd_keepalive *ka;
  atomic_store(&lost_calls, 0);
  ETCD_OK(gt_etcd_keepalive_start(cli, id, on_lost, &lost_calls, &ka));
  /* Most likely a renewal or two before the server goes. Not a bound: the
   * lease's time runs from the last renewal, or from the start if there
   * was none, both before the stop. */
  usleep(200000);
  assert_int_equal(etcd_fixture_stop(&fx), 0);
  double t0 = gt_now();
  while (!gt_etcd_keepalive_lost(ka) && gt_now() - t0 < 30) usleep(20000);
  double dt = gt_now() - t0;
  print_message("lease lost %.2f s after the server stopped\n", dt);
  assert_int_equal(gt_etcd_keepalive_lost(ka), 1);
  /* At most the TTL (2 s) after the last renewal, which came before the
   * stop, plus 1 s. With the server gone the keepalive checks its
   * deadline after each failed attempt and never sleeps past it, so it
   * notices within its 10 ms poll (1.81 s after the stop measured on
   * loaded cores): the 1 s of slack is > 50x that. */
  assert_true(dt <= 2.0 + 1.0);
  gt_etcd_keepalive_stop(ka); /* joins the thread that ran the callback */
  assert_int_equal(atomic_load(&lost_calls), 1);
  assert_int_equal(etcd_fixture_resume(&fx), 0);
  int64_t ttl;
  gt_status st = gt_etcd_lease_ttl(cli, id, &ttl, NULL);
  /* The server may still hold it briefly after restart (etcd extends
   * leases on leader change) but it never renews it again. */
  assert_true(st == GT_OK || st == GT_ENOTFOUND);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grant_ttl_revoke),
      cmocka_unit_test(test_keepalive_then_expiry),
      cmocka_unit_test(test_keepalive_reports_revoke),
      cmocka_unit_test(test_keepalive_lost_when_server_gone),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
