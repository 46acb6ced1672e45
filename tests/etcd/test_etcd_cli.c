/* The giant-etcd command-line client, run as a separate program. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "giant/engine/etcd.h"

static etcd_fixture fx;
static char bin[1024];

static int setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

/* Runs giant-etcd with args (a shell fragment); returns its exit status
 * and its stdout in out. */
static int run(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t cap, const char *fmt, ...) {
  char args[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  /* One command takes 10-50 ms (a few hundred under sanitizers on busy
   * cores); 60 s only ends a hung one. */
  snprintf(cmd, sizeof cmd, "timeout 60 %s %s 2>/dev/null", bin, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_cli(void **state) {
  (void)state;
  char out[4096], ep[128];
  snprintf(ep, sizeof ep, "--endpoints=%s --timeout=%d", fx.endpoint, ETCD_CALL_MS);
  assert_int_equal(run(out, sizeof out, "%s put cli/a hello", ep), 0);
  assert_int_equal(run(out, sizeof out, "%s put cli/b world", ep), 0);
  assert_int_equal(run(out, sizeof out, "%s get cli/a", ep), 0);
  assert_string_equal(out, "cli/a\nhello\n");
  assert_int_equal(run(out, sizeof out, "get cli/ --prefix --keys-only %s", ep), 0);
  assert_string_equal(out, "cli/a\ncli/b\n");
  assert_int_equal(run(out, sizeof out, "%s get cli/missing", ep), 1);
  assert_string_equal(out, "");
  assert_int_equal(run(out, sizeof out, "%s del cli/ --prefix", ep), 0);
  assert_string_equal(out, "2\n");

  assert_int_equal(run(out, sizeof out, "%s lease grant 60", ep), 0);
  char id[32];
  snprintf(id, sizeof id, "%.31s", out);
  id[strcspn(id, "\n")] = 0;
  assert_true(strlen(id) > 0);
  assert_int_equal(run(out, sizeof out, "%s put cli/leased x --lease %s", ep, id), 0);
  assert_int_equal(run(out, sizeof out, "%s lease ttl %s", ep, id), 0);
  long ttl = 0, granted = 0;
  assert_int_equal(sscanf(out, "%ld %ld", &ttl, &granted), 2);
  assert_int_equal(granted, 60);
  assert_true(ttl > 50 && ttl <= 60); /* 10 s for two commands of < 1 s each */
  assert_int_equal(run(out, sizeof out, "%s lease keepalive %s --for 1", ep, id), 0);
  assert_int_equal(run(out, sizeof out, "%s lease revoke %s", ep, id), 0);
  assert_int_equal(run(out, sizeof out, "%s get cli/leased", ep), 1);
  assert_int_equal(run(out, sizeof out, "%s lease ttl %s", ep, id), 1);

  /* watch from a past revision prints the history, then stops at --count. */
  gt_etcd_client *c = etcd_test_connect(fx.endpoint, ETCD_CALL_MS);
  int64_t rev;
  ETCD_OK(gt_etcd_put(c, "cli/w", "1", 1, 0, NULL, &rev));
  ETCD_OK(gt_etcd_del(c, "cli/w", 0, NULL));
  gt_etcd_close(c);
  assert_int_equal(run(out, sizeof out, "%s watch cli/w --rev %lld --count 2", ep, (long long)rev), 0);
  char want[256];
  snprintf(want, sizeof want, "PUT\t%lld\tcli/w\t1\nDELETE\t%lld\tcli/w\t\n", (long long)rev, (long long)rev + 1);
  assert_string_equal(out, want);
}

static void test_cli_errors(void **state) {
  (void)state;
  char out[4096];
  const char *bad[] = {
      "",
      "--bogus get x",
      "get",
      "put k",
      "frob x",
      "--timeout=0 get x",
      "--timeout abc get x",
      "--endpoints= get x",
      "--endpoints=nohost get x",
      "--user u get x",
      "lease grant -5",
      "lease grant x",
      "lease ttl zz",
      "get x --limit -1",
      "watch x --count 0",
      "get --endpoints",
      "--cert /tmp/x get k",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = run(out, sizeof out, "%s", bad[i]);
    if (rc != 2) fail_msg("'giant-etcd %s' exited %d, want 2", bad[i], rc);
  }
  assert_int_equal(run(out, sizeof out, "--help"), 0);
  assert_non_null(strstr(out, "--endpoints"));
  /* An unreachable server: exit 1 within the deadline. The command takes
   * the 0.5 s deadline plus its start and exit (tens of ms, a few hundred
   * under sanitizers on busy cores): 4.5 s over the deadline is > 10x. */
  double t0 = gt_now();
  assert_int_equal(run(out, sizeof out, "--endpoints=127.0.0.1:1 --timeout=500 get x"), 1);
  assert_true(gt_now() - t0 < 5.0);
  assert_int_equal(run(out, sizeof out, "--endpoints=%s --cacert=/nonexistent get x", fx.endpoint), 1);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not on PATH; skipping\n");
    return 77;
  }
  const char *bd = getenv("GT_BUILD_DIR");
  snprintf(bin, sizeof bin, "%s/tools/giant-etcd", bd ? bd : ".");
  if (access(bin, X_OK) != 0) {
    fprintf(stderr, "%s not built; skipping\n", bin);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cli),
      cmocka_unit_test(test_cli_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
