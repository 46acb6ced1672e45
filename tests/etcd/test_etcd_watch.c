/* Watches: order, history, cancel, resume across a server restart without
 * loss or repetition, and compaction reported as such. */
#include <pthread.h>
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

/* Events copied out of callbacks. */
typedef struct rec {
  pthread_mutex_t mu;
  int n, cap;
  gt_etcd_event_type *type;
  int64_t *rev;
  char **key, **val;
} rec;

static void rec_init(rec *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
}

static void rec_free(rec *r) {
  for (int i = 0; i < r->n; i++) {
    free(r->key[i]);
    free(r->val[i]);
  }
  free(r->type);
  free(r->rev);
  free(r->key);
  free(r->val);
  pthread_mutex_destroy(&r->mu);
}

static void rec_add(rec *r, const gt_etcd_event *ev) {
  pthread_mutex_lock(&r->mu);
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 64;
    r->type = realloc(r->type, sizeof *r->type * (size_t)r->cap);
    r->rev = realloc(r->rev, sizeof *r->rev * (size_t)r->cap);
    r->key = realloc(r->key, sizeof *r->key * (size_t)r->cap);
    r->val = realloc(r->val, sizeof *r->val * (size_t)r->cap);
  }
  r->type[r->n] = ev->type;
  r->rev[r->n] = ev->revision;
  r->key[r->n] = strdup(ev->kv.key ? ev->kv.key : "");
  r->val[r->n] = strdup(ev->kv.value ? (char *)ev->kv.value : "");
  r->n++;
  pthread_mutex_unlock(&r->mu);
}

static void on_event(void *arg, const gt_etcd_event *ev) { rec_add(arg, ev); }

static int rec_count(rec *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* Polled: a generous limit costs nothing when the events come. */
static int wait_count(rec *r, int n, double limit_s) {
  double t0 = gt_now();
  while (rec_count(r) < n && gt_now() - t0 < limit_s) usleep(5000);
  return rec_count(r);
}

static void test_order_and_cancel(void **state) {
  (void)state;
  rec r;
  rec_init(&r);
  gt_etcd_watch *w;
  gt_etcd_watch_opts o = {.prefix = 1};
  ETCD_OK(gt_etcd_watch_start(cli, "wo/", &o, on_event, &r, &w));
  ETCD_OK(gt_etcd_put(cli, "wo-outside", "x", 1, 0, NULL, NULL));
  int64_t revs[6];
  char key[16], val[16];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "wo/%d", i);
    snprintf(val, sizeof val, "v%d", i);
    ETCD_OK(gt_etcd_put(cli, key, val, strlen(val), 0, NULL, &revs[i]));
  }
  ETCD_OK(gt_etcd_del(cli, "wo/2", 0, NULL));
  gt_etcd_kvs kv;
  ETCD_OK(gt_etcd_get(cli, "wo/", NULL, &kv));
  revs[5] = kv.revision;
  gt_etcd_kvs_free(&kv);
  assert_int_equal(wait_count(&r, 6, 30), 6); /* milliseconds */
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "wo/%d", i);
    snprintf(val, sizeof val, "v%d", i);
    assert_int_equal(r.type[i], GT_ETCD_EVENT_PUT);
    assert_string_equal(r.key[i], key);
    assert_string_equal(r.val[i], val);
    assert_int_equal(r.rev[i], revs[i]);
  }
  assert_int_equal(r.type[5], GT_ETCD_EVENT_DELETE);
  assert_string_equal(r.key[5], "wo/2");
  assert_int_equal(r.rev[5], revs[5]);
  assert_int_equal(gt_etcd_watch_revision(w), revs[5]);
  assert_int_equal(gt_etcd_watch_status(w), GT_OK);
  gt_etcd_watch_cancel(w);
  ETCD_OK(gt_etcd_put(cli, "wo/9", "late", 4, 0, NULL, NULL));
  /* Room for a wrong event to arrive (a live watch gets one in ms). Not a
   * bound: load can only hide such a bug, never fail a correct watch. */
  usleep(200000);
  assert_int_equal(rec_count(&r), 6); /* nothing after cancel */
  rec_free(&r);
}

static void test_queue_from_history(void **state) {
  (void)state;
  int64_t first, rev;
  ETCD_OK(gt_etcd_put(cli, "wq", "a", 1, 0, NULL, &first));
  ETCD_OK(gt_etcd_put(cli, "wq", "b", 1, 0, NULL, NULL));
  ETCD_OK(gt_etcd_put(cli, "wq", "c", 1, 0, NULL, &rev));
  gt_etcd_watch *w;
  gt_etcd_watch_opts o = {.start_revision = first};
  ETCD_OK(gt_etcd_watch_start(cli, "wq", &o, NULL, NULL, &w));
  const char *want[] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    gt_etcd_event ev;
    ETCD_OK(gt_etcd_watch_next(w, &ev, ETCD_CALL_MS));
    assert_int_equal(ev.type, GT_ETCD_EVENT_PUT);
    assert_string_equal((char *)ev.kv.value, want[i]);
    assert_int_equal(ev.kv.version, i + 1);
    gt_etcd_event_free(&ev);
  }
  gt_etcd_event ev;
  assert_int_equal(gt_etcd_watch_next(w, &ev, 100), GT_ETIMEDOUT); /* meant to run out */
  assert_int_equal(gt_etcd_watch_revision(w), rev);
  gt_etcd_watch_cancel(w);
}

/* Writes keys rs/0000.. with value = index, while the test restarts etcd. */
typedef struct writer {
  int n;
  int64_t first_rev, last_rev;
  int failures;
} writer;

static void *write_main(void *arg) {
  writer *wr = arg;
  for (int i = 0; i < wr->n; i++) {
    char key[32], val[32];
    snprintf(key, sizeof key, "rs/%04d", i);
    snprintf(val, sizeof val, "%d", i);
    int64_t rev = 0;
    /* The client retries through the restart within its deadline. */
    gt_status st = gt_etcd_put(cli, key, val, strlen(val), 0, NULL, &rev);
    if (st != GT_OK) {
      wr->failures++;
      i--;
      if (wr->failures > 20) return NULL;
      continue;
    }
    if (i == 0) wr->first_rev = rev;
    wr->last_rev = rev;
    if (i % 4 == 0) usleep(2000);
  }
  return NULL;
}

static void test_resume_across_restart(void **state) {
  (void)state;
  rec r;
  rec_init(&r);
  gt_etcd_watch *w;
  gt_etcd_watch_opts o = {.prefix = 1};
  ETCD_OK(gt_etcd_watch_start(cli, "rs/", &o, on_event, &r, &w));
  writer wr = {.n = 400};
  pthread_t t;
  pthread_create(&t, NULL, write_main, &wr);
  double t0 = gt_now();
  /* 120 of the writer's puts: under a second, a few under load; 60 s only
   * ends a broken run. */
  while (rec_count(&r) < 120 && gt_now() - t0 < 60) usleep(2000);
  assert_true(rec_count(&r) >= 120);
  assert_int_equal(etcd_fixture_restart(&fx), 0);
  pthread_join(t, NULL);
  assert_true(wr.failures <= 20);
  assert_true(wr.last_rev > 0);

  /* The server's own history of rs/ is the reference. */
  gt_etcd_kvs kv;
  ETCD_OK(gt_etcd_get(cli, "rs/", &(gt_etcd_get_opts){.prefix = 1}, &kv));
  assert_int_equal(kv.n, 400);
  gt_etcd_kvs_free(&kv);
  gt_etcd_watch *h;
  ETCD_OK(gt_etcd_watch_start(cli, "rs/", &(gt_etcd_watch_opts){.prefix = 1, .start_revision = wr.first_rev}, NULL,
                              NULL, &h));
  int nh = 0;
  for (;;) {
    gt_etcd_event ev;
    /* History is replayed in ms; the loop ends at the last revision, so
     * the wait only matters when events are missing. */
    if (gt_etcd_watch_next(h, &ev, ETCD_CALL_MS) != GT_OK) break;
    int64_t rev = ev.revision;
    assert_true(nh < r.n || wait_count(&r, nh + 1, 30) > nh);
    assert_int_equal(r.type[nh], ev.type);
    assert_int_equal(r.rev[nh], rev);
    assert_string_equal(r.key[nh], ev.kv.key);
    assert_string_equal(r.val[nh], (char *)ev.kv.value);
    gt_etcd_event_free(&ev);
    nh++;
    if (rev == wr.last_rev) break;
  }
  assert_true(nh >= 400);
  /* Room for a repeated event to arrive. Not a bound: load can only hide
   * such a bug. */
  usleep(100000);
  assert_int_equal(rec_count(&r), nh); /* none repeated, none extra */
  for (int i = 1; i < r.n; i++) assert_true(r.rev[i] > r.rev[i - 1]);
  gt_etcd_watch_cancel(h);
  gt_etcd_watch_cancel(w);
  rec_free(&r);
}

static void test_compacted(void **state) {
  (void)state;
  int64_t first, rev;
  ETCD_OK(gt_etcd_put(cli, "wc", "a", 1, 0, NULL, &first));
  ETCD_OK(gt_etcd_put(cli, "wc", "b", 1, 0, NULL, &rev));
  char revs[32];
  snprintf(revs, sizeof revs, "%lld", (long long)rev);
  const char *args[] = {"compact", revs, NULL};
  assert_int_equal(etcd_fixture_ctl(&fx, args), 0);
  gt_etcd_watch *w;
  ETCD_OK(gt_etcd_watch_start(cli, "wc", &(gt_etcd_watch_opts){.start_revision = first}, NULL, NULL, &w));
  gt_etcd_event ev;
  ETCD_OK(gt_etcd_watch_next(w, &ev, ETCD_CALL_MS));
  assert_int_equal(ev.type, GT_ETCD_EVENT_COMPACTED);
  assert_int_equal(ev.revision, rev);
  gt_etcd_event_free(&ev);
  assert_int_equal(gt_etcd_watch_status(w), GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "compacted"));
  gt_etcd_watch_cancel(w);
  /* Reading a compacted revision is an error too. */
  gt_etcd_kvs kv;
  assert_int_equal(gt_etcd_get(cli, "wc", &(gt_etcd_get_opts){.revision = first}, &kv), GT_ERANGE);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_cancel),
      cmocka_unit_test(test_queue_from_history),
      cmocka_unit_test(test_resume_across_restart),
      cmocka_unit_test(test_compacted),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
