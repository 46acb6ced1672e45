/* A pipeline's links (parallel/pp_links.h): for chains and rings of 2, 3
 * and 4 ranks, each rank has a link to send on and one to receive on in
 * each direction exactly where the pipeline has a neighbour, and with two
 * receives posted ahead of its sends in both directions (what the executor
 * does) every message arrives, in order, from the right neighbour. Were a
 * rank to send and receive on one communicator, its sends would queue
 * behind its receives and a ring would deadlock: the operations' timeout
 * makes that a failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "localkit/ranks.h"
#include "parallel/pp_links.h"

enum { MSGS = 2, FLOATS = 1000 };

typedef struct links_case {
  int P;
  bool ring;
} links_case;

static int rank_main(int rank, int n, void *arg) {
  const links_case *lc = arg;
  gt_store *st = harness_store();
  char prefix[64];
  snprintf(prefix, sizeof prefix, "pp/%d/%d", n, lc->ring);
  /* 20 s per operation: a deadlock fails well inside the harness's bound. */
  gt_comm *pp = harness_comm(st, prefix, rank, n, GT_COMM_AUTO, 20000);
  CHECK(pp);
  gt_pp_links l;
  snprintf(prefix, sizeof prefix, "links/%d/%d", n, lc->ring);
  CHECK_OK(gt_pp_links_create(pp, rank, n, lc->ring, prefix, &l));
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  bool has_next = lc->ring || rank < n - 1, has_prev = lc->ring || rank > 0;
  CHECK((l.send[GT_PP_DIR_FWD] != NULL) == has_next && (l.recv[GT_PP_DIR_FWD] != NULL) == has_prev);
  CHECK((l.send[GT_PP_DIR_BWD] != NULL) == has_prev && (l.recv[GT_PP_DIR_BWD] != NULL) == has_next);
  static float in[2][MSGS][FLOATS], out[2][MSGS][FLOATS];
  gt_comm_req *rx[2][MSGS] = {{0}}, *tx[2][MSGS] = {{0}};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < MSGS && l.recv[d]; k++)
      CHECK_OK(gt_comm_recv_start(l.recv[d], in[d][k], FLOATS, GT_F32, GT_PP_LINK_SENDER, &rx[d][k]));
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < MSGS && l.send[d]; k++) {
      for (int i = 0; i < FLOATS; i++) out[d][k][i] = (float)(10000 * d + 100 * rank + 10 * k) + (float)i / FLOATS;
      CHECK_OK(gt_comm_send_start(l.send[d], out[d][k], FLOATS, GT_F32, GT_PP_LINK_RECEIVER, &tx[d][k]));
    }
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < MSGS; k++) {
      if (tx[d][k]) CHECK_OK(gt_comm_wait(tx[d][k], -1));
      if (!rx[d][k]) continue;
      CHECK_OK(gt_comm_wait(rx[d][k], -1));
      int from = d == GT_PP_DIR_FWD ? prev : next;
      for (int i = 0; i < FLOATS; i++)
        CHECK(in[d][k][i] == (float)(10000 * d + 100 * from + 10 * k) + (float)i / FLOATS);
    }
  gt_pp_links_destroy(&l);
  gt_comm_destroy(pp);
  gt_store_destroy(st);
  return RANK_OK;
}

static void test_links(void **state) {
  (void)state;
  for (int P = 2; P <= 4; P++)
    for (int ring = 0; ring < 2; ring++) {
      links_case lc = {.P = P, .ring = ring};
      int codes[4];
      /* A few hundred ms each on busy cores; 120 s bounds a deadlock's 20 s. */
      int bad = harness_run(P, rank_main, &lc, 120, codes);
      if (bad) fail_msg("%s of %d ranks: %d rank(s) failed", ring ? "ring" : "chain", P, bad);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_links)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
