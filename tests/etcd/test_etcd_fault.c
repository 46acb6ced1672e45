/* Faults: a server killed or frozen mid-call gives a clear error by the
 * deadline, and the same client works again once the server is back. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"

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
  int ok, failed;
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
      l->ok++;
    } else {
      if (!l->failed++) {
        l->first_error = st;
        snprintf(l->msg, sizeof l->msg, "%s", gt_last_error());
      }
      if (dt > l->worst_failure_s) l->worst_failure_s = dt;
    }
  }
  return NULL;
}

static void test_killed_mid_call(void **state) {
  (void)state;
  loop l = {.c = etcd_test_connect(fx.endpoint, 1000)};
  pthread_t t;
  pthread_create(&t, NULL, put_loop, &l);
  usleep(300000);
  assert_true(l.ok > 0);
  etcd_fixture_signal(&fx, SIGKILL);
  usleep(2500000);
  atomic_store(&l.stop, 1);
  pthread_join(t, NULL);
  fprintf(stderr, "killed: %d failures, first %s: %s; worst %.2f s\n", l.failed,
          gt_status_name(l.first_error), l.msg, l.worst_failure_s);
  assert_true(l.failed >= 1);
  assert_true(l.first_error == GT_ECONN || l.first_error == GT_ETIMEDOUT);
  assert_non_null(strstr(l.msg, fx.endpoint));
  assert_true(l.worst_failure_s < 1.5); /* the deadline, plus slack */

  /* Back on the same port: the same client recovers by itself. */
  assert_int_equal(etcd_fixture_resume(&fx), 0);
  gt_etcd_set_timeout(l.c, 5000);
  double t0 = gt_now();
  ETCD_OK(gt_etcd_put(l.c, "fault/k", "again", 5, 0, NULL, NULL));
  fprintf(stderr, "first put after restart took %.3f s\n", gt_now() - t0);
  gt_etcd_close(l.c);
}

static void test_frozen_server(void **state) {
  (void)state;
  gt_etcd_client *c = etcd_test_connect(fx.endpoint, 800);
  ETCD_OK(gt_etcd_put(c, "fault/f", "1", 1, 0, NULL, NULL));
  assert_int_equal(etcd_fixture_signal(&fx, SIGSTOP), 0);
  double t0 = gt_now();
  gt_status st = gt_etcd_put(c, "fault/f", "2", 1, 0, NULL, NULL);
  double dt = gt_now() - t0;
  fprintf(stderr, "frozen: %s after %.2f s: %s\n", gt_status_name(st), dt, gt_last_error());
  assert_int_equal(st, GT_ETIMEDOUT);
  assert_true(dt >= 0.75 && dt < 1.5);
  /* Watches and keepalives report the same way when they cannot start. */
  gt_etcd_watch *w;
  t0 = gt_now();
  assert_int_equal(gt_etcd_watch_start(c, "fault/f", NULL, NULL, NULL, &w), GT_ETIMEDOUT);
  assert_true(gt_now() - t0 < 1.5);
  gt_etcd_keepalive *ka;
  assert_int_equal(gt_etcd_keepalive_start(c, 1234, NULL, NULL, &ka), GT_ETIMEDOUT);
  etcd_fixture_signal(&fx, SIGCONT);
  gt_etcd_set_timeout(c, 5000);
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
  gt_etcd_client *c = etcd_test_connect(fx.endpoint, 500);
  gt_etcd_watch *w = NULL;
  double t0 = gt_now();
  gt_status st = gt_etcd_watch_start(c, "fault/w", NULL, NULL, NULL, &w);
  double dt = gt_now() - t0;
  fprintf(stderr, "watch on a stopped server: %s after %.2f s: %s\n", gt_status_name(st), dt,
          gt_last_error());
  assert_true(st == GT_ETIMEDOUT || st == GT_ECONN);
  assert_null(w);
  assert_true(dt < 1.5);
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
