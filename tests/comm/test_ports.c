/* Listening ports inside a range (comm/ports.h, GT_COMM_PORTS): the range's
 * text, a port in use passed over, the error that names the range once all
 * are taken, a port whose listener closed taken again while its accepted
 * connection lives and after it left TIME_WAIT behind, and the
 * listeners that follow GT_COMM_PORTS: gt_wire_listen, the TCP store and
 * the meshes of communicators on forked ranks. The ports are a window
 * below the kernel's ephemeral range that this test holds before it
 * starts, so that nothing else on the machine takes them meanwhile. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/comm_internal.h"
#include "comm/ports.h"
#include "comm/wire.h"
#include "common/gt_test.h"
#include "localkit/ranks.h"
#include "giant/engine/store.h"

enum { WINDOW = 8 };

/* n consecutive ports below the ephemeral range (where no connection's
 * own port falls), each listened on at 127.0.0.1 by this process: fds[i]
 * holds base + i. Returns base, or 0 when no window is free. */
static int hold_window(int n, int *fds) {
  int eph = 32768;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d", &eph) != 1) eph = 32768;
    fclose(f);
  }
  for (int base = eph - 2000 - (getpid() % 64) * n; base > 1024; base -= n) {
    int i = 0;
    for (; i < n; i++)
      if (gt_ports_listen_at("127.0.0.1", base + i, &fds[i], NULL) != GT_OK) break;
    if (i == n) return base;
    while (i-- > 0) close(fds[i]);
  }
  return 0;
}

static void release(int *fds, int n) {
  for (int i = 0; i < n; i++) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
}

static int local_port(int fd, int peer) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  int r = peer ? getpeername(fd, (struct sockaddr *)&sa, &sl) : getsockname(fd, (struct sockaddr *)&sa, &sl);
  return r == 0 ? ntohs(sa.sin_port) : -1;
}

static void test_parse(void **state) {
  (void)state;
  gt_port_range r;
  OK(gt_ports_parse("41000-41003", "--comm-ports", &r));
  assert_int_equal(r.lo, 41000);
  assert_int_equal(r.hi, 41003);
  assert_int_equal(gt_ports_count(&r), 4);
  OK(gt_ports_parse("1-65535", "--comm-ports", &r));
  assert_int_equal(gt_ports_count(&r), 65535);
  OK(gt_ports_parse("29500", "--comm-ports", &r)); /* one port */
  assert_int_equal(r.lo, 29500);
  assert_int_equal(r.hi, 29500);
  static const char *const bad[] = {"",     "x",       "0-5",           "41000-",
                                    "-5",   "1-65536", "41000-41001x",  " 41000-41001",
                                    "+5-6", "5--6",    "41000 - 41001", "99999999999999999999-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    expect_error(gt_ports_parse(bad[i], "--comm-ports", &r), GT_EINVAL, "want A-B, two ports in 1..65535");
    assert_int_equal(gt_ports_count(&r), 0);
  }
  expect_error(gt_ports_parse("5-3", "--comm-ports", &r), GT_EINVAL,
               "--comm-ports '5-3': the first port is greater than the last");
  expect_error(gt_ports_parse(NULL, "GT_COMM_PORTS", &r), GT_EINVAL, "GT_COMM_PORTS ''");
  gt_port_range none = {0, 0};
  assert_int_equal(gt_ports_count(&none), 0);
}

static void test_first(void **state) {
  (void)state;
  setenv("GT_LOCAL_RANK", "3", 1);
  assert_int_equal(gt_ports_first(), 3);
  setenv("GT_LOCAL_RANK", "x", 1);
  assert_int_equal(gt_ports_first(), (unsigned)getpid());
  unsetenv("GT_LOCAL_RANK");
  assert_int_equal(gt_ports_first(), (unsigned)getpid());
}

/* Ports in use are passed over, from the start index around the range;
 * with all four taken the error names the range and the count. */
static void test_skips_in_use_then_exhausted(void **state) {
  (void)state;
  int held[4], got[3] = {-1, -1, -1}, port;
  int base = hold_window(4, held);
  if (!base) skip();
  gt_port_range r = {base, base + 3};
  release(held + 1, 3); /* base stays taken */
  OK(gt_ports_listen("127.0.0.1", &r, 0, &got[0], &port));
  assert_int_equal(port, base + 1);
  assert_int_equal(local_port(got[0], 0), base + 1);
  OK(gt_ports_listen("127.0.0.1", &r, 4, &got[1], &port)); /* 4 is index 0 again */
  assert_int_equal(port, base + 2);
  OK(gt_ports_listen("127.0.0.1", &r, 7, &got[2], &port)); /* index 3 */
  assert_int_equal(port, base + 3);
  int fd = -1;
  char want[200];
  snprintf(want, sizeof want,
           "no free port on 127.0.0.1 in --comm-ports %d-%d (GT_COMM_PORTS): all 4 in use; widen the range", base,
           base + 3);
  expect_error(gt_ports_listen("127.0.0.1", &r, 1, &fd, &port), GT_EIO, want);
  assert_int_equal(fd, -1);
  /* One freed: found from any start. */
  release(&got[1], 1);
  OK(gt_ports_listen("127.0.0.1", &r, 3, &fd, &port));
  assert_int_equal(port, base + 2);
  close(fd);
  /* An address of no interface here: no port of the range would do, and
   * the error says why rather than blaming the range. */
  expect_error(gt_ports_listen("192.0.2.1", &r, 0, &fd, &port), GT_EIO, "cannot listen on 192.0.2.1:");
  gt_port_range wrong = {5, 3};
  expect_error(gt_ports_listen("127.0.0.1", &wrong, 0, &fd, &port), GT_EINVAL, "port range 5-3");
  release(got, 3);
  release(held, 1);
}

/* A group formed again (a reshape) finds the port its last listener had:
 * the connection that listener accepted still holds the port, and later
 * its TIME_WAIT does. */
static void test_port_taken_again_after_close(void **state) {
  (void)state;
  int held[1];
  int base = hold_window(1, held);
  if (!base) skip();
  release(held, 1);
  gt_port_range r = {base, base};
  int lfd, port, client, server;
  OK(gt_ports_listen("127.0.0.1", &r, 0, &lfd, &port));
  assert_int_equal(port, base);
  double deadline = gt_wire_deadline(30000); /* loopback connects in microseconds */
  OK(gt_wire_connect("127.0.0.1", port, deadline, &client));
  OK(gt_wire_accept(lfd, deadline, NULL, &server, NULL, 0));
  assert_int_equal(local_port(server, 0), base);
  close(lfd);
  OK(gt_ports_listen("127.0.0.1", &r, 0, &lfd, &port)); /* the accepted connection lives on */
  assert_int_equal(port, base);
  close(server); /* this side closes first: its end waits in TIME_WAIT on base */
  close(client);
  close(lfd);
  OK(gt_ports_listen("127.0.0.1", &r, 0, &lfd, &port));
  assert_int_equal(port, base);
  close(lfd);
}

/* "Any port" is any of GT_COMM_PORTS: gt_wire_listen and the TCP store
 * take theirs from it; a port asked for by number is that port. */
static void test_listeners_follow_the_env(void **state) {
  (void)state;
  int held[4];
  int base = hold_window(4, held);
  if (!base) skip();
  release(held, 4);
  char range[32];
  snprintf(range, sizeof range, "%d-%d", base, base + 3);
  setenv("GT_COMM_PORTS", range, 1);
  int fd, port;
  OK(gt_wire_listen("127.0.0.1", 0, &fd, &port));
  assert_in_range(port, base, base + 3);
  assert_int_equal(local_port(fd, 0), port);
  int fd2, port2;
  expect_error(gt_wire_listen("127.0.0.1", port, &fd2, &port2), GT_EIO, "cannot listen on 127.0.0.1:"); /* taken */
  close(fd);
  gt_store *s;
  gt_store_tcp_config cfg = {
      .host = "127.0.0.1", .port = 0, .is_host = true, .secret = HARNESS_SECRET, .timeout_ms = 30000};
  OK(gt_store_tcp_open(&cfg, &s));
  assert_in_range(gt_store_tcp_port(s), base, base + 3);
  gt_store_destroy(s);
  setenv("GT_COMM_PORTS", "41000:41003", 1);
  expect_error(gt_wire_listen("127.0.0.1", 0, &fd, &port), GT_EINVAL, "GT_COMM_PORTS '41000:41003'");
  unsetenv("GT_COMM_PORTS");
}

/* Each rank forms two TCP groups of all three, one after the other, both
 * kept: every connection's listening end (the accepting rank's own port,
 * the connecting rank's peer port) is in the range. */
static int base_port;

static int mesh_rank(int rank, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  CHECK(s != NULL);
  gt_comm *c[2];
  c[0] = harness_comm(s, "ports/a", rank, n, GT_COMM_TCP, 30000);
  c[1] = harness_comm(s, "ports/b", rank, n, GT_COMM_TCP, 30000);
  CHECK(c[0] && c[1]);
  for (int k = 0; k < 2; k++) {
    for (int j = 0; j < n; j++) {
      if (j == rank) continue;
      int p = local_port(c[k]->fds[j], j < rank); /* a lower rank listened; we listened for higher ones */
      if (p < base_port || p >= base_port + WINDOW) {
        fprintf(stderr, "rank %d: group %d: link to rank %d on port %d, outside %d-%d\n", rank, k, j, p, base_port,
                base_port + WINDOW - 1);
        _exit(RANK_FAIL);
      }
    }
    float x = (float)(rank + 1);
    CHECK_OK(gt_comm_allreduce(c[k], &x, 1, GT_F32, GT_COMM_SUM));
    CHECK(x == 6.0f);
  }
  gt_comm_destroy(c[1]);
  gt_comm_destroy(c[0]);
  gt_store_destroy(s);
  return RANK_OK;
}

static void test_meshes_listen_in_range(void **state) {
  (void)state;
  int held[WINDOW];
  base_port = hold_window(WINDOW, held);
  if (!base_port) skip();
  release(held, WINDOW);
  char range[32];
  snprintf(range, sizeof range, "%d-%d", base_port, base_port + WINDOW - 1);
  setenv("GT_COMM_PORTS", range, 1); /* the parent's store listens in it too */
  int codes[3];
  /* Three ranks forming two groups: well under a second on busy cores. */
  int failed = harness_run(3, mesh_rank, NULL, 120, codes);
  unsetenv("GT_COMM_PORTS");
  assert_int_equal(failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_first),
      cmocka_unit_test(test_skips_in_use_then_exhausted),
      cmocka_unit_test(test_port_taken_again_after_close),
      cmocka_unit_test(test_listeners_follow_the_env),
      cmocka_unit_test(test_meshes_listen_in_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
