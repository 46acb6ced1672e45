/* Resharding from peers (gt_ckpt_reshard_peers): the ranks left after one
 * leaves, or joined by one that lost its state, build a new layout in-
 * process and take the state from each other, with no storage involved.
 * The result is checked float for float against the same change made
 * through a checkpoint: save at the old layout, load at the new one. Then
 * both train on, bit-identically.
 *
 *   dp=2,tp=2, rank 1 lost         -> pp=3 on the three left
 *   dp=2,pp=2, rank 3 restarts empty -> dp=2,tp=2 on four, rank 3 given all it holds
 *   dp=4 + ZeRO-1, rank 1 lost     -> its optimizer shard is held by no one:
 *                                     an error naming it, or, given a
 *                                     checkpoint, exactly those floats from it;
 *                                     with a copy on a peer (gt_ckpt_mirror),
 *                                     nothing from storage at all */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "localkit/ranks.h"

#include "ckpt/ckpt_run.h"
#include "ckpt/peers_api.h"

enum { LIVE = 6, END = 10 };

/* The same change through a checkpoint in dir: loaded at `to` on world ranks. */
static void through_checkpoint(const char *dir, const char *to, int zero, int world, cr_state *loaded,
                               cr_state *final) {
  *loaded = cr_state_new(cr_fx.layout);
  *final = cr_state_new(cr_fx.layout);
  cr_cfg cfg = {.layout = to,
                .zero = zero,
                .data = cr_fx.data,
                .dir = dir,
                .s0 = LIVE,
                .s1 = END,
                .loaded = *loaded,
                .final = *final};
  cr_run(world, &cfg);
}

static void same_as_checkpoint_at(const char *what, const cr_state *live_loaded, const cr_state *live_final,
                                  const char *dir, const char *to, int zero, int world) {
  cr_state loaded, final;
  through_checkpoint(dir, to, zero, world, &loaded, &final);
  char w[160];
  snprintf(w, sizeof w, "%s: after the move", what);
  cr_fixture_same_state(w, &loaded, live_loaded);
  snprintf(w, sizeof w, "%s: %d steps later", what, END - LIVE);
  cr_fixture_same_state(w, &final, live_final);
  for (int k = LIVE; k < END; k++) assert_memory_equal(&final.p->losses[k], &live_final->p->losses[k], sizeof(float));
}

static void same_as_checkpoint(const char *what, const cr_state *live_loaded, const cr_state *live_final,
                               const char *dir, const char *to, int world) {
  same_as_checkpoint_at(what, live_loaded, live_final, dir, to, 0, world);
}

static gt_ckpt_peer_stats *shared_stats(void) {
  gt_ckpt_peer_stats *st = harness_shared(4 * sizeof *st);
  memset(st, 0, 4 * sizeof *st);
  return st;
}

static void test_lost_rank_dp2_tp2_to_pp3(void **state) {
  (void)state;
  char *dir = cr_fixture_dir("peers");
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  gt_ckpt_peer_stats *st = shared_stats();
  cr_cfg cfg = {.layout = "dp=2,tp=2",
                .data = cr_fx.data,
                .dir = dir,
                .s1 = END,
                .save_at = LIVE,
                .live_at = LIVE,
                .live_lost = 1 + 1,
                .live_layout = "pp=3",
                .loaded = loaded,
                .final = final,
                .live_stats = st};
  cr_run(4, &cfg);
  uint64_t sent = 0, received = 0;
  for (int r = 0; r < 4; r++) {
    print_message("rank %d: kept %llu, sent %llu, received %llu floats\n", r, (unsigned long long)st[r].floats_kept,
                  (unsigned long long)st[r].floats_sent, (unsigned long long)st[r].floats_received);
    sent += st[r].floats_sent;
    received += st[r].floats_received;
    assert_int_equal(st[r].floats_from_ckpt, 0);
  }
  assert_true(received > 0);
  assert_int_equal(sent, received);
  same_as_checkpoint("dp=2,tp=2 without rank 1 -> pp=3", &loaded, &final, dir, "pp=3", 3);
  cr_rmtree(dir);
  free(dir);
}

static void test_empty_rank_dp2_pp2_to_dp2_tp2(void **state) {
  (void)state;
  char *dir = cr_fixture_dir("peers");
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  gt_ckpt_peer_stats *st = shared_stats();
  cr_cfg cfg = {.layout = "dp=2,pp=2",
                .data = cr_fx.data,
                .dir = dir,
                .s1 = END,
                .save_at = LIVE,
                .live_at = LIVE,
                .live_empty = 3 + 1,
                .live_layout = "dp=2,tp=2",
                .loaded = loaded,
                .final = final,
                .live_stats = st};
  cr_run(4, &cfg);
  /* The empty rank kept nothing: everything it holds came from its peers. */
  assert_int_equal(st[3].floats_kept, 0);
  assert_int_equal(st[3].floats_sent, 0);
  assert_true(st[3].floats_received > 0);
  same_as_checkpoint("dp=2,pp=2 with rank 3 empty -> dp=2,tp=2", &loaded, &final, dir, "dp=2,tp=2", 4);
  cr_rmtree(dir);
  free(dir);
}

static void test_lost_zero1_shard(void **state) {
  (void)state;
  /* The checkpoint of step LIVE, taken first by a run of its own. */
  char *dir = cr_fixture_dir("peers");
  cr_cfg save = {.layout = "dp=4", .zero1 = true, .data = cr_fx.data, .dir = dir, .s1 = LIVE, .save_at = LIVE};
  cr_run(4, &save);
  /* Without a checkpoint to fall back on, every rank left fails alike and
   * names what was lost. */
  int *status = harness_shared(sizeof *status);
  char *error = harness_shared(1024);
  char *scratch = cr_fixture_dir("peers");
  cr_cfg lost = {.layout = "dp=4",
                 .zero1 = true,
                 .data = cr_fx.data,
                 .dir = scratch,
                 .s1 = END,
                 .live_at = LIVE,
                 .live_lost = 1 + 1,
                 .live_layout = "pp=3",
                 .live_status = status,
                 .live_error = error};
  cr_run(4, &lost);
  print_message("without a checkpoint: %s\n", error);
  assert_int_equal(*status, GT_ENOTFOUND);
  assert_non_null(strstr(error, "held by no rank left"));
  assert_non_null(strstr(error, "adamw."));
  /* With it, exactly the lost shard comes from the checkpoint. */
  char step[4200];
  snprintf(step, sizeof step, "%s/step-%08d", dir, LIVE);
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  gt_ckpt_peer_stats *st = shared_stats();
  cr_cfg cfg = {.layout = "dp=4",
                .zero1 = true,
                .data = cr_fx.data,
                .dir = scratch,
                .s1 = END,
                .live_at = LIVE,
                .live_lost = 1 + 1,
                .live_layout = "pp=3",
                .live_fallback = step,
                .loaded = loaded,
                .final = final,
                .live_stats = st};
  cr_run(4, &cfg);
  uint64_t from_ckpt = 0;
  for (int r = 0; r < 4; r++) from_ckpt += st[r].floats_from_ckpt;
  /* Two AdamW moments of a quarter of the parameters, on each of the three
   * pipeline ranks that hold a part of it (and no parameter at all). */
  print_message("floats from the checkpoint: %llu of %zu parameters\n", (unsigned long long)from_ckpt,
                cr_fx.layout->nparams);
  assert_true(from_ckpt > 0 && from_ckpt <= 2 * (cr_fx.layout->nparams / 4 + 64));
  same_as_checkpoint("dp=4 + ZeRO-1 without rank 1 -> pp=3", &loaded, &final, dir, "pp=3", 3);
  cr_rmtree(dir);
  cr_rmtree(scratch);
  free(dir);
  free(scratch);
}

static void test_lost_zero1_shard_from_mirror(void **state) {
  (void)state;
  char *dir = cr_fixture_dir("peers"), *scratch = cr_fixture_dir("peers");
  cr_cfg save = {.layout = "dp=4", .zero1 = true, .data = cr_fx.data, .dir = dir, .s1 = LIVE, .save_at = LIVE};
  cr_run(4, &save);
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  gt_ckpt_peer_stats *st = shared_stats();
  cr_cfg cfg = {.layout = "dp=4",
                .zero1 = true,
                .data = cr_fx.data,
                .dir = scratch,
                .s1 = END,
                .live_at = LIVE,
                .live_lost = 1 + 1,
                .live_layout = "pp=3",
                .live_mirror = true,
                .loaded = loaded,
                .final = final,
                .live_stats = st};
  cr_run(4, &cfg);
  /* Rank 1's copy lives on rank 3 (two on): the lost shard comes from there. */
  for (int r = 0; r < 4; r++) {
    print_message("rank %d: %llu floats offered from its copy, %llu from a checkpoint\n", r,
                  (unsigned long long)st[r].floats_mirrored, (unsigned long long)st[r].floats_from_ckpt);
    assert_int_equal(st[r].floats_from_ckpt, 0);
  }
  assert_true(st[3].floats_mirrored > 0);
  same_as_checkpoint("dp=4 + ZeRO-1 without rank 1, its shard from a peer's copy -> pp=3", &loaded, &final, dir, "pp=3",
                     3);
  cr_rmtree(dir);
  cr_rmtree(scratch);
  free(dir);
  free(scratch);
}

/* ZeRO-2 holds no more single-owner state between steps than ZeRO-1 (its
 * gradients' shards are summed and spent within a step): a rank lost at
 * dp=4 reshapes to dp=3, still ZeRO-2, with the lost optimizer shard from
 * a peer's copy, exactly as through the checkpoint of the same step. */
static void test_lost_zero2_shard_from_mirror(void **state) {
  (void)state;
  char *dir = cr_fixture_dir("peers"), *scratch = cr_fixture_dir("peers");
  cr_cfg save = {.layout = "dp=4", .zero = 2, .data = cr_fx.data, .dir = dir, .s1 = LIVE, .save_at = LIVE};
  cr_run(4, &save);
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  gt_ckpt_peer_stats *st = shared_stats();
  cr_cfg cfg = {.layout = "dp=4",
                .zero = 2,
                .data = cr_fx.data,
                .dir = scratch,
                .s1 = END,
                .live_at = LIVE,
                .live_lost = 1 + 1,
                .live_layout = "dp=3",
                .live_zero = 2,
                .live_mirror = true,
                .loaded = loaded,
                .final = final,
                .live_stats = st};
  cr_run(4, &cfg);
  for (int r = 0; r < 4; r++) assert_int_equal(st[r].floats_from_ckpt, 0);
  assert_true(st[3].floats_mirrored > 0);
  same_as_checkpoint_at("dp=4 + ZeRO-2 without rank 1, its shard from a peer's copy -> dp=3 + ZeRO-2", &loaded, &final,
                        dir, "dp=3", 2, 3);
  cr_rmtree(dir);
  cr_rmtree(scratch);
  free(dir);
  free(scratch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lost_rank_dp2_tp2_to_pp3),
      cmocka_unit_test(test_empty_rank_dp2_pp2_to_dp2_tp2),
      cmocka_unit_test(test_lost_zero1_shard),
      cmocka_unit_test(test_lost_zero1_shard_from_mirror),
      cmocka_unit_test(test_lost_zero2_shard_from_mirror),
  };
  return cmocka_run_group_tests(tests, cr_fixture_setup, cr_fixture_teardown);
}
