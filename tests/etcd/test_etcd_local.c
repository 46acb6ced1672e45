/* The starter of local etcd servers (resilience/etcd/local.h), the one that
 * giantrun --standalone, tests/localkit and the chaos suite share: the
 * command line it builds (read back from a stand-in program), a real etcd
 * started, answering, stopped with SIGSTOP, stopped and started again on
 * its data, a server that exits while starting and one that never serves,
 * bad configurations, and the removal of a directory. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_test.h"
#include "resilience/etcd/local.h"
#include "giant/engine/etcd.h"

static char dir[256];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/giant-etcd-local-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return gt_etcd_local_remove(dir) == GT_OK ? 0 : -1;
}

static const char *in_dir(const char *name) {
  static char path[4][320];
  static int next;
  char *p = path[next];
  next = (next + 1) % 4;
  snprintf(p, sizeof path[0], "%s/%s", dir, name);
  return p;
}

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

/* The whole of a small file, NUL-terminated (static buffer). */
static const char *slurp(const char *path) {
  static char buf[65536];
  FILE *f = fopen(path, "r");
  if (!f) return "";
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_of(const char *text, const char *words) {
  int n = 0;
  for (const char *p = strstr(text, words); p; p = strstr(p + 1, words)) n++;
  return n;
}

static bool running(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

/* ---- the command line ---- */

static void test_command_line(void **state) {
  (void)state;
  /* A stand-in for etcd that writes its arguments, one a line, to its
   * output (the log) and exits. */
  const char *bin = in_dir("fake-etcd");
  write_file(bin, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n", 0755);
  static const char *const extra[] = {"--auth-token-ttl=2", "--quota-backend-bytes=1000000", NULL};
  gt_etcd_local_config c = {.name = "n1",
                            .data_dir = "/d",
                            .log_path = in_dir("args.log"),
                            .listen_client_urls = "http://127.0.0.1:1,http://10.0.0.1:1",
                            .advertise_client_urls = "http://127.0.0.1:1",
                            .listen_peer_urls = "https://127.0.0.1:2",
                            .cert_file = "/c.pem",
                            .key_file = "/k.pem",
                            .trusted_ca_file = "/ca.pem",
                            .peer_cert_file = "/pc.pem",
                            .peer_key_file = "/pk.pem",
                            .extra_args = extra,
                            .bin = bin};
  gt_etcd_local srv;
  ETCD_OK(gt_etcd_local_start(&c, &srv)); /* no ready wait: returns once started */
  assert_true(srv.pid > 0);
  int status;
  assert_int_equal(waitpid(srv.pid, &status, 0), srv.pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_string_equal(slurp(c.log_path),
                      "--name=n1\n"
                      "--data-dir=/d\n"
                      "--listen-client-urls=http://127.0.0.1:1,http://10.0.0.1:1\n"
                      "--advertise-client-urls=http://127.0.0.1:1\n"
                      "--listen-peer-urls=https://127.0.0.1:2\n"
                      "--initial-advertise-peer-urls=https://127.0.0.1:2\n"
                      "--initial-cluster=n1=https://127.0.0.1:2\n"
                      "--cert-file=/c.pem\n"
                      "--key-file=/k.pem\n"
                      "--trusted-ca-file=/ca.pem\n"
                      "--client-cert-auth\n"
                      "--peer-cert-file=/pc.pem\n"
                      "--peer-key-file=/pk.pem\n"
                      "--auth-token-ttl=2\n"
                      "--quota-backend-bytes=1000000\n");

  /* A member of a cluster: its peers, token and state; the log emptied. */
  gt_etcd_local_config m = {.name = "m1",
                            .data_dir = "/d1",
                            .log_path = c.log_path,
                            .log_truncate = true,
                            .listen_client_urls = "http://10.0.0.2:2379",
                            .listen_peer_urls = "http://10.0.0.2:2380",
                            .initial_cluster = "m0=http://10.0.0.1:2380,m1=http://10.0.0.2:2380",
                            .initial_cluster_token = "tok",
                            .initial_cluster_state = "existing",
                            .peer_cert_file = "/pc.pem",
                            .peer_key_file = "/pk.pem",
                            .peer_trusted_ca_file = "/pca.pem",
                            .bin = bin};
  ETCD_OK(gt_etcd_local_start(&m, &srv));
  assert_int_equal(waitpid(srv.pid, &status, 0), srv.pid);
  assert_string_equal(slurp(m.log_path),
                      "--name=m1\n"
                      "--data-dir=/d1\n"
                      "--listen-client-urls=http://10.0.0.2:2379\n"
                      "--advertise-client-urls=http://10.0.0.2:2379\n"
                      "--listen-peer-urls=http://10.0.0.2:2380\n"
                      "--initial-advertise-peer-urls=http://10.0.0.2:2380\n"
                      "--initial-cluster=m0=http://10.0.0.1:2380,m1=http://10.0.0.2:2380\n"
                      "--initial-cluster-token=tok\n"
                      "--initial-cluster-state=existing\n"
                      "--peer-cert-file=/pc.pem\n"
                      "--peer-key-file=/pk.pem\n"
                      "--peer-trusted-ca-file=/pca.pem\n"
                      "--peer-client-cert-auth\n");
}

static void test_bad_config(void **state) {
  (void)state;
  gt_etcd_local srv = {.pid = 123};
  gt_etcd_local_config ok = {.name = "x",
                             .data_dir = in_dir("d"),
                             .log_path = in_dir("x.log"),
                             .listen_client_urls = "http://127.0.0.1:1",
                             .listen_peer_urls = "http://127.0.0.1:2"};
  gt_etcd_local_config c = ok;
  c.name = NULL;
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "lacks a name"));
  assert_int_equal(srv.pid, 0);
  c = ok;
  c.listen_peer_urls = NULL;
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "peer URLs"));
  c = ok;
  c.cert_file = "/c.pem"; /* no key */
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "needs its key"));
  c = ok;
  c.trusted_ca_file = "/ca.pem"; /* a CA without TLS */
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EINVAL);
  c = ok;
  c.log_path = in_dir("no/such/dir/x.log");
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EIO);
  assert_non_null(strstr(gt_last_error(), "cannot write its log"));
  assert_false(srv.exited);
  assert_int_equal(gt_etcd_local_start(NULL, &srv), GT_EINVAL);
  assert_int_equal(gt_etcd_local_signal(&srv, SIGTERM), GT_EINVAL); /* not running */
  gt_etcd_local_stop(&srv, 1);                                      /* a no-op */
}

/* ---- a real etcd ---- */

static gt_etcd_local_config loopback(const char *name, char *client, char *peer, double ready_s) {
  snprintf(client, 64, "http://127.0.0.1:%d", gt_etcd_local_free_port());
  snprintf(peer, 64, "http://127.0.0.1:%d", gt_etcd_local_free_port());
  gt_etcd_local_config c = {.name = name,
                            .data_dir = in_dir("data"),
                            .log_path = in_dir("etcd.log"),
                            .listen_client_urls = client,
                            .listen_peer_urls = peer,
                            .die_with_parent = true,
                            .ready_timeout_s = ready_s};
  return c;
}

static void test_serve_stop_restart(void **state) {
  (void)state;
  char client[64], peer[64];
  gt_etcd_local_config c = loopback("local", client, peer, ETCD_FIXTURE_START_S);
  gt_etcd_local srv;
  ETCD_OK(gt_etcd_local_start(&c, &srv));
  assert_true(running(srv.pid));
  assert_int_equal(count_of(slurp(c.log_path), "ready to serve client requests"), 1);

  gt_etcd_config cfg = {.endpoints = client, .timeout_ms = 5000};
  ETCD_OK(gt_etcd_local_wait_serving(&cfg, 30));
  gt_etcd_client *cli = NULL;
  ETCD_OK(gt_etcd_connect(&cfg, &cli));
  ETCD_OK(gt_etcd_put(cli, "/local/k", "v", 1, 0, NULL, NULL));

  /* SIGSTOP returns once etcd has stopped; SIGCONT lets it go on. */
  ETCD_OK(gt_etcd_local_signal(&srv, SIGSTOP));
  int status;
  assert_int_equal(waitpid(srv.pid, &status, WNOHANG), 0); /* stopped is not gone */
  ETCD_OK(gt_etcd_local_signal(&srv, SIGCONT));

  /* Stopped (SIGTERM, which etcd obeys at once) and started again on the
   * same data and log: the wait looks past the first run's ready line. */
  pid_t old = srv.pid;
  double t0 = gt_now();
  gt_etcd_local_stop(&srv, 10);
  assert_int_equal(srv.pid, 0);
  assert_false(running(old));
  assert_true(gt_now() - t0 < 10); /* woken by the exit, not the grace */
  ETCD_OK(gt_etcd_local_start(&c, &srv));
  assert_int_equal(count_of(slurp(c.log_path), "ready to serve client requests"), 2);
  void *v = NULL;
  size_t len = 0;
  ETCD_OK(gt_etcd_get_value(cli, "/local/k", &v, &len, NULL));
  assert_int_equal(len, 1);
  assert_memory_equal(v, "v", 1);
  free(v);
  gt_etcd_close(cli);

  /* SIGKILL reaps it; stopping a stopped server is a no-op. */
  old = srv.pid;
  ETCD_OK(gt_etcd_local_signal(&srv, SIGKILL));
  assert_int_equal(srv.pid, 0);
  assert_false(running(old));
  gt_etcd_local_stop(&srv, 5);

  char tail[64];
  assert_true(gt_etcd_local_log_tail(c.log_path, tail, sizeof tail) == sizeof tail - 1);
  assert_int_equal(strlen(tail), sizeof tail - 1);
  assert_int_equal(gt_etcd_local_log_tail(in_dir("absent.log"), tail, sizeof tail), 0);
  assert_string_equal(tail, "");
}

static void test_exits_while_starting(void **state) {
  (void)state;
  char client[64], peer[64];
  gt_etcd_local_config c = loopback("bad", client, peer, ETCD_FIXTURE_START_S);
  static const char *const extra[] = {"--no-such-flag", NULL};
  c.extra_args = extra;
  gt_etcd_local srv;
  double t0 = gt_now();
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EIO);
  assert_true(gt_now() - t0 < ETCD_FIXTURE_START_S); /* woken by the exit */
  assert_true(srv.exited);
  assert_int_equal(srv.pid, 0);
  assert_true(WIFEXITED(srv.exit_status) && WEXITSTATUS(srv.exit_status) != 0);
  assert_non_null(strstr(gt_last_error(), "while starting"));
  assert_non_null(strstr(gt_last_error(), c.log_path));
  assert_non_null(strstr(slurp(c.log_path), "no-such-flag"));

  /* A program that cannot be run exits 127, saying why in the log. */
  c.extra_args = NULL;
  c.bin = in_dir("absent-etcd");
  c.log_truncate = true;
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_EIO);
  assert_true(srv.exited && WIFEXITED(srv.exit_status) && WEXITSTATUS(srv.exit_status) == 127);
  assert_non_null(strstr(slurp(c.log_path), "cannot run"));
}

static void test_never_serves(void **state) {
  (void)state;
  /* A stand-in that runs and says nothing: the wait ends at its bound and
   * the process is killed. */
  const char *bin = in_dir("silent-etcd");
  write_file(bin, "#!/bin/sh\nexec sleep 60\n", 0755);
  char client[64], peer[64];
  gt_etcd_local_config c = loopback("silent", client, peer, 1);
  c.bin = bin;
  gt_etcd_local srv;
  double t0 = gt_now();
  assert_int_equal(gt_etcd_local_start(&c, &srv), GT_ETIMEDOUT);
  double took = gt_now() - t0;
  assert_true(took >= 1 && took < 10);
  assert_int_equal(srv.pid, 0);
  assert_false(srv.exited);
  assert_non_null(strstr(gt_last_error(), "did not serve within 1 s"));

  /* Nothing serves on a port no one listens on. */
  gt_etcd_config cfg = {.endpoints = client, .timeout_ms = 200};
  assert_int_equal(gt_etcd_local_wait_serving(&cfg, 1), GT_ETIMEDOUT);
}

static void test_remove(void **state) {
  (void)state;
  const char *outside = in_dir("keep.txt");
  write_file(outside, "keep", 0644);
  const char *tree = in_dir("tree");
  char sub[400], link[400];
  snprintf(sub, sizeof sub, "%s/a/b", tree);
  assert_int_equal(mkdir(tree, 0755), 0);
  assert_int_equal(mkdir(in_dir("tree/a"), 0755), 0);
  assert_int_equal(mkdir(sub, 0755), 0);
  write_file(in_dir("tree/a/b/f"), "x", 0644);
  snprintf(link, sizeof link, "%s/link", tree);
  assert_int_equal(symlink(outside, link), 0);
  ETCD_OK(gt_etcd_local_remove(tree));
  assert_int_not_equal(access(tree, F_OK), 0);
  assert_string_equal(slurp(outside), "keep"); /* a link is removed, not followed */
  ETCD_OK(gt_etcd_local_remove(tree));         /* gone already */
  ETCD_OK(gt_etcd_local_remove(NULL));
}

int main(void) {
  char bin[PATH_MAX];
  if (gt_etcd_local_find(bin, sizeof bin) != GT_OK) {
    fprintf(stderr, "etcd not found; skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_command_line, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
      cmocka_unit_test_setup_teardown(test_serve_stop_restart, setup, teardown),
      cmocka_unit_test_setup_teardown(test_exits_while_starting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_never_serves, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
