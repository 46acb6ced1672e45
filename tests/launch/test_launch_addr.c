/* The address giantrun gives its workers to advertise (GT_COMM_HOST): the
 * local address of the route to etcd (127.0.0.1 for etcd on loopback, a
 * node's own address for one on it), an interface's IPv4 address, and
 * the order of --comm-host, --comm-iface and $GT_COMM_HOST; bad ones are
 * refused at start with a clear message. Then --standalone jobs whose
 * workers form a group over the address found, and record it. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include "launch/agent.h"
#include "localkit/etcd_server.h"
#include "launch/launch_test.h"
#include "common/gt_skip.h" /* after launch_test.h, which includes <cmocka.h> */

static char dir[256];

/* An IPv4 address of this machine's other than loopback, or "" (a machine
 * with loopback only). */
static void own_address(char *out, size_t n) {
  struct ifaddrs *all;
  out[0] = 0;
  if (getifaddrs(&all) != 0) return;
  for (struct ifaddrs *a = all; a && !out[0]; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    struct in_addr in = ((struct sockaddr_in *)a->ifa_addr)->sin_addr;
    if ((ntohl(in.s_addr) >> 24) != 127) inet_ntop(AF_INET, &in, out, (socklen_t)n);
  }
  freeifaddrs(all);
}

static void test_route(void **state) {
  (void)state;
  char a[64];
  /* etcd on loopback, however it is written: one machine, 127.0.0.1. */
  const char *loopback[] = {"127.0.0.1:2379", "https://127.0.0.1:1", "http://127.0.0.1", "localhost:2379",
                            "[127.0.0.1]:2379"};
  for (size_t i = 0; i < sizeof loopback / sizeof *loopback; i++) {
    if (agent_route_addr(loopback[i], a, sizeof a) != GT_OK) fail_msg("%s: %s", loopback[i], gt_last_error());
    if (strcmp(a, "127.0.0.1")) fail_msg("%s: route from %s, expected 127.0.0.1", loopback[i], a);
  }
  /* A list: the first endpoint with a route (a v6 one has none here). */
  assert_int_equal(agent_route_addr("[::1]:2379,127.0.0.1:2379", a, sizeof a), GT_OK);
  assert_string_equal(a, "127.0.0.1");
  /* etcd on one of this machine's own addresses: that address. */
  char own[64];
  own_address(own, sizeof own);
  if (own[0]) {
    char ep[96];
    snprintf(ep, sizeof ep, "%s:2379", own);
    assert_int_equal(agent_route_addr(ep, a, sizeof a), GT_OK);
    assert_string_equal(a, own);
  }
  /* Nothing to route to: an error that says what to give instead. */
  assert_int_equal(agent_route_addr("", a, sizeof a), GT_ECONN);
  assert_non_null(strstr(gt_last_error(), "give --comm-host ADDR or --comm-iface NAME"));
  assert_int_equal(agent_route_addr("[::1]:2379", a, sizeof a), GT_ECONN);
  assert_non_null(strstr(gt_last_error(), "IPv4 only"));
}

static void test_iface(void **state) {
  (void)state;
  char a[64];
  assert_int_equal(agent_iface_addr("lo", a, sizeof a), GT_OK);
  assert_string_equal(a, "127.0.0.1");
  assert_int_equal(agent_iface_addr("nosuch0", a, sizeof a), GT_EINVAL);
  const char *m = gt_last_error();
  if (!strstr(m, "--comm-iface nosuch0: no such network interface on this node (it has: ") || !strstr(m, "lo"))
    fail_msg("unexpected message: %s", m);
}

/* agent_comm_addr on o; the address and where it came from. */
static gt_status comm_addr(agent_opts *o, const char *endpoints) {
  memset(o->comm_addr, 0, sizeof o->comm_addr);
  o->comm_addr_from[0] = 0;
  return agent_comm_addr(o, endpoints);
}

static void test_precedence(void **state) {
  (void)state;
  agent_opts o;
  memset(&o, 0, sizeof o);
  unsetenv("GT_COMM_HOST");
  /* Nothing given: the route to etcd. */
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_OK);
  assert_string_equal(o.comm_addr, "127.0.0.1");
  assert_string_equal(o.comm_addr_from, "this node's route to etcd");
  /* $GT_COMM_HOST before the route (an address of 127/8 is this machine's). */
  setenv("GT_COMM_HOST", "127.0.0.3", 1);
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_OK);
  assert_string_equal(o.comm_addr, "127.0.0.3");
  assert_string_equal(o.comm_addr_from, "GT_COMM_HOST");
  /* --comm-iface before the environment. */
  o.comm_iface = "lo";
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_OK);
  assert_string_equal(o.comm_addr, "127.0.0.1");
  assert_string_equal(o.comm_addr_from, "--comm-iface lo");
  /* --comm-host before everything; the interface is not looked at. */
  o.comm_iface = "nosuch0";
  o.comm_host = "127.0.0.2";
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_OK);
  assert_string_equal(o.comm_addr, "127.0.0.2");
  assert_string_equal(o.comm_addr_from, "--comm-host");
  /* A bad interface is an error, whatever the environment says. */
  o.comm_host = NULL;
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "no such network interface"));
  unsetenv("GT_COMM_HOST");
  o.comm_iface = NULL;
  /* Addresses workers could not listen on, or peers not reach. */
  o.comm_host = "0.0.0.0";
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "--comm-host '0.0.0.0' is the wildcard address"));
  o.comm_host = "203.0.113.77"; /* TEST-NET-3: no machine's own */
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "--comm-host '203.0.113.77' is not an address of this node"));
  o.comm_host = NULL;
  setenv("GT_COMM_HOST", "203.0.113.77", 1);
  assert_int_equal(comm_addr(&o, "127.0.0.1:2379"), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "GT_COMM_HOST '203.0.113.77' is not an address of this node"));
  unsetenv("GT_COMM_HOST");
}

typedef struct run {
  int code;
  double seconds;
  char *out;
} run;

/* giantrun ARGS with output to dir/NAME.log, bounded by timeout_s. */
static run giantrun(const char *name, double timeout_s, const char *const *args) {
  char log[512];
  snprintf(log, sizeof log, "%s/%s.log", dir, name);
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

/* A bad address stops giantrun at start, before any etcd: exit 2 in well
 * under a second on busy cores; 5 s is > 50x. */
static void test_refused_at_start(void **state) {
  (void)state;
  const char *w = worker_bin();
  const struct {
    const char *flag, *value, *message;
  } cases[] = {
      {"--comm-iface", "nosuch0", "--comm-iface nosuch0: no such network interface on this node"},
      {"--comm-host", "203.0.113.77", "--comm-host '203.0.113.77' is not an address of this node"},
      {"--comm-host", "", "--comm-host '': give an address"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    run r = giantrun("refused", 10, (const char *[]){"--standalone", cases[i].flag, cases[i].value, w, NULL});
    if (r.code != 2 || !strstr(r.out, cases[i].message) || r.seconds > 5)
      fail_msg("%s %s: expected exit 2 with '%s' within 5 s; got %d after %.1f s:\n%s", cases[i].flag, cases[i].value,
               cases[i].message, r.code, r.seconds, r.out);
    free(r.out);
  }
}

/* A --standalone job of two workers that form a group over TCP and
 * all-reduce (launch_worker allreduce=1), started with flags; each
 * worker's GT_COMM_HOST and GT_NODE_ID, and the log's line on the address. */
static void standalone_job(const char *name, const char *flag, const char *value, const char *want_addr,
                           const char *want_from) {
  if (!etcd_fixture_available()) SKIP_CASE("no etcd on PATH");
  char out[300];
  snprintf(out, sizeof out, "%s/%s", dir, name);
  assert_int_equal(mkdir(out, 0700), 0);
  setenv("LW_DIR", out, 1);
  const char *args[16];
  int n = 0;
  args[n++] = "--standalone";
  args[n++] = "--nproc-per-node";
  args[n++] = "2";
  args[n++] = "--node-id";
  args[n++] = "n-addr";
  if (flag) {
    args[n++] = flag;
    args[n++] = value;
  }
  args[n++] = worker_bin();
  args[n++] = "allreduce=1";
  args[n] = NULL;
  /* 1-2 s on busy cores (an etcd with its certificates, two workers and
   * their group): 60 s is > 30x. */
  run r = giantrun(name, 60, args);
  char line[200];
  snprintf(line, sizeof line, "giantrun: node n-addr: workers advertise %s to their peers (from %s)", want_addr,
           want_from);
  if (r.code != 0 || !strstr(r.out, line)) fail_msg("expected exit 0 and '%s'; got %d:\n%s", line, r.code, r.out);
  free(r.out);
  for (int rank = 0; rank < 2; rank++) {
    char path[600], v[128];
    env_path(path, sizeof path, out, 0, rank);
    assert_int_equal(env_get(path, "GT_COMM_HOST", v, sizeof v), 0);
    assert_string_equal(v, want_addr);
    assert_int_equal(env_get(path, "GT_NODE_ID", v, sizeof v), 0);
    assert_string_equal(v, "n-addr");
    assert_int_equal(env_get(path, "allreduce", v, sizeof v), 0);
    assert_string_equal(v, "3"); /* 1 + 2: the group formed over that address */
  }
  assert_int_equal(alive_count(out, 5), 0);
}

static void test_standalone_route(void **state) {
  (void)state;
  unsetenv("GT_COMM_HOST");
  standalone_job("route", NULL, NULL, "127.0.0.1", "this node's route to etcd");
}

/* An inherited GT_COMM_HOST gives way to --comm-iface, and the workers get
 * the interface's address in its place. */
static void test_standalone_iface(void **state) {
  (void)state;
  setenv("GT_COMM_HOST", "127.0.0.5", 1);
  standalone_job("iface", "--comm-iface", "lo", "127.0.0.1", "--comm-iface lo");
  unsetenv("GT_COMM_HOST");
}

static int setup(void **state) {
  (void)state;
  return temp_dir(dir, sizeof dir, "launch-addr");
}

static int teardown(void **state) {
  (void)state;
  rm_rf(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_route),
      cmocka_unit_test(test_iface),
      cmocka_unit_test(test_precedence),
      cmocka_unit_test(test_refused_at_start),
      cmocka_unit_test(test_standalone_route),
      cmocka_unit_test(test_standalone_iface),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
