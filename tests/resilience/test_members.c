/* Membership epochs on a real etcd (resilience/members/members.h): ranks leave and
 * come back in numbered epochs, join requests are taken once, and the
 * watcher tells a lost rank's epoch from a join's, and reads the count of
 * join requests off the caller's path: with etcd frozen, asking it costs
 * the caller nothing. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "etcd/etcd_test.h"
#include "resilience/members/members.h"
#include "giant/engine/store.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;
static gt_etcd_client *cli;
static int prefixes;

/* A request to etcd on loopback takes ~1 ms, ~50 ms on loaded cores (a
 * put waits for etcd's fsync): 5 s is 100x, so only a dead (or frozen)
 * etcd times out. */
#define ETCD_TIMEOUT_MS 5000

static int setup(void **state) {
  (void)state;
  return etcd_test_up(&fx, &cli, ETCD_TIMEOUT_MS);
}

static int teardown(void **state) {
  (void)state;
  return etcd_test_down(&fx, cli);
}

static gt_store *fresh_store(void) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "/giant-test/members%d/", prefixes++);
  gt_store *s;
  ETCD_OK(gt_etcd_store_create(cli, prefix, &s));
  return s;
}

static void expect_ranks(const int *got, int n, const int *want, int nwant) {
  assert_int_equal(n, nwant);
  for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static void test_epochs_and_joins(void **state) {
  (void)state;
  gt_store *s = fresh_store();
  int ranks[8], n = 0, epoch = -1, count = 0, joined[8];
  int64_t seen = 0;
  ETCD_OK(gt_members_get(s, 4, 0, ranks, &n, 0));
  expect_ranks(ranks, n, (int[]){0, 1, 2, 3}, 4);
  ETCD_OK(gt_members_remove_set(s, 4, (int[]){1, 2}, 2, &epoch));
  assert_int_equal(epoch, 1);
  ETCD_OK(gt_members_remove_set(s, 4, (int[]){2, 1}, 2, &epoch)); /* a second agent saw the same loss */
  assert_int_equal(epoch, 1);
  ETCD_OK(gt_members_latest(s, 4, &epoch, ranks, &n));
  assert_int_equal(epoch, 1);
  expect_ranks(ranks, n, (int[]){0, 3}, 2);
  /* No request: one read, nothing taken. */
  ETCD_OK(gt_members_joins(s, 4, ranks, n, &seen, joined, &count));
  assert_int_equal(count, 0);
  ETCD_OK(gt_members_request_join(s, 2));
  int64_t total = -1;
  ETCD_OK(gt_members_join_requests(s, &total));
  assert_int_equal(total, 1);
  ETCD_OK(gt_members_joins(s, 4, ranks, n, &seen, joined, &count));
  expect_ranks(joined, count, (int[]){2}, 1);
  assert_int_equal(seen, 1);
  ETCD_OK(gt_members_joins(s, 4, ranks, n, &seen, joined, &count)); /* taken once */
  assert_int_equal(count, 0);
  ETCD_OK(gt_members_add(s, 4, 2, &epoch));
  assert_int_equal(epoch, 2);
  ETCD_OK(gt_members_get(s, 4, 2, ranks, &n, 10000)); /* epoch 2 is there: one read, the bound is for a hang */
  expect_ranks(ranks, n, (int[]){0, 2, 3}, 3);
  /* A node's two ranks leave and come back together: one epoch each way. */
  ETCD_OK(gt_members_remove_set(s, 4, (int[]){2, 3}, 2, &epoch));
  assert_int_equal(epoch, 3);
  ETCD_OK(gt_members_add_set(s, 4, (int[]){3, 2}, 2, &epoch));
  assert_int_equal(epoch, 4);
  ETCD_OK(gt_members_latest(s, 4, &epoch, ranks, &n));
  assert_int_equal(epoch, 4);
  expect_ranks(ranks, n, (int[]){0, 2, 3}, 3);
  gt_store_destroy(s);
}

/* What the watcher's callback saw. */
typedef struct seen_epochs {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls, epoch;
} seen_epochs;

static void on_newer(void *arg, int epoch) {
  seen_epochs *w = arg;
  pthread_mutex_lock(&w->mu);
  w->calls++;
  w->epoch = epoch;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Waits up to timeout_s for the callback's `calls`-th run. */
static int wait_calls(seen_epochs *w, int calls, double timeout_s) {
  double end = gt_now() + timeout_s;
  pthread_mutex_lock(&w->mu);
  while (w->calls < calls && gt_now() < end) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  int got = w->calls;
  pthread_mutex_unlock(&w->mu);
  return got;
}

static void test_watch_lost_not_joined(void **state) {
  (void)state;
  gt_store *s = fresh_store();
  seen_epochs seen = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  int epoch = 0;
  ETCD_OK(gt_members_remove(s, 4, 3, &epoch)); /* epoch 1: 0 1 2 */
  gt_members_watch *w = NULL;
  ETCD_OK(gt_members_watch_start(s, 4, 300, on_newer, &seen, &w));
  gt_members_watch_arm(w, 1);
  /* A join (epoch 2 adds rank 3): left to the training loop. Given ten
   * graces to stand, it must not fire. */
  ETCD_OK(gt_members_add(s, 4, 3, &epoch));
  assert_int_equal(epoch, 2);
  /* a window where nothing may happen: load only makes it quieter */
  assert_int_equal(wait_calls(&seen, 1, 3.0), 0);
  /* A loss (epoch 3 lacks rank 1): fires once the grace is over, ~0.35 s
   * (the grace, then a poll of <= 200 ms); 30 s is > 50x. */
  double t0 = gt_now();
  ETCD_OK(gt_members_remove(s, 4, 1, &epoch));
  assert_int_equal(epoch, 3);
  assert_int_equal(wait_calls(&seen, 1, 30.0), 1);
  double waited = gt_now() - t0;
  print_message("an epoch without rank 1 fired the watcher after %.2f s (grace 0.30 s)\n", waited);
  assert_true(waited >= 0.3); /* a lower bound: the grace is waited out, however fast the machine */
  assert_int_equal(seen.epoch, 3);
  /* Windows where nothing may happen (a second call): load only makes them quieter. */
  assert_int_equal(wait_calls(&seen, 2, 1.0), 1); /* once per armed epoch */
  /* Re-armed at the new epoch: quiet again. */
  gt_members_watch_arm(w, 3);
  assert_int_equal(wait_calls(&seen, 2, 1.0), 1);
  gt_members_watch_stop(w);
  gt_store_destroy(s);
}

/* Waits up to timeout_s for the watcher's count of requests to be `want`. */
static int64_t wait_requests(gt_members_watch *w, int64_t want, double timeout_s) {
  int64_t got = -1;
  for (double end = gt_now() + timeout_s; (got = gt_members_watch_join_requests(w)) != want && gt_now() < end;) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return got;
}

static void test_watch_join_requests(void **state) {
  (void)state;
  gt_store *s = fresh_store();
  seen_epochs seen = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  gt_members_watch *w = NULL;
  ETCD_OK(gt_members_watch_start(s, 4, 2000, on_newer, &seen, &w));
  assert_int_equal(gt_members_watch_join_requests(w), -1); /* not on: nothing read */
  gt_members_watch_joins(w, true);
  /* The watcher reads the count every 500 ms: ~0.5 s, a second or two on
   * loaded cores; 20 s is >= 10x. */
  assert_int_equal(wait_requests(w, 0, 20.0), 0);
  ETCD_OK(gt_members_request_join(s, 2));
  ETCD_OK(gt_members_request_join(s, 3));
  assert_int_equal(wait_requests(w, 2, 20.0), 2);
  /* etcd frozen: the count asked for is the last one read, at once. The
   * asks are timed alone, not the naps between them (which let the
   * watcher try etcd meanwhile): a nap overshoots by a few ms on loaded
   * cores, 50 of them by far more than the asks cost. An ask costs a lock
   * and a read, microseconds; one that asked etcd would hang until the
   * client's timeout (ETCD_TIMEOUT_MS, 5 s). So 0.5 s for all 50 is
   * > 100x their cost and still 10x under a single ask that waited on etcd. */
  assert_int_equal(etcd_fixture_signal(&fx, SIGSTOP), 0);
  double spent = 0;
  int64_t during = 0;
  for (int i = 0; i < 50; i++) {
    double t0 = gt_now();
    during = gt_members_watch_join_requests(w);
    spent += gt_now() - t0;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(etcd_fixture_signal(&fx, SIGCONT), 0);
  print_message("50 asks for the count while etcd was frozen: %.3f ms in all\n", spent * 1e3);
  assert_int_equal(during, 2);
  assert_true(spent < 0.5);
  ETCD_OK(gt_members_request_join(s, 1));
  /* reads again once etcd is back: the read under way when it froze ends
   * as it resumes (or, at worst, at the client's 5 s timeout), then one
   * every 500 ms: ~1 s typically, so 20 s is > 10x (and 3x the worst) */
  assert_int_equal(wait_requests(w, 3, 20.0), 3);
  gt_members_watch_joins(w, false);
  assert_int_equal(gt_members_watch_join_requests(w), -1);
  gt_members_watch_stop(w);
  gt_store_destroy(s);
}

int main(void) {
  if (!etcd_fixture_available()) {
    printf("skipped: etcd not found\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_epochs_and_joins),
      cmocka_unit_test(test_watch_lost_not_joined),
      cmocka_unit_test(test_watch_join_requests),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
