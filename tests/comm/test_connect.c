/* Reaching peers while a group forms. An address in the store that no
 * connection reaches fails the group within the connect bound, not the
 * group's timeout, with the peer's rank, its address and the node that
 * advertised it in the message; a peer that publishes its address later
 * than that bound is still waited for; and what a rank publishes carries
 * its node's name (GT_NODE_ID) when that is a valid one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "localkit/ranks.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

/* Time bounds. On two busy cores a group of two forms in under 0.06 s and a
 * refused connection is seen in under 1 ms, so an attempt that fails
 * takes the connect bound plus at most one retry's nap (0.1 s).
 * CONNECT_MS: the bound the tests set; the group's own timeout, GROUP_MS,
 * is 30x that, so a failure inside SLACK_S of the bound cannot be the
 * group's. */
#define CONNECT_MS 1000
#define GROUP_MS 30000
#define SLACK_S 5.0
/* The late peer publishes 5x the connect bound after the other waits. */
#define LATE_S 1.5
/* A whole scenario: seconds; 60 s only bounds a hang. */
#define RUN_S 60

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A loopback port that refuses connections: bound, never listening, kept
 * open so that nothing else takes it meanwhile. */
static int refusing_port(int *fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  CHECK(*fd >= 0 && bind(*fd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(getsockname(*fd, (struct sockaddr *)&a, &l) == 0);
  return ntohs(a.sin_port);
}

/* Forms rank 1 of 2 against rank 0's address `addr` (set by hand) with
 * connect bound connect_ms (0: the environment's or the default); the
 * status, the time it took and the message. */
static gt_status form_against(gt_store *s, const char *prefix, const char *addr, int connect_ms, double *took,
                              char *msg, size_t n) {
  char key[128];
  snprintf(key, sizeof key, "comm/%s/addr/0", prefix);
  CHECK_OK(gt_store_set(s, key, addr, strlen(addr)));
  gt_comm_config cfg = {.store = s,
                        .prefix = prefix,
                        .rank = 1,
                        .size = 2,
                        .secret = HARNESS_SECRET,
                        .host = "127.0.0.1",
                        .transport = GT_COMM_TCP,
                        .init_timeout_ms = GROUP_MS,
                        .connect_timeout_ms = connect_ms};
  gt_comm *c = NULL;
  double t0 = now_s();
  gt_status st = gt_comm_init(&cfg, &c);
  *took = now_s() - t0;
  snprintf(msg, n, "%s", gt_last_error());
  CHECK(c == NULL || st == GT_OK);
  gt_comm_destroy(c);
  return st;
}

static void expect_in(const char *msg, const char *want) {
  if (!strstr(msg, want)) {
    fprintf(stderr, "rank %d: expected '%s' in: %s\n", harness_rank, want, msg);
    fflush(stderr);
    _exit(RANK_FAIL);
  }
}

static int unreachable_main(int r, int n, void *arg) {
  (void)r;
  (void)n;
  (void)arg;
  gt_store *s = harness_store();
  int fd, port = refusing_port(&fd);
  char addr[64], at[64], msg[1024];
  double took;
  snprintf(at, sizeof at, "cannot reach rank 0 at 127.0.0.1:%d", port);

  /* Advertised by a node giantrun named: the message names it. */
  snprintf(addr, sizeof addr, "127.0.0.1 %d n7", port);
  gt_status st = form_against(s, "reach-node", addr, CONNECT_MS, &took, msg, sizeof msg);
  fprintf(stderr, "refused, bound %d ms: %.2f s: %s\n", CONNECT_MS, took, msg);
  CHECK(st == GT_ETIMEDOUT);
  CHECK(took >= CONNECT_MS / 1000.0 * 0.9 && took < CONNECT_MS / 1000.0 + SLACK_S);
  expect_in(msg, "forming group 'reach-node' (rank 1 of 2)");
  expect_in(msg, at);
  expect_in(msg, "(the address node n7 advertised; set giantrun's --comm-host or --comm-iface there if it is wrong)");
  expect_in(msg, "no connection in ");
  expect_in(msg, "Connection refused");

  /* Without a node name (a rank started by hand): its node, and
   * GT_COMM_HOST, are what to look at. The bound from the environment. */
  snprintf(addr, sizeof addr, "127.0.0.1 %d", port);
  CHECK(setenv("GT_COMM_CONNECT_TIMEOUT_MS", "700", 1) == 0);
  st = form_against(s, "reach-anon", addr, 0, &took, msg, sizeof msg);
  unsetenv("GT_COMM_CONNECT_TIMEOUT_MS");
  fprintf(stderr, "refused, bound from the environment (700 ms): %.2f s: %s\n", took, msg);
  CHECK(st == GT_ETIMEDOUT);
  CHECK(took >= 0.6 && took < 0.7 + SLACK_S);
  expect_in(msg, at);
  expect_in(msg, "the address it advertised; set giantrun's --comm-host or --comm-iface, or GT_COMM_HOST, on its node");
  close(fd);
  gt_store_destroy(s);
  return RANK_OK;
}

static void unreachable_address(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(1, unreachable_main, NULL, RUN_S, codes), 0);
}

/* Rank 0 publishes its address LATE_S after rank 1 started waiting for it,
 * past the connect bound: the group forms, since a peer not yet in the
 * store is waited for up to the group's timeout. Rank 0 runs on a node
 * named nodeA; rank 1's name is not a valid one, and is left out. */
static int late_main(int r, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  CHECK(setenv("GT_NODE_ID", r == 0 ? "nodeA" : "bad node!", 1) == 0);
  if (r == 0) usleep((useconds_t)(LATE_S * 1e6));
  gt_comm_config cfg = {.store = s,
                        .prefix = "late",
                        .rank = r,
                        .size = n,
                        .secret = HARNESS_SECRET,
                        .host = "127.0.0.1",
                        .transport = GT_COMM_TCP,
                        .init_timeout_ms = GROUP_MS,
                        .connect_timeout_ms = CONNECT_MS / 4};
  gt_comm *c = NULL;
  CHECK_OK(gt_comm_init(&cfg, &c));
  float x = (float)(r + 1);
  CHECK_OK(gt_comm_allreduce(c, &x, 1, GT_F32, GT_COMM_SUM));
  CHECK(x == 3.0f);
  /* What each rank published: "HOST PORT NODE", or "HOST PORT". */
  for (int j = 0; j < n; j++) {
    char key[64], host[64], node[64] = "", extra[8];
    int port = 0;
    void *v;
    size_t len;
    snprintf(key, sizeof key, "comm/late/addr/%d", j);
    CHECK_OK(gt_store_get(s, key, &v, &len, GROUP_MS));
    char val[256];
    snprintf(val, sizeof val, "%.*s", (int)len, (char *)v);
    free(v);
    int got = sscanf(val, "%63s %d %63s %7s", host, &port, node, extra);
    CHECK(!strcmp(host, "127.0.0.1") && port > 0);
    CHECK(j == 0 ? got == 3 && !strcmp(node, "nodeA") : got == 2);
  }
  CHECK_OK(gt_comm_barrier(c));
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void late_peer(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, late_main, NULL, RUN_S, codes), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unreachable_address),
      cmocka_unit_test(late_peer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
