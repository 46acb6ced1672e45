/* giantrun against an etcd with authentication on (RBAC): with
 * --rdzv-user and --rdzv-password-file the agent and its workers (which
 * get the file's path, never the password) meet and finish; without
 * credentials, or with a wrong password, the agent fails with a message
 * that says so; a password file others may read is refused at start. */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "localkit/etcd_server.h"
#include "launch/launch_test.h"

static etcd_fixture fx;
static char dir[256];
static const char *const extra[] = {"--bcrypt-cost=4", NULL};

static int ctl(const char *const *args) { return etcd_fixture_ctl(&fx, args); }

static int setup(void **state) {
  (void)state;
  etcd_fixture_opts o = {.extra_args = extra};
  if (etcd_fixture_start(&fx, &o) != 0) return -1;
  if (ctl((const char *[]){"user", "add", "root", "--new-user-password=root-password-1", "--interactive=false",
                           NULL}) != 0 ||
      ctl((const char *[]){"role", "add", "root", NULL}) != 0 ||
      ctl((const char *[]){"user", "grant-role", "root", "root", NULL}) != 0 ||
      ctl((const char *[]){"auth", "enable", NULL}) != 0)
    return -1;
  return temp_dir(dir, sizeof dir, "launch-auth");
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  rm_rf(dir);
  return 0;
}

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

/* One node of two workers; `auth` the user and the password file, or NULL. */
static void run(agent *a, const char *job, const char *user, const char *pwfile) {
  char log[512], out[300];
  snprintf(log, sizeof log, "%s/%s.log", dir, job);
  snprintf(out, sizeof out, "%s/%s", dir, job);
  mkdir(out, 0700);
  setenv("LW_DIR", out, 1);
  /* A node alone meets itself in 0.1-0.3 s on busy cores: a rendezvous
   * timeout of 30 s is > 100x. */
  const char *args[32] = {"--nnodes", "1", "--nproc-per-node", "2", "--rdzv-endpoint", fx.endpoint,
                          "--job-id", job, "--rdzv-settle",    "0", "--rdzv-timeout",  "30"};
  int n = 12;
  if (user) {
    args[n++] = "--rdzv-user";
    args[n++] = user;
  }
  if (pwfile) {
    args[n++] = "--rdzv-password-file";
    args[n++] = pwfile;
  }
  args[n++] = worker_bin();
  args[n++] = "sleep=0";
  args[n] = NULL;
  assert_int_equal(agent_start(a, log, args), 0);
}

static void test_with_credentials(void **state) {
  (void)state;
  char pw[300], env[600];
  snprintf(pw, sizeof pw, "%s/pw", dir);
  write_file(pw, "root-password-1\n", 0600); /* the newline is not part of it */
  agent a;
  run(&a, "good", "root", pw);
  expect_exit(&a, 0, RUN_S);
  /* Both workers met on the job's store, in etcd, as root. */
  char out[300];
  snprintf(out, sizeof out, "%s/good", dir);
  for (int r = 0; r < 2; r++) {
    char *s = slurp(env_path(env, sizeof env, out, 0, r));
    assert_non_null(s);
    assert_null(strstr(s, "root-password-1")); /* the workers never saw the password */
    free(s);
  }
  char *log = slurp(a.log);
  assert_null(strstr(log, "root-password-1"));
  free(log);
}

static void test_without_or_wrong(void **state) {
  (void)state;
  agent a;
  run(&a, "anon", NULL, NULL);
  int code = agent_wait(&a, RUN_S);
  char *log = slurp(a.log);
  if (code == 0 || !strstr(log, "user")) {
    dump_log(&a);
    fail_msg("without credentials: exit %d", code);
  }
  free(log);
  char pw[300];
  snprintf(pw, sizeof pw, "%s/wrong", dir);
  write_file(pw, "not-the-password", 0600);
  run(&a, "wrong", "root", pw);
  code = agent_wait(&a, RUN_S);
  log = slurp(a.log);
  if (code == 0 || !strstr(log, "password")) {
    dump_log(&a);
    fail_msg("wrong password: exit %d", code);
  }
  free(log);
}

static void test_bad_password_files(void **state) {
  (void)state;
  char pw[300];
  snprintf(pw, sizeof pw, "%s/open", dir);
  write_file(pw, "root-password-1", 0644);
  agent a;
  run(&a, "open", "root", pw);
  expect_exit(&a, 2, RUN_S);
  char *log = slurp(a.log);
  assert_non_null(strstr(log, "chmod 600"));
  free(log);
  snprintf(pw, sizeof pw, "%s/empty", dir);
  write_file(pw, "\n", 0600);
  run(&a, "empty", "root", pw);
  expect_exit(&a, 2, RUN_S);
  log = slurp(a.log);
  assert_non_null(strstr(log, "one non-empty line"));
  free(log);
  /* The two go together. */
  run(&a, "half", "root", NULL);
  expect_exit(&a, 2, RUN_S);
  log = slurp(a.log);
  assert_non_null(strstr(log, "give both --rdzv-user and --rdzv-password-file"));
  free(log);
}

int main(void) {
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_with_credentials),
      cmocka_unit_test(test_without_or_wrong),
      cmocka_unit_test(test_bad_password_files),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
