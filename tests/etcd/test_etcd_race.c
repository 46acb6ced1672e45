/* Transactions raced by separate processes: exactly one creator wins, and
 * compare-and-swap increments are never lost. The parent forks before it
 * touches gRPC; each child makes its own client. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"
#include "giant/engine/store.h"

#define NPROC 4

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

/* Runs child(i) in NPROC processes released together through a pipe;
 * fills codes[] with their exit codes. */
static void race(int (*child)(int i, const char *arg), const char *arg, int codes[NPROC]) {
  int go[2], ready[2];
  assert_int_equal(pipe(go), 0);
  assert_int_equal(pipe(ready), 0);
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      alarm(50); /* a stuck child must not hang the test (each takes < 1 s) */
      char b;
      if (write(ready[1], "r", 1) != 1) _exit(3);
      if (read(go[0], &b, 1) != 1) _exit(3);
      _exit(child(i, arg));
    }
  }
  close(go[0]);
  close(ready[1]);
  /* Every child at its starting line, then all released at once. */
  for (int i = 0; i < NPROC; i++) {
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
  }
  close(ready[0]);
  char bytes[NPROC] = {0};
  assert_int_equal(write(go[1], bytes, NPROC), NPROC);
  close(go[1]);
  for (int i = 0; i < NPROC; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  }
}

static gt_etcd_client *child_connect(void) {
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c = NULL;
  if (gt_etcd_connect(&cfg, &c) != GT_OK) return NULL;
  return c;
}

static int create_child(int i, const char *key) {
  gt_etcd_client *c = child_connect();
  if (!c) return 2;
  char val[16];
  snprintf(val, sizeof val, "%d", i);
  int created = -1;
  gt_status st = gt_etcd_create(c, key, val, strlen(val), 0, &created);
  gt_etcd_close(c);
  if (st != GT_OK) {
    fprintf(stderr, "child %d: %s\n", i, gt_last_error());
    return 2;
  }
  return created ? 0 : 1;
}

static int add_child(int i, const char *prefix) {
  (void)i;
  gt_etcd_client *c = child_connect();
  if (!c) return 2;
  gt_store *s = NULL;
  int rc = 0;
  if (gt_etcd_store_create(c, prefix, &s) != GT_OK) rc = 2;
  for (int k = 0; rc == 0 && k < 25; k++) {
    int64_t v;
    if (gt_store_add(s, "counter", 1, &v) != GT_OK) {
      fprintf(stderr, "child %d: %s\n", i, gt_last_error());
      rc = 2;
    }
  }
  gt_store_destroy(s);
  gt_etcd_close(c);
  return rc;
}

static void test_races(void **state) {
  (void)state;
  /* Every fork happens before this process first uses gRPC. */
  int winners_by_round[5];
  for (int round = 0; round < 5; round++) {
    char key[32];
    snprintf(key, sizeof key, "race/%d", round);
    int codes[NPROC];
    race(create_child, key, codes);
    int winners = 0, winner = -1;
    for (int i = 0; i < NPROC; i++) {
      assert_true(codes[i] == 0 || codes[i] == 1);
      if (codes[i] == 0) {
        winners++;
        winner = i;
      }
    }
    assert_int_equal(winners, 1);
    winners_by_round[round] = winner;
  }
  int codes[NPROC];
  race(add_child, "/race-store/", codes);
  for (int i = 0; i < NPROC; i++) assert_int_equal(codes[i], 0);

  gt_etcd_client *c = child_connect();
  assert_non_null(c);
  for (int round = 0; round < 5; round++) {
    char key[32];
    snprintf(key, sizeof key, "race/%d", round);
    void *v;
    size_t len;
    ETCD_OK(gt_etcd_get_value(c, key, &v, &len, NULL));
    assert_int_equal(atoi(v), winners_by_round[round]); /* the winner's own value */
    free(v);
  }
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(c, "/race-store/counter", &v, &len, NULL));
  assert_string_equal(v, "100"); /* NPROC * 25 increments, none lost */
  free(v);
  gt_etcd_close(c);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_races)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
