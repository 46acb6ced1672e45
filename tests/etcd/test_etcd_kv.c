/* KV, transactions and connection errors against a real etcd. */
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

static void test_put_get(void **state) {
  (void)state;
  int64_t rev1 = 0, rev2 = 0;
  ETCD_OK(gt_etcd_put(cli, "kv/a", "one", 3, 0, NULL, &rev1));
  gt_etcd_kv prev;
  ETCD_OK(gt_etcd_put(cli, "kv/a", "two\0x", 5, 0, &prev, &rev2));
  assert_true(rev2 == rev1 + 1);
  assert_string_equal(prev.key, "kv/a");
  assert_int_equal(prev.value_len, 3);
  assert_memory_equal(prev.value, "one", 3);
  assert_int_equal(prev.mod_revision, rev1);
  gt_etcd_kv_free(&prev);
  ETCD_OK(gt_etcd_put(cli, "kv/new", "x", 1, 0, &prev, NULL));
  assert_null(prev.key); /* nothing before */

  void *val;
  size_t len;
  int64_t mod;
  ETCD_OK(gt_etcd_get_value(cli, "kv/a", &val, &len, &mod));
  assert_int_equal(len, 5);
  assert_memory_equal(val, "two\0x", 5); /* bytes, not strings */
  assert_int_equal(mod, rev2);
  free(val);

  /* Reading at an older revision sees the older value. */
  gt_etcd_get_opts o = {.revision = rev1};
  gt_etcd_kvs r;
  ETCD_OK(gt_etcd_get(cli, "kv/a", &o, &r));
  assert_int_equal(r.n, 1);
  assert_string_equal((char *)r.kvs[0].value, "one");
  assert_int_equal(r.kvs[0].version, 1);
  gt_etcd_kvs_free(&r);

  assert_int_equal(gt_etcd_get_value(cli, "kv/missing", &val, &len, NULL), GT_ENOTFOUND);
  ETCD_OK(gt_etcd_get(cli, "kv/missing", NULL, &r));
  assert_int_equal(r.n, 0);
  assert_true(r.revision >= rev2);
  gt_etcd_kvs_free(&r);
}

static void test_prefix_limit_keys_only_delete(void **state) {
  (void)state;
  char key[32], val[32];
  for (int i = 0; i < 10; i++) {
    snprintf(key, sizeof key, "pfx/%02d", i);
    snprintf(val, sizeof val, "v%d", i * i);
    ETCD_OK(gt_etcd_put(cli, key, val, strlen(val), 0, NULL, NULL));
  }
  ETCD_OK(gt_etcd_put(cli, "pfy", "outside", 7, 0, NULL, NULL));
  ETCD_OK(gt_etcd_put(cli, "pf", "outside", 7, 0, NULL, NULL));
  gt_etcd_get_opts o = {.prefix = 1};
  gt_etcd_kvs r;
  ETCD_OK(gt_etcd_get(cli, "pfx/", &o, &r));
  assert_int_equal(r.n, 10);
  assert_int_equal(r.count, 10);
  assert_false(r.more);
  for (int i = 0; i < 10; i++) {
    snprintf(key, sizeof key, "pfx/%02d", i);
    snprintf(val, sizeof val, "v%d", i * i);
    assert_string_equal(r.kvs[i].key, key); /* sorted by key */
    assert_string_equal((char *)r.kvs[i].value, val);
  }
  gt_etcd_kvs_free(&r);

  o.limit = 3;
  o.keys_only = 1;
  ETCD_OK(gt_etcd_get(cli, "pfx/", &o, &r));
  assert_int_equal(r.n, 3);
  assert_true(r.more);
  assert_int_equal(r.count, 10);
  assert_string_equal(r.kvs[2].key, "pfx/02");
  assert_null(r.kvs[2].value);
  gt_etcd_kvs_free(&r);

  int64_t deleted = -1;
  ETCD_OK(gt_etcd_del(cli, "pfx/03", 0, &deleted));
  assert_int_equal(deleted, 1);
  ETCD_OK(gt_etcd_del(cli, "pfx/03", 0, &deleted));
  assert_int_equal(deleted, 0);
  ETCD_OK(gt_etcd_del(cli, "pfx/", 1, &deleted));
  assert_int_equal(deleted, 9);
  o = (gt_etcd_get_opts){.prefix = 1};
  ETCD_OK(gt_etcd_get(cli, "pf", &o, &r));
  assert_int_equal(r.n, 2); /* "pf" and "pfy" survive */
  gt_etcd_kvs_free(&r);
}

static void test_txn(void **state) {
  (void)state;
  int64_t rev;
  ETCD_OK(gt_etcd_put(cli, "txn/k", "v1", 2, 0, NULL, &rev));
  ETCD_OK(gt_etcd_put(cli, "txn/other", "o", 1, 0, NULL, NULL));
  gt_etcd_cmp cmps[4] = {
      {.key = "txn/k", .target = GT_ETCD_CMP_VALUE, .op = GT_ETCD_EQUAL, .value = "v1", .value_len = 2},
      {.key = "txn/k", .target = GT_ETCD_CMP_VERSION, .op = GT_ETCD_EQUAL, .number = 1},
      {.key = "txn/k", .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL, .number = rev},
      {.key = "txn/k", .target = GT_ETCD_CMP_MOD_REVISION, .op = GT_ETCD_LESS, .number = rev + 1},
  };
  gt_etcd_op succ[3] = {
      {.type = GT_ETCD_OP_PUT, .key = "txn/k", .value = "v2", .value_len = 2},
      {.type = GT_ETCD_OP_GET, .key = "txn/", .prefix = 1},
      {.type = GT_ETCD_OP_DEL, .key = "txn/other"},
  };
  gt_etcd_op fail_ops[1] = {{.type = GT_ETCD_OP_PUT, .key = "txn/failed", .value = "f", .value_len = 1}};
  gt_etcd_txn_result r;
  ETCD_OK(gt_etcd_txn(cli, cmps, 4, succ, 3, fail_ops, 1, &r));
  assert_true(r.succeeded);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.results[1].n, 2); /* the get saw the put before it */
  assert_string_equal((char *)r.results[1].kvs[0].value, "v2");
  assert_int_equal(r.results[2].count, 1);
  gt_etcd_txn_result_free(&r);

  /* Same compares again: version is now 2, so the failure branch runs. */
  ETCD_OK(gt_etcd_txn(cli, cmps, 4, succ, 3, fail_ops, 1, &r));
  assert_false(r.succeeded);
  assert_int_equal(r.n, 1);
  gt_etcd_txn_result_free(&r);
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(cli, "txn/failed", &v, &len, NULL));
  assert_string_equal(v, "f");
  free(v);

  /* Each compare alone decides. */
  for (int i = 0; i < 4; i++) {
    ETCD_OK(gt_etcd_txn(cli, &cmps[i], 1, NULL, 0, NULL, 0, &r));
    int expect = (i == 2); /* only create_revision still holds */
    assert_int_equal(r.succeeded, expect);
    gt_etcd_txn_result_free(&r);
  }
}

static void test_create_cas(void **state) {
  (void)state;
  int created = -1, swapped = -1;
  ETCD_OK(gt_etcd_create(cli, "cas/k", "a", 1, 0, &created));
  assert_int_equal(created, 1);
  ETCD_OK(gt_etcd_create(cli, "cas/k", "b", 1, 0, &created));
  assert_int_equal(created, 0);
  ETCD_OK(gt_etcd_cas(cli, "cas/k", "b", 1, "c", 1, &swapped));
  assert_int_equal(swapped, 0);
  ETCD_OK(gt_etcd_cas(cli, "cas/k", "a", 1, "c", 1, &swapped));
  assert_int_equal(swapped, 1);
  ETCD_OK(gt_etcd_cas(cli, "cas/absent", "", 0, "c", 1, &swapped));
  assert_int_equal(swapped, 0);
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(cli, "cas/k", &v, &len, NULL));
  assert_string_equal(v, "c");
  free(v);
  assert_int_equal(gt_etcd_get_value(cli, "cas/absent", &v, &len, NULL), GT_ENOTFOUND);
}

static void test_bad_input(void **state) {
  (void)state;
  gt_etcd_client *c = NULL;
  const char *bad[] = {"", "127.0.0.1", "127.0.0.1:", ":2379", "127.0.0.1:99999", "127.0.0.1:12ab", "127.0.0.1:2379,,"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gt_etcd_config cfg = {.endpoints = bad[i]};
    assert_int_equal(gt_etcd_connect(&cfg, &c), GT_EINVAL);
    assert_null(c);
    assert_true(strlen(gt_last_error()) > 10);
  }
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .cert = "/nonexistent.pem"};
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_EINVAL); /* cert without key */
  cfg.key = "/nonexistent.key";
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_EIO);
  assert_non_null(strstr(gt_last_error(), "/nonexistent.pem"));
  assert_int_equal(gt_etcd_put(cli, NULL, "x", 1, 0, NULL, NULL), GT_EINVAL);
  assert_int_equal(gt_etcd_lease_grant(cli, 0, &(int64_t){0}), GT_EINVAL);
  gt_etcd_op op = {.type = (gt_etcd_op_type)42, .key = "x"};
  assert_int_equal(gt_etcd_txn(cli, NULL, 0, &op, 1, NULL, 0, NULL), GT_EINVAL);
}

static void test_unreachable_and_failover(void **state) {
  (void)state;
  /* A port nothing listens on: a clear error by the deadline. */
  int dead = fx.peer_port + 1000 < 65000 ? fx.peer_port + 1000 : 1;
  char eps[128];
  snprintf(eps, sizeof eps, "127.0.0.1:%d", dead);
  gt_etcd_client *c = etcd_test_connect(eps, 600); /* meant to run out */
  double t0 = gt_now();
  gt_status st = gt_etcd_put(c, "x", "y", 1, 0, NULL, NULL);
  double dt = gt_now() - t0;
  assert_int_equal(st, GT_ECONN);
  assert_non_null(strstr(gt_last_error(), eps));
  assert_true(dt >= 0.5 && dt < 0.6 + ETCD_LATE_S);
  gt_etcd_close(c);

  /* A dead endpoint first: calls fail over to the live one. */
  snprintf(eps, sizeof eps, "http://127.0.0.1:%d,http://%s/", dead, fx.endpoint);
  c = etcd_test_connect(eps, ETCD_CALL_MS); /* the refused endpoint costs milliseconds */
  ETCD_OK(gt_etcd_put(c, "failover", "ok", 2, 0, NULL, NULL));
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(c, "failover", &v, &len, NULL));
  assert_string_equal(v, "ok");
  assert_string_equal(gt_etcd_endpoint(c), fx.endpoint);
  free(v);
  gt_etcd_close(c);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_put_get),   cmocka_unit_test(test_prefix_limit_keys_only_delete),
      cmocka_unit_test(test_txn),       cmocka_unit_test(test_create_cas),
      cmocka_unit_test(test_bad_input), cmocka_unit_test(test_unreachable_and_failover),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
