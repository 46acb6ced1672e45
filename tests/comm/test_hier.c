/* All-reduce across hosts in two levels (comm/hier.c), on emulated hosts:
 * two network namespaces on a bridge, two ranks in each. The group must
 * find the two hosts, take shared memory inside each and TCP between the
 * leaders ("tcp+shm"), and give every rank the exact sum (integers in
 * fp32, so any order of addition gives the same bits) and the same result
 * as the flat TCP ring of the same ranks; a group with one rank per host
 * stays flat. A rank killed mid-operation fails every other rank's
 * operation, through whichever level it was in. Needs root and `ip`: it
 * exits 77 (skipped) without them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "localkit/netns.h"
#include "localkit/ranks.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

#define NODES 2
#define PER_NODE 2
/* Generous bounds (2 loaded cores, sanitizers): an all-reduce of BIG
 * floats takes well under a second here; a group forms in under 1 s. */
#define OP_TIMEOUT_MS 30000
#define RUN_S 240
#define BIG ((size_t)3 << 20) /* 12 MiB: many pieces through both levels */

typedef struct shared {
  chaos_net net;
  int victim; /* the rank that kills itself in the failure case, or -1 */
} shared;

static shared *sh;

/* In a rank: into its node's namespace, and a client of the run's store
 * on the bridge. */
static gt_store *enter_node(int rank, int per_node) {
  int node = rank / per_node;
  char path[96];
  snprintf(path, sizeof path, "/var/run/netns/%s", sh->net.ns[node]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(setns(fd, CLONE_NEWNET) == 0);
  close(fd);
  return harness_store();
}

static gt_comm *group(gt_store *s, const char *prefix, int rank, int n, int per_node, gt_comm_transport t) {
  gt_comm_config cfg = {.store = s,
                        .prefix = prefix,
                        .rank = rank,
                        .size = n,
                        .host = sh->net.ip[rank / per_node],
                        .transport = t,
                        .secret = HARNESS_SECRET,
                        .op_timeout_ms = OP_TIMEOUT_MS};
  gt_comm *c = NULL;
  CHECK_OK(gt_comm_init(&cfg, &c));
  return c;
}

/* Integers small enough that every partial sum is exact in fp32. */
static float val(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 1001) - 500); }

static void check_sum(gt_comm *c, size_t count, int rank, int n, gt_comm_op op) {
  float *x = malloc((count ? count : 1) * sizeof *x);
  CHECK(x);
  for (size_t i = 0; i < count; i++) x[i] = val(rank, i);
  CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, op));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += val(r, i);
    if (op == GT_COMM_AVG) want /= (float)n;
    CHECK(x[i] == want);
  }
  free(x);
}

static int sums_main(int rank, int n, void *arg) {
  (void)arg;
  gt_store *s = enter_node(rank, PER_NODE);
  gt_comm *h = group(s, "hier", rank, n, PER_NODE, GT_COMM_AUTO);
  CHECK(!strcmp(gt_comm_transport_name(h), "tcp+shm"));
  gt_comm *flat = group(s, "flat", rank, n, PER_NODE, GT_COMM_TCP);
  CHECK(!strcmp(gt_comm_transport_name(flat), "tcp"));
  const size_t sizes[] = {0, 1, 3, 1001, (size_t)1 << 16, BIG + 5};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_sum(h, sizes[k], rank, n, GT_COMM_SUM);
    check_sum(flat, sizes[k], rank, n, GT_COMM_SUM);
  }
  check_sum(h, 4099, rank, n, GT_COMM_AVG);
  /* The other collectives run on the flat mesh between the all-reduces. */
  float mine[3] = {(float)rank, (float)rank + 0.5f, -1.0f}, all[3 * NODES * PER_NODE];
  CHECK_OK(gt_comm_allgather(h, mine, all, 3, GT_F32));
  for (int r = 0; r < n; r++) CHECK(all[3 * r] == (float)r && all[3 * r + 1] == (float)r + 0.5f);
  CHECK_OK(gt_comm_barrier(h));
  check_sum(h, 77, rank, n, GT_COMM_SUM);
  gt_comm_destroy(flat);
  gt_comm_destroy(h);
  gt_store_destroy(s);
  return RANK_OK;
}

/* One rank a host: nothing to gain from two levels. */
static int one_per_host_main(int rank, int n, void *arg) {
  (void)arg;
  gt_store *s = enter_node(rank, 1);
  gt_comm *c = group(s, "single", rank, n, 1, GT_COMM_AUTO);
  CHECK(!strcmp(gt_comm_transport_name(c), "tcp"));
  check_sum(c, 1001, rank, n, GT_COMM_SUM);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static int failure_main(int rank, int n, void *arg) {
  (void)arg;
  gt_store *s = enter_node(rank, PER_NODE);
  gt_comm *h = group(s, "dies", rank, n, PER_NODE, GT_COMM_AUTO);
  check_sum(h, 1001, rank, n, GT_COMM_SUM);
  if (rank == sh->victim) raise(SIGKILL);
  float *x = calloc(BIG, sizeof *x);
  CHECK(x);
  double t0 = gt_now();
  gt_status st = GT_OK;
  for (int k = 0; k < 20 && st == GT_OK; k++) st = gt_comm_allreduce(h, x, BIG, GT_F32, GT_COMM_SUM);
  CHECK(st != GT_OK);                            /* the dead rank is noticed ... */
  CHECK(gt_now() - t0 < OP_TIMEOUT_MS / 2000.0); /* ... by its death, not a timeout */
  free(x);
  gt_comm_destroy(h);
  gt_store_destroy(s);
  return RANK_OK;
}

static int setup(void **state) {
  (void)state;
  sh = harness_shared(sizeof *sh);
  if (chaos_net_create(&sh->net, NODES) != 0) return -1;
  harness_store_host(sh->net.host_ip); /* each run's store, on the bridge */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  chaos_net_destroy(&sh->net);
  return 0;
}

static void sums(void **state) {
  (void)state;
  int codes[NODES * PER_NODE];
  assert_int_equal(harness_run(NODES * PER_NODE, sums_main, NULL, RUN_S, codes), 0);
}

static void one_per_host(void **state) {
  (void)state;
  int codes[NODES];
  assert_int_equal(harness_run(NODES, one_per_host_main, NULL, RUN_S, codes), 0);
}

static void failures(void **state) {
  (void)state;
  /* A leader, then a rank that is not one. */
  const int victims[2] = {2, 1};
  for (int v = 0; v < 2; v++) {
    sh->victim = victims[v];
    int codes[NODES * PER_NODE];
    harness_run(NODES * PER_NODE, failure_main, NULL, RUN_S, codes);
    for (int r = 0; r < NODES * PER_NODE; r++)
      assert_int_equal(codes[r], r == sh->victim ? RANK_KILLED_BY(SIGKILL) : RANK_OK);
  }
}

int main(void) {
  const char *why = chaos_unsupported();
  if (*why) {
    printf("skipped: %s\n", why);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sums),
      cmocka_unit_test(one_per_host),
      cmocka_unit_test(failures),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
