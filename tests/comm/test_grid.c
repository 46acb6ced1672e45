/* The process grid: rank arithmetic for every (dp, tp, pp) factorization of
 * 8 against a naive reference, then real groups on 8 forked ranks, rebuilt
 * at every layout inside the same processes, and communicator split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "localkit/ranks.h"
#include "giant/engine/grid.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"
#include "giant/group.h"

enum { WORLD = 8 };

static int layouts(gt_grid_layout *out) {
  int k = 0;
  for (int dp = 1; dp <= WORLD; dp++)
    for (int tp = 1; tp <= WORLD; tp++)
      for (int pp = 1; pp <= WORLD; pp++)
        if (dp * tp * pp == WORLD) out[k++] = (gt_grid_layout){dp, tp, pp};
  return k;
}

/* Reference: Megatron's order written out as nested loops, pp outermost. */
static void reference_coords(const gt_grid_layout *l, int rank, gt_grid_coords *c) {
  int r = 0;
  for (int pp = 0; pp < l->pp; pp++)
    for (int dp = 0; dp < l->dp; dp++)
      for (int tp = 0; tp < l->tp; tp++, r++)
        if (r == rank) *c = (gt_grid_coords){dp, tp, pp};
}

static int coord(const gt_grid_coords *c, gt_grid_axis a) {
  return a == GT_GRID_DP ? c->dp : a == GT_GRID_TP ? c->tp : c->pp;
}

static void test_arithmetic(void **state) {
  (void)state;
  gt_grid_layout ls[32];
  int nl = layouts(ls);
  assert_int_equal(nl, 10); /* the ordered factorizations of 8 into three */
  for (int i = 0; i < nl; i++) {
    const gt_grid_layout *l = &ls[i];
    assert_int_equal(gt_grid_check(l, WORLD), GT_OK);
    for (int a = 0; a < 3; a++) {
      int n = gt_grid_axis_size(l, (gt_grid_axis)a);
      int seen[WORLD] = {0}, group_of[WORLD];
      for (int r = 0; r < WORLD; r++) {
        gt_grid_coords c, ref;
        assert_int_equal(gt_grid_coords_of(l, r, &c), GT_OK);
        reference_coords(l, r, &ref);
        assert_memory_equal(&c, &ref, sizeof c);
        assert_int_equal(gt_grid_rank_of(l, &c), r);
        int ranks[WORLD], index, group;
        assert_int_equal(gt_grid_group(l, r, (gt_grid_axis)a, ranks, &index, &group), GT_OK);
        assert_int_equal(ranks[index], r);
        assert_true(group >= 0 && group < WORLD / n);
        group_of[r] = group;
        for (int j = 0; j < n; j++) {
          /* Members differ from r only along this axis, in axis order. */
          gt_grid_coords m;
          gt_grid_coords_of(l, ranks[j], &m);
          assert_int_equal(coord(&m, (gt_grid_axis)a), j);
          for (int b = 0; b < 3; b++)
            if (b != a) assert_int_equal(coord(&m, (gt_grid_axis)b), coord(&c, (gt_grid_axis)b));
          if (a == GT_GRID_TP) assert_int_equal(ranks[j], ranks[0] + j); /* adjacent */
          if (j == index) seen[ranks[j]]++;
        }
      }
      /* Groups partition the world: each rank once, members share a group id. */
      for (int r = 0; r < WORLD; r++) {
        assert_int_equal(seen[r], 1);
        int ranks[WORLD];
        gt_grid_group(l, r, (gt_grid_axis)a, ranks, NULL, NULL);
        for (int j = 0; j < n; j++) assert_int_equal(group_of[ranks[j]], group_of[r]);
      }
    }
  }
  gt_grid_layout bad = {2, 2, 3};
  assert_int_equal(gt_grid_check(&bad, WORLD), GT_EINVAL);
  gt_grid_layout zero = {0, 8, 1};
  assert_int_equal(gt_grid_check(&zero, WORLD), GT_EINVAL);
  gt_grid_coords c;
  assert_int_equal(gt_grid_coords_of(&ls[0], WORLD, &c), GT_EINVAL);
}

static int grid_main(int r, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  gt_grid_layout ls[32];
  int nl = layouts(ls);
  for (int i = 0; i < nl; i++) {
    gt_grid_config cfg = {.store = s, .layout = ls[i], .rank = r};
    char gen[32];
    snprintf(gen, sizeof gen, "gen%d", i);
    cfg.generation = gen;
    cfg.comm = (gt_comm_config){.secret = HARNESS_SECRET,
                                .host = "127.0.0.1",
                                .transport = i % 2 ? GT_COMM_TCP : GT_COMM_AUTO,
                                .init_timeout_ms = 30000,
                                .op_timeout_ms = 30000}; /* none may time out */
    gt_grid *g = NULL;
    CHECK_OK(gt_grid_create(&cfg, &g));
    const gt_grid_coords *me = gt_grid_my_coords(g);
    gt_grid_coords want;
    CHECK_OK(gt_grid_coords_of(&ls[i], r, &want));
    CHECK(me->dp == want.dp && me->tp == want.tp && me->pp == want.pp);
    float x = (float)r;
    CHECK_OK(gt_comm_allreduce(gt_grid_world(g), &x, 1, GT_F32, GT_COMM_SUM));
    CHECK(x == (float)(n * (n - 1) / 2));
    for (int a = 0; a < 3; a++) {
      gt_comm *c = gt_grid_comm(g, (gt_grid_axis)a);
      int ranks[WORLD], index;
      CHECK_OK(gt_grid_group(&ls[i], r, (gt_grid_axis)a, ranks, &index, NULL));
      CHECK(gt_comm_size(c) == gt_grid_axis_size(&ls[i], (gt_grid_axis)a));
      CHECK(gt_comm_rank(c) == index);
      /* Gathering world ranks over the group yields exactly its members. */
      float got[WORLD], mine = (float)r;
      CHECK_OK(gt_comm_allgather(c, &mine, got, 1, GT_F32));
      for (int j = 0; j < gt_comm_size(c); j++) CHECK(got[j] == (float)ranks[j]);
    }
    gt_grid_destroy(g);
  }
  /* Split: even and odd ranks, ordered by descending key. */
  gt_comm *w = harness_comm(s, "splitparent", r, n, GT_COMM_AUTO, 30000);
  gt_comm *half = NULL;
  CHECK_OK(gt_comm_split(w, r % 2, -r, "halves", &half));
  CHECK(half && gt_comm_size(half) == n / 2);
  CHECK(gt_comm_rank(half) == (n - 2 + (r % 2) - r) / 2);
  float x = (float)r;
  CHECK_OK(gt_comm_allreduce(half, &x, 1, GT_F32, GT_COMM_SUM));
  CHECK(x == (float)(r % 2 ? 1 + 3 + 5 + 7 : 0 + 2 + 4 + 6));
  gt_comm *none = (gt_comm *)1;
  CHECK_OK(gt_comm_split(w, r == 0 ? 0 : -1, 0, "lonely", &none));
  CHECK(r == 0 ? none != NULL && gt_comm_size(none) == 1 : none == NULL);
  gt_comm_destroy(none);
  gt_comm_destroy(half);
  gt_comm_destroy(w);
  gt_store_destroy(s);
  return RANK_OK;
}

static void test_grids_on_8_ranks(void **state) {
  (void)state;
  int codes[WORLD];
  /* About 2 s on two loaded cores (optimized build): 120 s is > 10x with
   * sanitizers too; only a hang gets there. */
  int bad = harness_run(WORLD, grid_main, NULL, 120, codes);
  for (int r = 0; r < WORLD; r++)
    if (codes[r]) print_error("rank %d exited with %d\n", r, codes[r]);
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arithmetic),
      cmocka_unit_test(test_grids_on_8_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
