/* giantrun's command line: bad input gets a clear message and a non-zero
 * exit in bounded time; --standalone runs a job end to end with a private
 * etcd and leaves nothing behind, also when interrupted; inside a Slurm
 * allocation, bad Slurm variables are refused and good ones fill the flags. */
#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "giant/engine/etcd.h"
#include "localkit/etcd_server.h"
#include "launch/launch_test.h"
#include "common/gt_skip.h" /* after launch_test.h, which includes <cmocka.h> */

static char dir[256];

typedef struct run {
  int code;
  double seconds;
  char *out;
} run;

/* giantrun ARGS with output to dir/out.log, bounded by timeout_s. */
static run giantrun(double timeout_s, const char *const *args) {
  char log[512];
  snprintf(log, sizeof log, "%s/out.log", dir);
  agent a;
  run r = {0};
  double t0 = mono_now();
  assert_int_equal(agent_start(&a, log, args), 0);
  r.code = agent_wait(&a, timeout_s);
  r.seconds = mono_now() - t0;
  r.out = slurp(log);
  assert_non_null(r.out);
  return r;
}

/* Exits 0 or 2 on usage come 0.02-0.06 s after the start on busy cores: the
 * tests' 5 s is > 80x. */
static void expect(const char *const *args, int code, const char *message, double within_s) {
  run r = giantrun(within_s + 5, args);
  if (r.code != code || !strstr(r.out, message) || r.seconds > within_s)
    fail_msg("expected exit %d with '%s' within %.0f s; got %d after %.1f s:\n%s", code, message, within_s, r.code,
             r.seconds, r.out);
  free(r.out);
}

static int setup(void **state) {
  (void)state;
  return temp_dir(dir, sizeof dir, "launch-cli");
}

static int teardown(void **state) {
  (void)state;
  rm_rf(dir);
  return 0;
}

static void test_usage_errors(void **state) {
  (void)state;
  const char *w = worker_bin();
  expect((const char *[]){"--bogus", w, NULL}, 2, "unknown flag '--bogus'", 5);
  expect((const char *[]){"--nnodes", "3:2", "--rdzv-endpoint", "127.0.0.1:2379", w, NULL}, 2,
         "MIN is greater than MAX", 5);
  expect((const char *[]){"--nnodes", "x", "--standalone", w, NULL}, 2, "--nnodes wants MIN or MIN:MAX", 5);
  expect((const char *[]){"--nproc-per-node", "0", "--standalone", w, NULL}, 2, "--nproc-per-node", 5);
  expect((const char *[]){"--standalone", NULL}, 2, "no PROGRAM given", 5);
  expect((const char *[]){"--standalone", "/nonexistent/prog", NULL}, 2, "cannot run '/nonexistent/prog'", 5);
  expect((const char *[]){"--standalone", "giant-no-such-program", NULL}, 2, "not found on PATH", 5);
  expect((const char *[]){w, NULL}, 2, "give --rdzv-endpoint", 5);
  expect((const char *[]){"--standalone", "--rdzv-endpoint", "127.0.0.1:2379", w, NULL}, 2, "drop --rdzv-endpoint", 5);
  expect((const char *[]){"--standalone", "--nnodes", "2", w, NULL}, 2, "--standalone runs one node", 5);
  expect((const char *[]){"--standalone", "--rdzv-cacert", "/etc/hostname", w, NULL}, 2,
         "--standalone makes its own certificates", 5);
  expect((const char *[]){"--standalone", "--comm-integrity", "crc", w, NULL}, 2,
         "--comm-integrity 'crc': use headers or mac", 5);
  expect((const char *[]){"--standalone", "--job-id", "a/b", w, NULL}, 2, "--job-id 'a/b'", 5);
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:2379", "--rdzv-backend", "c10d", w, NULL}, 2, "not supported",
         5);
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:2379", "--rdzv-cert", "/etc/hostname", w, NULL}, 2,
         "both --rdzv-cert and --rdzv-key", 5);
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:2379", "--rdzv-cacert", "/nonexistent.pem", w, NULL}, 2,
         "cannot read TLS file", 5);
  expect((const char *[]){"--help", NULL}, 0, "usage: giantrun [options] PROGRAM", 5);
  expect((const char *[]){"--help", NULL}, 0, "--comm-encrypt             encrypt every TCP payload", 5);
  expect((const char *[]){"--standalone", "--comm-encrypt=yes", w, NULL}, 2, "--comm-encrypt takes no value", 5);
  expect((const char *[]){"--version", NULL}, 0, "giantrun (Giant) ", 5);
}

static void test_unreachable_etcd(void **state) {
  (void)state;
  /* Port 1 on loopback: nothing listens, connections are refused. The
   * agent tries for its 5 s etcd call timeout, then exits: 5.0-5.3 s on
   * busy cores. 30 s is 25 s more, > 50x what the start and exit take. */
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:1", "--job-id", "j", worker_bin(), NULL}, 1,
         "cannot reach etcd at 127.0.0.1:1", 30);
}

/* A fake scontrol on PATH that prints `out` for `show hostnames`. */
static void fake_scontrol(const char *out) {
  char bin[512], path[600];
  snprintf(bin, sizeof bin, "%s/bin", dir);
  mkdir(bin, 0700);
  snprintf(path, sizeof path, "%s/scontrol", bin);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\nprintf '%s'\n", out);
  fclose(f);
  assert_int_equal(chmod(path, 0700), 0);
}

static void slurm_env(const char *nnodes, const char *node, const char *step) {
  setenv("SLURM_JOB_ID", "42", 1);
  setenv("SLURM_NNODES", nnodes, 1);
  setenv("SLURM_NODEID", node, 1);
  setenv("SLURM_JOB_NODELIST", "n[1-3]", 1);
  if (step)
    setenv("SLURM_STEP_ID", step, 1);
  else
    unsetenv("SLURM_STEP_ID");
}

/* Inside a Slurm allocation: bad variables, a node list that scontrol
 * cannot expand or that does not match, and one giantrun for many nodes
 * get exit 2 and a message; good ones fill the flags left unset. */
static void test_slurm_variables(void **state) {
  (void)state;
  const char *w = worker_bin();
  char *old_path = strdup(getenv("PATH"));
  char path[1200];
  snprintf(path, sizeof path, "%s/bin:%s", dir, old_path);
  setenv("PATH", path, 1);
  fake_scontrol("n1\\n  n2 \\n\\nn3\\n");
  slurm_env("x3", "0", "0");
  expect((const char *[]){w, NULL}, 2, "SLURM_NNODES is 'x3', not a whole number in 1..1024", 5);
  slurm_env("3", "3", "0");
  expect((const char *[]){w, NULL}, 2, "SLURM_NODEID is '3', not a whole number in 0..2", 5);
  slurm_env("3", "1", NULL);
  expect((const char *[]){w, NULL}, 2, "srun --ntasks-per-node=1", 5);
  slurm_env("3", "1", "0");
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3)", 1);
  expect((const char *[]){w, NULL}, 2, "run one per node", 5);
  unsetenv("SLURM_STEP_TASKS_PER_NODE");
  setenv("GT_NPROC_PER_NODE", "0", 1);
  expect((const char *[]){w, NULL}, 2, "GT_NPROC_PER_NODE is '0'", 5);
  unsetenv("GT_NPROC_PER_NODE");
  fake_scontrol("n1\\nn2\\n");
  expect((const char *[]){w, NULL}, 2, "names 2, not 3 nodes", 5);
  fake_scontrol("n1\\nn/2\\nn3\\n");
  expect((const char *[]){w, NULL}, 2, "gave 'n/2', which is not a hostname", 5);
  setenv("PATH", dir, 1); /* no scontrol at all */
  expect((const char *[]){w, NULL}, 2, "scontrol is not on PATH", 5);
  setenv("PATH", path, 1);
  /* Good variables: the flags left unset come from Slurm, the ones given
   * win; etcd is given (port 1: refused), so the agent then gives up. */
  fake_scontrol("n1\\n  n2 \\n\\nn3\\n");
  setenv("SLURM_GPUS_ON_NODE", "4", 1);
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:1", "--nnodes", "2:3", w, NULL}, 1,
         "Slurm job 42, node 1 of 3: --node-id n2 --job-id slurm-42.0 --nproc-per-node 4 (SLURM_GPUS_ON_NODE)", 30);
  unsetenv("SLURM_GPUS_ON_NODE");
  const char *vars[] = {"SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_STEP_ID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  setenv("PATH", old_path, 1);
  free(old_path);
}

static int sh(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

static void test_wrong_tls_ca(void **state) {
  (void)state;
  char cmd[4096];
  const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  snprintf(cmd, sizeof cmd,
           "cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj /CN=giant-ca >/dev/null 2>&1 "
           "&& openssl req -x509 %s -keyout other.key -out other.pem -days 2 -subj /CN=other-ca >/dev/null 2>&1 "
           "&& printf 'subjectAltName=IP:127.0.0.1\\n' > srv.ext "
           "&& openssl req %s -keyout srv.key -out srv.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 "
           "&& openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile srv.ext -out srv.pem >/dev/null 2>&1 "
           "&& printf 'extendedKeyUsage=clientAuth\\n' > cli.ext "
           "&& openssl req %s -keyout cli.key -out cli.csr -subj /CN=giant-client >/dev/null 2>&1 "
           "&& openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile cli.ext -out cli.pem >/dev/null 2>&1",
           dir, ec, ec, ec, ec);
  /* Without openssl there are no certificates to try; with it, making them
   * must work. */
  if (system("openssl version >/dev/null 2>&1") != 0) SKIP_CASE("openssl not on PATH");
  assert_int_equal(sh(cmd), 0);
  char cert[300], key[300], other[300];
  snprintf(cert, sizeof cert, "%s/srv.pem", dir);
  snprintf(key, sizeof key, "%s/srv.key", dir);
  snprintf(other, sizeof other, "%s/other.pem", dir);
  char ca[300], ccert[300], ckey[300];
  snprintf(ca, sizeof ca, "%s/ca.pem", dir);
  snprintf(ccert, sizeof ccert, "%s/cli.pem", dir);
  snprintf(ckey, sizeof ckey, "%s/cli.key", dir);
  /* The server also checks client certificates. */
  etcd_fixture fx;
  etcd_fixture_opts o = {.cert_file = cert, .key_file = key, .trusted_ca_file = ca};
  assert_int_equal(etcd_fixture_start(&fx, &o), 0);
  /* Refused for the 5 s of the agent's etcd call timeout, as above. */
  expect((const char *[]){"--rdzv-endpoint", fx.endpoint, "--rdzv-cacert", other, "--rdzv-cert", ccert, "--rdzv-key",
                          ckey, "--job-id", "tls", worker_bin(), NULL},
         1, "cannot reach etcd", 30);
  /* The right CA but no client certificate: refused too. */
  expect((const char *[]){"--rdzv-endpoint", fx.endpoint, "--rdzv-cacert", ca, "--job-id", "tls", worker_bin(), NULL},
         1, "cannot reach etcd", 30);
  /* Both right: the job runs, and its worker reaches the store over TLS
   * with GT_STORE_CACERT, GT_STORE_CERT and GT_STORE_KEY. The job takes
   * 0.8 s on busy cores: 30 s is > 30x. */
  char out[300], v[512], path[600];
  snprintf(out, sizeof out, "%s/tls-out", dir);
  assert_int_equal(mkdir(out, 0700), 0);
  setenv("LW_DIR", out, 1);
  expect((const char *[]){"--rdzv-endpoint", fx.url, "--rdzv-cacert", ca, "--rdzv-cert", ccert, "--rdzv-key", ckey,
                          "--job-id", "tls", worker_bin(), NULL},
         0, "[rank 0] worker rank 0 of 1 in gen0 up", 30);
  env_path(path, sizeof path, out, 0, 0);
  assert_int_equal(env_get(path, "GT_STORE", v, sizeof v), 0);
  char want[200];
  snprintf(want, sizeof want, "etcds://%s/giant/tls/gen0/store/", fx.endpoint);
  assert_string_equal(v, want);
  assert_int_equal(env_get(path, "GT_STORE_CERT", v, sizeof v), 0);
  assert_string_equal(v, ccert);
  etcd_fixture_destroy(&fx);
}

static int giantrun_dirs(const char *tmp) {
  DIR *d = opendir(tmp);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "giantrun-etcd-", 14)) n++;
  closedir(d);
  return n;
}

static void test_standalone_end_to_end(void **state) {
  (void)state;
  char tmp[300], out[300];
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  snprintf(out, sizeof out, "%s/standalone", dir);
  assert_int_equal(mkdir(tmp, 0700), 0);
  assert_int_equal(mkdir(out, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  setenv("LW_DIR", out, 1);
  /* 2.2 s on busy cores (an etcd and its certificates made, a job of two
   * workers, all removed): 60 s is > 25x. */
  run r = giantrun(
      60, (const char *[]){"--standalone", "--nproc-per-node", "2", "--plan", "dp=2", worker_bin(), "sleep=0.2", NULL});
  if (r.code != 0) fail_msg("standalone job exited %d:\n%s", r.code, r.out);
  free(r.out);
  char secret[2][128], v[512];
  for (int rank = 0; rank < 2; rank++) {
    char path[600];
    env_path(path, sizeof path, out, 0, rank);
    assert_int_equal(env_get(path, "GT_RANK", v, sizeof v), 0);
    assert_int_equal(atoi(v), rank);
    assert_int_equal(env_get(path, "GT_WORLD_SIZE", v, sizeof v), 0);
    assert_string_equal(v, "2");
    assert_int_equal(env_get(path, "GT_PLAN", v, sizeof v), 0);
    assert_string_equal(v, "dp=2");
    assert_int_equal(env_get(path, "GT_JOB_ID", v, sizeof v), 0);
    assert_string_equal(v, "default");
    assert_int_equal(env_get(path, "GT_STORE", v, sizeof v), 0);
    assert_non_null(strstr(v, "/giant/default/gen0/store/"));
    assert_int_equal(strncmp(v, "etcds://127.0.0.1:", 18), 0); /* TLS, with the certificates made at start */
    assert_int_equal(env_get(path, "GT_STORE_CERT", v, sizeof v), 0);
    assert_non_null(strstr(v, "/client.pem"));
    assert_int_equal(env_get(path, "GT_JOB_SECRET", secret[rank], sizeof secret[rank]), 0);
  }
  assert_string_equal(secret[0], secret[1]);
  assert_int_equal(strlen(secret[0]), 64);
  assert_int_equal(giantrun_dirs(tmp), 0);
  assert_int_equal(alive_count(out, 5), 0);
  unsetenv("TMPDIR");
}

static void test_standalone_sigint(void **state) {
  (void)state;
  char tmp[300], out[300], log[512];
  snprintf(tmp, sizeof tmp, "%s/tmp2", dir);
  snprintf(out, sizeof out, "%s/sigint", dir);
  snprintf(log, sizeof log, "%s/sigint.log", dir);
  assert_int_equal(mkdir(tmp, 0700), 0);
  assert_int_equal(mkdir(out, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  setenv("LW_DIR", out, 1);
  agent a;
  assert_int_equal(
      agent_start(&a, log,
                  (const char *[]){"--standalone", "--nproc-per-node", "2", worker_bin(), "sleep=60", "child=1", NULL}),
      0);
  if (!wait_gen(out, 0, 2, 40)) { /* 0.7 s on busy cores */
    dump_log(&a);
    fail_msg("standalone workers did not start");
  }
  assert_int_equal(giantrun_dirs(tmp), 1);
  double t0 = mono_now();
  kill(a.pid, SIGINT);
  assert_int_equal(agent_wait(&a, 20), 128 + SIGINT);
  /* 0.4 s on busy cores (workers and their children stopped, etcd stopped
   * and its directory removed): 10 s is 25x. */
  assert_true(mono_now() - t0 < 10);
  assert_int_equal(alive_count(out, 5), 0);
  assert_int_equal(giantrun_dirs(tmp), 0);
  unsetenv("TMPDIR");
}

/* The one giantrun-etcd-* directory in tmp, into out. */
static void standalone_dir(const char *tmp, char *out, size_t n) {
  DIR *d = opendir(tmp);
  assert_non_null(d);
  struct dirent *e;
  out[0] = 0;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "giantrun-etcd-", 14)) snprintf(out, n, "%s/%s", tmp, e->d_name);
  closedir(d);
  assert_true(out[0] != 0);
}

/* Reads the job's secret from etcd as `cfg` allows: GT_OK and the value, or
 * the failure (bounded by the client's timeout). A refused client retries
 * until that timeout, so the test waits it out twice; the read that is let
 * in takes 20-50 ms on busy cores (a TLS handshake and one get): 2 s is
 * > 40x. */
static gt_status read_secret(gt_etcd_config cfg, char *out, size_t n) {
  cfg.timeout_ms = 2000;
  gt_etcd_client *c;
  gt_status st = gt_etcd_connect(&cfg, &c);
  if (st != GT_OK) return st;
  void *v = NULL;
  size_t len = 0;
  st = gt_etcd_get_value(c, "/giant/default/secret", &v, &len, NULL);
  if (st == GT_OK) snprintf(out, n, "%.*s", (int)len, (char *)v);
  free(v);
  gt_etcd_close(c);
  return st;
}

/* The standalone etcd speaks TLS and takes only the client certificate
 * giantrun made: a local user without it (plain HTTP, or TLS with no
 * certificate) cannot read the job's secret, the certificate's holder can.
 * The files are 0600 in a 0700 directory, and gone after the job. */
static void test_standalone_keeps_its_secret(void **state) {
  (void)state;
  char tmp[300], out[300], log[512], sdir[600], path[700], v[512];
  snprintf(tmp, sizeof tmp, "%s/tmp-tls", dir);
  snprintf(out, sizeof out, "%s/tls", dir);
  snprintf(log, sizeof log, "%s/tls.log", dir);
  assert_int_equal(mkdir(tmp, 0700), 0);
  assert_int_equal(mkdir(out, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  setenv("LW_DIR", out, 1);
  agent a;
  assert_int_equal(agent_start(&a, log, (const char *[]){"--standalone", worker_bin(), "sleep=60", NULL}), 0);
  if (!wait_gen(out, 0, 1, 40)) { /* 0.7 s on busy cores */
    dump_log(&a);
    fail_msg("the standalone worker did not start");
  }
  standalone_dir(tmp, sdir, sizeof sdir);
  struct stat st;
  assert_int_equal(stat(sdir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  const char *files[] = {"ca.pem", "server.pem", "server.key", "client.pem", "client.key"};
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s", sdir, files[i]);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
  }
  char secret[128], got[128], endpoint[128], ca[700], cert[700], key[700];
  env_str(out, 0, 0, "GT_JOB_SECRET", secret, sizeof secret);
  env_str(out, 0, 0, "GT_STORE", v, sizeof v);
  int port = 0;
  assert_int_equal(sscanf(v, "etcds://127.0.0.1:%d/", &port), 1);
  snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
  snprintf(ca, sizeof ca, "%s/ca.pem", sdir);
  snprintf(cert, sizeof cert, "%s/client.pem", sdir);
  snprintf(key, sizeof key, "%s/client.key", sdir);
  gt_status s1 = read_secret((gt_etcd_config){.endpoints = endpoint}, got, sizeof got);
  gt_status s2 = read_secret((gt_etcd_config){.endpoints = endpoint, .cacert = ca}, got, sizeof got);
  print_message("plain: %s; TLS without a client certificate: %s\n", gt_status_name(s1), gt_status_name(s2));
  assert_true(s1 == GT_ECONN || s1 == GT_ETIMEDOUT);
  assert_true(s2 == GT_ECONN || s2 == GT_ETIMEDOUT);
  got[0] = 0;
  assert_int_equal(
      read_secret((gt_etcd_config){.endpoints = endpoint, .cacert = ca, .cert = cert, .key = key}, got, sizeof got),
      GT_OK);
  assert_string_equal(got, secret);
  kill(a.pid, SIGINT);
  assert_int_equal(agent_wait(&a, 20), 128 + SIGINT);
  assert_int_equal(giantrun_dirs(tmp), 0); /* the certificates went with it */
  unsetenv("TMPDIR");
}

/* Makes tmp/name with an owner file saying "pid started" (none when pid < 0). */
static void fake_dir(const char *tmp, const char *name, int pid, unsigned long long started) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  assert_int_equal(mkdir(path, 0700), 0);
  if (pid < 0) return;
  char owner[700];
  snprintf(owner, sizeof owner, "%s/owner", path);
  FILE *f = fopen(owner, "w");
  assert_non_null(f);
  fprintf(f, "%d %llu\n", pid, started);
  fclose(f);
}

static bool exists(const char *tmp, const char *name) {
  char path[600];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  return stat(path, &st) == 0;
}

/* A SIGKILLed giantrun cannot remove its etcd directory; the next
 * standalone start removes the directories whose giantrun is gone, and
 * keeps those of a live one and those it cannot judge. */
static void test_standalone_removes_dirs_of_dead_runs(void **state) {
  (void)state;
  char tmp[300], out[300], self[64];
  snprintf(tmp, sizeof tmp, "%s/tmp3", dir);
  snprintf(out, sizeof out, "%s/sweep", dir);
  assert_int_equal(mkdir(tmp, 0700), 0);
  assert_int_equal(mkdir(out, 0700), 0);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  /* This test's own start time, read the way giantrun reads it. */
  snprintf(self, sizeof self, "/proc/%d/stat", (int)getpid());
  char stat_text[1024];
  FILE *f = fopen(self, "r");
  assert_non_null(f);
  size_t n = fread(stat_text, 1, sizeof stat_text - 1, f);
  fclose(f);
  stat_text[n] = 0;
  char *p = strrchr(stat_text, ')'); /* fields after the command name: state is field 3 */
  for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
  assert_non_null(p);
  unsigned long long started = strtoull(p + 1, NULL, 10);
  fake_dir(tmp, "giantrun-etcd-dead", (int)dead, 12345);
  fake_dir(tmp, "giantrun-etcd-reused", (int)getpid(), started + 1); /* a pid since reused */
  fake_dir(tmp, "giantrun-etcd-alive", (int)getpid(), started);
  fake_dir(tmp, "giantrun-etcd-noowner", -1, 0);
  setenv("TMPDIR", tmp, 1);
  setenv("LW_DIR", out, 1);
  /* 1.3 s on busy cores: 60 s is > 40x. */
  run r = giantrun(60, (const char *[]){"--standalone", "--nproc-per-node", "1", worker_bin(), NULL});
  if (r.code != 0) fail_msg("standalone job exited %d:\n%s", r.code, r.out);
  free(r.out);
  assert_false(exists(tmp, "giantrun-etcd-dead"));
  assert_false(exists(tmp, "giantrun-etcd-reused"));
  assert_true(exists(tmp, "giantrun-etcd-alive"));
  assert_true(exists(tmp, "giantrun-etcd-noowner"));
  assert_int_equal(giantrun_dirs(tmp), 2); /* and its own is gone too */
  unsetenv("TMPDIR");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_unreachable_etcd),
      cmocka_unit_test(test_slurm_variables),
      cmocka_unit_test(test_wrong_tls_ca),
      cmocka_unit_test(test_standalone_end_to_end),
      cmocka_unit_test(test_standalone_sigint),
      cmocka_unit_test(test_standalone_keeps_its_secret),
      cmocka_unit_test(test_standalone_removes_dirs_of_dead_runs),
  };
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
