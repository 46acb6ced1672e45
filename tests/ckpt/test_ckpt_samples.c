/* Exactly-once data across a kill, a resume and changes of width. Every
 * global sample index the replicas take is recorded by step. dp=2 saves
 * every 3 steps and is SIGKILLed at step 7; dp=4 resumes from the newest
 * committed checkpoint and is killed at step 13; one process resumes and
 * runs to step 16. The steps after each resume point are the ones that
 * count (the killed run's later steps were lost with it): over steps
 * 0..15 every index from 0 to 16 x 16 - 1 was taken exactly once. */
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
  cr_cfg cfg = {.layout = layout, .data = data, .dir = dir, .s0 = -1, .load_if_any = true,
                .s1 = kill_at ? STEPS + 8 : STEPS, .save_every = 3, .kill_at = kill_at, .rows = rec->rows,
                .nrows = rec->nrows};
  int codes[HARNESS_MAX];
  harness_run(world, cr_rank, &cfg, 240, codes);
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

static void test_every_sample_exactly_once(void **state) {
  (void)state;
  char *data = cr_make_data(), dir[4200];
  snprintf(dir, sizeof dir, "%s.ck", data);
  record *rec = harness_shared(sizeof *rec);
  int a = run_until(rec, data, dir, "dp=2", 2, 7);
  int b = run_until(rec, data, dir, "dp=4", 4, 13);
  assert_true(a >= 3 && b > a);
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
  print_message("%d samples over 16 steps at dp=2, dp=4 and one process: each taken exactly once\n", total);
  free(seen);
  cr_rmtree(dir);
  *strrchr(data, '/') = 0;
  cr_rmtree(data);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_sample_exactly_once)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
