/* The gt_store on etcd: set/get/wait block on watches, add is atomic
 * across threads, barriers release everyone together, prefixes isolate. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"
#include "giant/engine/store.h"

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

static gt_store *make(const char *prefix) {
  gt_store *s;
  ETCD_OK(gt_etcd_store_create(cli, prefix, &s));
  return s;
}

typedef struct getter {
  gt_store *s;
  const char *key;
  int timeout_ms;
  gt_status st;
  char *val;
  size_t len;
  double done_at;
} getter;

static void *get_main(void *arg) {
  getter *g = arg;
  void *v = NULL;
  g->st = gt_store_get(g->s, g->key, &v, &g->len, g->timeout_ms);
  g->val = v;
  g->done_at = gt_now();
  return NULL;
}

static void test_set_get_wait_del(void **state) {
  (void)state;
  gt_store *s = make("/job1/");
  ETCD_OK(gt_store_set(s, "addr/0", "10.0.0.1:7000", 13));
  void *v;
  size_t len;
  ETCD_OK(gt_store_get(s, "addr/0", &v, &len, ETCD_CALL_MS));
  assert_int_equal(len, 13);
  assert_string_equal(v, "10.0.0.1:7000");
  free(v);
  /* The key lives under the prefix in etcd. */
  ETCD_OK(gt_etcd_get_value(cli, "/job1/addr/0", &v, &len, NULL));
  free(v);

  /* get blocks until another thread sets the key. */
  getter g = {.s = s, .key = "late", .timeout_ms = ETCD_CALL_MS};
  pthread_t t;
  pthread_create(&t, NULL, get_main, &g);
  /* Most likely waiting by now. Not a bound: a get that starts after the
   * set finds the key at once and passes the same checks. */
  usleep(300000);
  double set_at = gt_now();
  ETCD_OK(gt_store_set(s, "late", "here", 4));
  pthread_join(t, NULL);
  ETCD_OK(g.st);
  assert_string_equal(g.val, "here");
  /* Woken by the set through its watch: tens of ms on loaded cores. 3 s
   * is > 10x that with sanitizers, and a tenth of the get's own timeout. */
  print_message("a waiting get returned %.3f s after the set\n", g.done_at - set_at);
  assert_true(g.done_at >= set_at && g.done_at - set_at < 3.0);
  free(g.val);

  /* A key that never comes: GT_ETIMEDOUT at about the timeout. */
  double t0 = gt_now();
  assert_int_equal(gt_store_get(s, "never", &v, &len, 300), GT_ETIMEDOUT);
  double dt = gt_now() - t0;
  assert_true(dt >= 0.29 && dt < 0.3 + ETCD_LATE_S);

  const char *keys[] = {"w/a", "w/b", "w/c"};
  assert_int_equal(gt_store_wait(s, keys, 3, 200), GT_ETIMEDOUT);
  ETCD_OK(gt_store_set(s, "w/a", "1", 1));
  ETCD_OK(gt_store_set(s, "w/c", "1", 1));
  getter g2 = {.s = s, .key = "w/b", .timeout_ms = ETCD_CALL_MS};
  pthread_create(&t, NULL, get_main, &g2);
  usleep(100000); /* as above: not a bound */
  ETCD_OK(gt_store_set(s, "w/b", "1", 1));
  ETCD_OK(gt_store_wait(s, keys, 3, ETCD_CALL_MS));
  pthread_join(t, NULL);
  ETCD_OK(g2.st);
  free(g2.val);

  ETCD_OK(gt_store_del(s, "late"));
  assert_int_equal(gt_store_get(s, "late", &v, &len, 100), GT_ETIMEDOUT);

  /* Another prefix sees none of it. */
  gt_store *other = make("/job2/");
  assert_int_equal(gt_store_get(other, "addr/0", &v, &len, 100), GT_ETIMEDOUT);
  assert_int_equal(gt_store_set(other, "", "x", 1), GT_EINVAL);
  gt_store_destroy(other);
  gt_store_destroy(s);
}

#define NT 4
#define NADD 30

typedef struct adder {
  gt_store *s;
  int64_t results[NADD];
  gt_status st;
} adder;

static void *add_main(void *arg) {
  adder *a = arg;
  a->st = GT_OK;
  for (int i = 0; i < NADD && a->st == GT_OK; i++) a->st = gt_store_add(a->s, "ctr", 1, &a->results[i]);
  return NULL;
}

static void test_add(void **state) {
  (void)state;
  gt_store *s = make("/add/");
  adder a[NT];
  pthread_t t[NT];
  for (int i = 0; i < NT; i++) {
    a[i].s = s;
    pthread_create(&t[i], NULL, add_main, &a[i]);
  }
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  /* Every add saw a distinct total: together exactly 1..NT*NADD. */
  char seen[NT * NADD + 1] = {0};
  for (int i = 0; i < NT; i++) {
    ETCD_OK(a[i].st);
    for (int k = 0; k < NADD; k++) {
      int64_t r = a[i].results[k];
      assert_true(r >= 1 && r <= NT * NADD);
      assert_int_equal(seen[r], 0);
      seen[r] = 1;
    }
  }
  int64_t r;
  ETCD_OK(gt_store_add(s, "ctr", -20, &r));
  assert_int_equal(r, NT * NADD - 20);
  ETCD_OK(gt_store_set(s, "text", "abc", 3));
  assert_int_equal(gt_store_add(s, "text", 1, &r), GT_EFORMAT);
  gt_store_destroy(s);
}

typedef struct member {
  int rank;
  gt_store *s;
  double arrive_at, leave_at;
  gt_status st;
} member;

static void *barrier_main(void *arg) {
  member *m = arg;
  usleep((useconds_t)(m->rank * 150000)); /* staggered arrivals (the scenario, not a bound) */
  m->arrive_at = gt_now();
  m->st = gt_store_barrier(m->s, "b1", m->rank, NT, ETCD_CALL_MS);
  m->leave_at = gt_now();
  return NULL;
}

static void test_barrier(void **state) {
  (void)state;
  member m[NT];
  pthread_t t[NT];
  for (int i = 0; i < NT; i++) {
    m[i] = (member){.rank = i, .s = make("/bar/")}; /* one store per participant */
    pthread_create(&t[i], NULL, barrier_main, &m[i]);
  }
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  double last = 0;
  for (int i = 0; i < NT; i++) last = m[i].arrive_at > last ? m[i].arrive_at : last;
  for (int i = 0; i < NT; i++) {
    ETCD_OK(m[i].st);
    assert_true(m[i].leave_at >= last); /* nobody left before the last arrived */
    /* Released by the last arrival through a watch: tens of ms on loaded
     * cores; 3 s is > 10x that with sanitizers. */
    assert_true(m[i].leave_at - last < 3.0);
    gt_store_destroy(m[i].s);
  }
  /* A barrier nobody completes times out with a message. */
  gt_store *s = make("/bar/");
  assert_int_equal(gt_store_barrier(s, "b2", 0, 2, 200), GT_ETIMEDOUT); /* meant to run out */
  assert_non_null(strstr(gt_last_error(), "b2"));
  gt_store_destroy(s);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_get_wait_del),
      cmocka_unit_test(test_add),
      cmocka_unit_test(test_barrier),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
