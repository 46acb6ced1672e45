/* Exactly-once data across a kill, a resume and changes of width. Every
 * global sample index the replicas take is recorded by step. dp=2 saves
 * every 3 steps and is SIGKILLed at step 7; dp=4 resumes from the newest
 * committed checkpoint and is killed at step 13; one process resumes and
 * runs to step 16. The steps after each resume point are the ones that
 * count (the killed run's later steps were lost with it): over steps
 * 0..15 every index from 0 to 16 x 16 - 1 was taken exactly once. The same
 * holds when replicas change their shares of the rows on the way (3:1,
 * then 1:3), and uneven shares train to the single process's parameters. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "localkit/ranks.h"

enum { STEPS = 16, PER_STEP = CR_ROWS * CR_ACCUM };

typedef struct record {
  unsigned long long rows[STEPS + 8][PER_STEP];
  int nrows[STEPS + 8];
} record;

/* Runs until every rank kills itself at kill_at (or to the end when 0);
 * returns the newest committed step, from which the recording is kept. */
static int run_until(record *rec, const char *data, const char *dir, const char *layout, int world, int kill_at) {
  cr_cfg cfg = {.layout = layout,
                .data = data,
                .dir = dir,
                .s0 = -1,
                .load_if_any = true,
                .s1 = kill_at ? STEPS + 8 : STEPS,
                .save_every = 3,
                .kill_at = kill_at,
                .rows = rec->rows,
                .nrows = rec->nrows};
  int codes[HARNESS_MAX];
  harness_run(world, cr_rank, &cfg, 240, codes); /* as cr_run's bound */
  for (int r = 0; r < world; r++)
    if (codes[r] != (kill_at ? RANK_KILLED_BY(SIGKILL) : RANK_OK))
      fail_msg("%s: rank %d ended with code %d", layout ? layout : "one process", r, codes[r]);
  int steps[4], n;
  assert_int_equal(gt_ckpt_list(dir, steps, 4, &n), GT_OK);
  assert_true(n > 0);
  /* What the killed run did after its newest checkpoint is lost with it. */
  for (int s = steps[0]; s < STEPS + 8; s++) rec->nrows[s] = 0;
  print_message("%s: killed at step %d, newest committed checkpoint at step %d\n", layout ? layout : "one process",
                kill_at, steps[0]);
  return steps[0];
}

/* Over steps 0..STEPS-1 every global index was taken once; the last
 * stretch runs as one process. */
static void finish_and_check(record *rec, char *data, const char *dir, const char *what) {
  cr_cfg last = {.data = data, .dir = dir, .s0 = -1, .s1 = STEPS, .rows = rec->rows, .nrows = rec->nrows};
  cr_run(1, &last);
  int *seen = calloc(STEPS * PER_STEP, sizeof *seen);
  int total = 0;
  for (int s = 0; s < STEPS; s++) {
    assert_int_equal(rec->nrows[s], PER_STEP);
    for (int k = 0; k < PER_STEP; k++, total++) {
      unsigned long long j = rec->rows[s][k];
      assert_true(j < STEPS * PER_STEP);
      seen[j]++;
    }
  }
  for (int j = 0; j < STEPS * PER_STEP; j++)
    if (seen[j] != 1) fail_msg("global sample %d taken %d times", j, seen[j]);
  print_message("%d samples over 16 steps %s: each taken exactly once\n", total, what);
  free(seen);
  cr_rmtree(dir);
  *strrchr(data, '/') = 0;
  cr_rmtree(data);
  free(data);
}

static void test_every_sample_exactly_once(void **state) {
  (void)state;
  char *data = cr_make_data(), dir[4200];
  snprintf(dir, sizeof dir, "%s.ck", data);
  record *rec = harness_shared(sizeof *rec);
  int a = run_until(rec, data, dir, "dp=2", 2, 7);
  int b = run_until(rec, data, dir, "dp=4", 4, 13);
  assert_true(a >= 3 && b > a);
  finish_and_check(rec, data, dir, "at dp=2, dp=4 and one process");
}

/* dp=2 turns to shares 3:1 at step 4 and stops after step 9, checkpointed;
 * dp=2 resumes there at even shares, turns to 1:3 at step 10 and stops
 * after step 12, checkpointed; one process goes on. */
static void test_reshare_exactly_once(void **state) {
  (void)state;
  char *data = cr_make_data(), dir[4200];
  snprintf(dir, sizeof dir, "%s.ck", data);
  record *rec = harness_shared(sizeof *rec);
  cr_cfg a = {.layout = "dp=2",
              .data = data,
              .dir = dir,
              .s1 = 9,
              .save_every = 3,
              .rows = rec->rows,
              .nrows = rec->nrows,
              .share_at = 4,
              .share0 = 3};
  cr_run(2, &a);
  cr_cfg b = a;
  b.s0 = 9;
  b.s1 = 12;
  b.share_at = 10;
  b.share0 = 1;
  cr_run(2, &b);
  finish_and_check(rec, data, dir, "at dp=2 with shares 2:2, 3:1, 2:2, 1:3, then one process");
}

/* Replicas that turn to shares 3:1 at step 5 (gt_trainer_set_rows) train to
 * what one process does over the same global batches. */
static void test_uneven_shares_match_one_process(void **state) {
  (void)state;
  char *data = cr_make_data();
  cr_cfg one = {.data = data, .dir = "/nonexistent-unused", .s1 = CR_STEPS, .final = cr_state_new(NULL)};
  cr_run(1, &one);
  cr_cfg two = {.layout = "dp=2",
                .data = data,
                .dir = "/nonexistent-unused",
                .s1 = CR_STEPS,
                .final = cr_state_new(one.final.p),
                .share_at = 5,
                .share0 = 3};
  cr_run(2, &two);
  train_diff d = train_result_compare(one.final.p, two.final.p, CR_STEPS, CR_C);
  print_message(
      "dp=2, rows 2:2 then 3:1: loss %.4f -> %.4f, max relative difference: loss %.2e, parameters %.2e (%s)\n",
      two.final.p->losses[0], two.final.p->losses[CR_STEPS - 1], d.loss, d.param, d.worst);
  assert_true(d.loss <= 1e-5);
  assert_true(d.param <= 1e-5);
  *strrchr(data, '/') = 0;
  cr_rmtree(data);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_sample_exactly_once),
                                     cmocka_unit_test(test_reshare_exactly_once),
                                     cmocka_unit_test(test_uneven_shares_match_one_process)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
