/* Authentication: off, then on (set up with etcdctl), with a wrong or
 * missing password refused clearly, a token that expires replaced
 * transparently, then off again. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;
static const char *const extra[] = {"--auth-token-ttl=2", "--bcrypt-cost=4", NULL};

static int setup(void **state) {
  (void)state;
  etcd_fixture_opts o = {.extra_args = extra};
  return etcd_fixture_start(&fx, &o);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

static int ctl(const char *a, const char *b, const char *c, const char *d) {
  const char *args[] = {a, b, c, d, NULL};
  return etcd_fixture_ctl(&fx, args);
}

static gt_etcd_client *connect_as(const char *user, const char *password, gt_status *st) {
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .user = user, .password = password, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c = NULL;
  *st = gt_etcd_connect(&cfg, &c);
  return c;
}

static void test_auth_on_and_off(void **state) {
  (void)state;
  gt_status st;
  gt_etcd_client *anon = connect_as(NULL, NULL, &st);
  ETCD_OK(st);
  ETCD_OK(gt_etcd_put(anon, "auth/k", "open", 4, 0, NULL, NULL));

  const char *add[] = {"user", "add", "root", "--new-user-password=s3cret", "--interactive=false", NULL};
  assert_int_equal(etcd_fixture_ctl(&fx, add), 0);
  assert_int_equal(ctl("role", "add", "root", NULL), 0);
  assert_int_equal(ctl("user", "grant-role", "root", "root"), 0);
  assert_int_equal(ctl("auth", "enable", NULL, NULL), 0);

  /* No credentials: refused with a message naming the cause. */
  st = gt_etcd_put(anon, "auth/k", "x", 1, 0, NULL, NULL);
  assert_int_equal(st, GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "user"));
  gt_etcd_close(anon);

  gt_etcd_client *bad = connect_as("root", "wrong", &st);
  assert_null(bad);
  assert_int_equal(st, GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "password"));
  bad = connect_as("nobody", "pw", &st);
  assert_int_equal(st, GT_EAUTH);

  gt_etcd_client *c = connect_as("root", "s3cret", &st);
  ETCD_OK(st);
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(c, "auth/k", &v, &len, NULL));
  assert_string_equal(v, "open");
  free(v);
  gt_etcd_watch *w;
  ETCD_OK(gt_etcd_watch_start(c, "auth/k", NULL, NULL, NULL, &w));
  ETCD_OK(gt_etcd_put(c, "auth/k", "closed", 6, 0, NULL, NULL));
  gt_etcd_event ev;
  ETCD_OK(gt_etcd_watch_next(w, &ev, ETCD_CALL_MS));
  assert_string_equal((char *)ev.kv.value, "closed");
  gt_etcd_event_free(&ev);
  gt_etcd_watch_cancel(w);

  /* The server forgets the token after 2 idle seconds; the client signs
   * in again by itself. The sleep is the idle time, not a bound: were the
   * token still alive, the calls below would pass the same way. */
  sleep(3);
  ETCD_OK(gt_etcd_put(c, "auth/k", "later", 5, 0, NULL, NULL));
  int64_t id;
  ETCD_OK(gt_etcd_lease_grant(c, 10, &id));
  gt_etcd_keepalive *ka;
  ETCD_OK(gt_etcd_keepalive_start(c, id, NULL, NULL, &ka));
  /* The keepalive renews every 3.3 s: nothing to see in 0.3 s but a
   * keepalive that fails at once, which load can only make less likely. */
  usleep(300000);
  assert_int_equal(gt_etcd_keepalive_lost(ka), 0);
  gt_etcd_keepalive_stop(ka);

  assert_int_equal(ctl("--user=root:s3cret", "auth", "disable", NULL), 0);
  anon = connect_as(NULL, NULL, &st);
  ETCD_OK(st);
  ETCD_OK(gt_etcd_get_value(anon, "auth/k", &v, &len, NULL));
  assert_string_equal(v, "later");
  free(v);
  gt_etcd_close(anon);
  gt_etcd_close(c);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_auth_on_and_off)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
