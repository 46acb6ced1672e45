/* Faults: a server killed or frozen mid-call gives a clear error by the
 * deadline, and the same client works again once the server is back. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;

static int setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

typedef struct loop {
  gt_etcd_client *c;
  atomic_int stop;
  atomic_int ok, failed;
  gt_status first_error;
  double worst_failure_s; /* longest time a failing call took */
  char msg[512];
} loop;

static void *put_loop(void *arg) {
  loop *l = arg;
  while (!atomic_load(&l->stop)) {
    double t0 = gt_now();
    gt_status st = gt_etcd_put(l->c, "fault/k", "v", 1, 0, NULL, NULL);
    double dt = gt_now() - t0;
    if (st == GT_OK) {
      atomic_fetch_add(&l->ok, 1);
    } else {
      if (!atomic_fetch_add(&l->failed, 1)) {
        l->first_error = st;
        snprintf(l->msg, sizeof l->msg, "%s", gt_last_error());
      }
      if (dt > l->worst_failure_s) l->worst_failure_s = dt;
    }
  }
  return NULL;
}

/* Waits up to ETCD_CALL_MS for *n to reach at least want. */
static int wait_atomic(atomic_int *n, int want) {
  for (double end = gt_now() + ETCD_CALL_MS / 1000.0; atomic_load(n) < want && gt_now() < end;) usleep(10000);
  return atomic_load(n) >= want;
}

static void test_killed_mid_call(void **state) {
  (void)state;
  /* A put takes milliseconds; the 1 s deadline is what a failing call is
   * held to below (a put that runs out before the kill fails the same
   * way, and the loop goes on). */
  loop l = {.c = etcd_test_connect(fx.endpoint, 1000)};
  pthread_t t;
  pthread_create(&t, NULL, put_loop, &l);
  assert_true(wait_atomic(&l.ok, 1)); /* the loop is going */
  etcd_fixture_signal(&fx, SIGKILL);
  /* Two failures: the put in flight at the kill (or the first after it)
   * and one started with the server already gone. Each takes up to the
   * deadline (1 s measured: it retries the refused connection). */
  assert_true(wait_atomic(&l.failed, 2));
  atomic_store(&l.stop, 1);
  pthread_join(t, NULL);
  fprintf(stderr, "killed: %d failures, first %s: %s; worst %.2f s\n", atomic_load(&l.failed),
          gt_status_name(l.first_error), l.msg, l.worst_failure_s);
  assert_true(atomic_load(&l.failed) >= 1);
  assert_true(l.first_error == GT_ECONN || l.first_error == GT_ETIMEDOUT);
  assert_non_null(strstr(l.msg, fx.endpoint));
  assert_true(l.worst_failure_s < 1.0 + ETCD_LATE_S); /* the deadline, plus slack */

  /* Back on the same port: the same client recovers by itself (5 ms
   * measured). */
  assert_int_equal(etcd_fixture_resume(&fx), 0);
  gt_etcd_set_timeout(l.c, ETCD_CALL_MS);
  double t0 = gt_now();
  ETCD_OK(gt_etcd_put(l.c, "fault/k", "again", 5, 0, NULL, NULL));
  fprintf(stderr, "first put after restart took %.3f s\n", gt_now() - t0);
  gt_etcd_close(l.c);
}

static void test_frozen_server(void **state) {
  (void)state;
  gt_etcd_client *c = etcd_test_connect(fx.endpoint, ETCD_CALL_MS);
  ETCD_OK(gt_etcd_put(c, "fault/f", "1", 1, 0, NULL, NULL));
  /* From here every call is meant to run out against the frozen server. */
  gt_etcd_set_timeout(c, 800);
  assert_int_equal(etcd_fixture_signal(&fx, SIGSTOP), 0);
  double t0 = gt_now();
  gt_status st = gt_etcd_put(c, "fault/f", "2", 1, 0, NULL, NULL);
  double dt = gt_now() - t0;
  fprintf(stderr, "frozen: %s after %.2f s: %s\n", gt_status_name(st), dt, gt_last_error());
  assert_int_equal(st, GT_ETIMEDOUT);
  assert_true(dt >= 0.75 && dt < 0.8 + ETCD_LATE_S); /* 0.80 s measured */
  /* Watches and keepalives report the same way when they cannot start. */
  gt_etcd_watch *w;
  t0 = gt_now();
  assert_int_equal(gt_etcd_watch_start(c, "fault/f", NULL, NULL, NULL, &w), GT_ETIMEDOUT);
  assert_true(gt_now() - t0 < 0.8 + ETCD_LATE_S);
  gt_etcd_keepalive *ka;
  assert_int_equal(gt_etcd_keepalive_start(c, 1234, NULL, NULL, &ka), GT_ETIMEDOUT);
  etcd_fixture_signal(&fx, SIGCONT);
  gt_etcd_set_timeout(c, ETCD_CALL_MS);
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(c, "fault/f", &v, &len, NULL));
  assert_true(strcmp(v, "1") == 0 || strcmp(v, "2") == 0); /* the timed-out put may have applied */
  free(v);
  gt_etcd_close(c);
}

static void test_unreachable_streams(void **state) {
  (void)state;
  etcd_fixture_stop(&fx);
  gt_etcd_client *c = etcd_test_connect(fx.endpoint, 500); /* meant to run out */
  gt_etcd_watch *w = NULL;
  double t0 = gt_now();
  gt_status st = gt_etcd_watch_start(c, "fault/w", NULL, NULL, NULL, &w);
  double dt = gt_now() - t0;
  fprintf(stderr, "watch on a stopped server: %s after %.2f s: %s\n", gt_status_name(st), dt, gt_last_error());
  assert_true(st == GT_ETIMEDOUT || st == GT_ECONN);
  assert_null(w);
  assert_true(dt < 0.5 + ETCD_LATE_S); /* 0.50 s measured */
  assert_non_null(strstr(gt_last_error(), "fault/w"));
  assert_int_equal(gt_etcd_lease_grant(c, 5, &(int64_t){0}), GT_ECONN);
  gt_etcd_close(c);
  assert_int_equal(etcd_fixture_resume(&fx), 0);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_killed_mid_call),
      cmocka_unit_test(test_frozen_server),
      cmocka_unit_test(test_unreachable_streams),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
