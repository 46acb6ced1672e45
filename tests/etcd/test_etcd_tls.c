/* TLS: server and client certificates made here with the openssl CLI,
 * signed by a test CA for the IP 127.0.0.1; a wrong CA, a missing client
 * certificate and plaintext are refused with a clear error in time. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;
static char dir[256];
static char ca[300], srv_cert[300], srv_key[300], cli_cert[300], cli_key[300], other_ca[300];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

static int make_certs(void) {
  snprintf(dir, sizeof dir, "/tmp/giant-etcd-tls-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  snprintf(ca, sizeof ca, "%s/ca.pem", dir);
  snprintf(other_ca, sizeof other_ca, "%s/other-ca.pem", dir);
  snprintf(srv_cert, sizeof srv_cert, "%s/server.pem", dir);
  snprintf(srv_key, sizeof srv_key, "%s/server.key", dir);
  snprintf(cli_cert, sizeof cli_cert, "%s/client.pem", dir);
  snprintf(cli_key, sizeof cli_key, "%s/client.key", dir);
  const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  if (sh("cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj /CN=giant-test-ca "
         ">/dev/null 2>&1",
         dir, ec) ||
      sh("cd %s && openssl req -x509 %s -keyout other-ca.key -out other-ca.pem -days 2 "
         "-subj /CN=giant-other-ca >/dev/null 2>&1",
         dir, ec) ||
      sh("cd %s && printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
         "> server.ext && printf 'extendedKeyUsage=clientAuth\\n' > client.ext",
         dir) ||
      sh("cd %s && openssl req %s -keyout server.key -out server.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 "
         "&& openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
         "-extfile server.ext -out server.pem >/dev/null 2>&1",
         dir, ec) ||
      sh("cd %s && openssl req %s -keyout client.key -out client.csr -subj /CN=giant-client >/dev/null 2>&1 "
         "&& openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
         "-extfile client.ext -out client.pem >/dev/null 2>&1",
         dir, ec))
    return -1;
  return 0;
}

static int setup(void **state) {
  (void)state;
  if (make_certs() != 0) return -1;
  etcd_fixture_opts o = {.cert_file = srv_cert, .key_file = srv_key, .trusted_ca_file = ca};
  return etcd_fixture_start(&fx, &o);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  sh("rm -rf %s", dir);
  return 0;
}

static void test_tls_roundtrip(void **state) {
  (void)state;
  gt_etcd_config cfg = {
      .endpoints = fx.endpoint, .cacert = ca, .cert = cli_cert, .key = cli_key, .timeout_ms = ETCD_CALL_MS};
  gt_etcd_client *c;
  ETCD_OK(gt_etcd_connect(&cfg, &c));
  ETCD_OK(gt_etcd_put(c, "tls/k", "secret", 6, 0, NULL, NULL));
  void *v;
  size_t len;
  ETCD_OK(gt_etcd_get_value(c, "tls/k", &v, &len, NULL));
  assert_string_equal(v, "secret");
  free(v);
  gt_etcd_watch *w;
  ETCD_OK(gt_etcd_watch_start(c, "tls/k", NULL, NULL, NULL, &w));
  ETCD_OK(gt_etcd_put(c, "tls/k", "again", 5, 0, NULL, NULL));
  gt_etcd_event ev;
  ETCD_OK(gt_etcd_watch_next(w, &ev, ETCD_CALL_MS));
  assert_string_equal((char *)ev.kv.value, "again");
  gt_etcd_event_free(&ev);
  gt_etcd_watch_cancel(w);
  gt_etcd_close(c);

  /* An https:// endpoint with a CA works the same. */
  cfg.endpoints = fx.url;
  ETCD_OK(gt_etcd_connect(&cfg, &c));
  ETCD_OK(gt_etcd_get_value(c, "tls/k", &v, &len, NULL));
  assert_string_equal(v, "again");
  free(v);
  gt_etcd_close(c);
}

static void expect_refused(gt_etcd_config cfg, const char *what) {
  cfg.timeout_ms = 800; /* meant to run out, or fail sooner */
  gt_etcd_client *c;
  ETCD_OK(gt_etcd_connect(&cfg, &c));
  double t0 = gt_now();
  gt_status st = gt_etcd_put(c, "tls/x", "y", 1, 0, NULL, NULL);
  double dt = gt_now() - t0;
  fprintf(stderr, "%s: %s (%.2f s): %s\n", what, gt_status_name(st), dt, gt_last_error());
  assert_true(st == GT_ECONN || st == GT_ETIMEDOUT);
  assert_true(strlen(gt_last_error()) > 20);
  /* Refused by the deadline: the client retries the failed handshake
   * until then (0.80 s measured for each case), plus at most ETCD_LATE_S. */
  assert_true(dt < 0.8 + ETCD_LATE_S);
  gt_etcd_close(c);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refused((gt_etcd_config){.endpoints = fx.endpoint, .cacert = other_ca, .cert = cli_cert, .key = cli_key},
                 "wrong CA");
  expect_refused((gt_etcd_config){.endpoints = fx.endpoint, .cacert = ca}, "no client certificate");
  expect_refused((gt_etcd_config){.endpoints = fx.endpoint}, "plaintext to a TLS server");
  /* A file that is not PEM is refused at connect. */
  char bad[300];
  snprintf(bad, sizeof bad, "%s/client.ext", dir);
  gt_etcd_client *c = NULL;
  gt_etcd_config cfg = {.endpoints = fx.endpoint, .cacert = bad};
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "client.ext"));
  cfg = (gt_etcd_config){.endpoints = fx.endpoint, .cacert = ca, .cert = cli_cert, .key = cli_cert};
  assert_int_equal(gt_etcd_connect(&cfg, &c), GT_EFORMAT); /* a certificate is not a key */
  assert_null(c);
}

int main(void) {
  if (!etcd_fixture_available() || system("openssl version >/dev/null 2>&1") != 0) {
    fprintf(stderr, "etcd or openssl not on PATH; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tls_roundtrip),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
