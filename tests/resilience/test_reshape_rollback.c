/* State that no rank left holds, under giantrun --reshape: the survivors
 * roll back in-process to the newest checkpoint instead of failing the job.
 *
 * examples/gpt on four workers at dp=4 with ZeRO-1, each rank the only
 * holder of a quarter of the optimizer state. The copies of it on peers
 * are taken every 1000 steps (--mirror-every), so none is fresh when rank
 * 1 is killed at step 10 (GT_FAULT crash), two steps after the checkpoint
 * of step 8: its shard is lost. The three left agree on that, load the
 * checkpoint of step 8 resharded to dp=3 in their own processes, and
 * train on to step 24 (2 steps lost, at most --ckpt-every). The job ends
 * 0 in its first generation, and its final loss agrees with one process
 * that trained the 24 steps uninterrupted within the cross-layout
 * tolerance (1e-5): no step applied twice or skipped. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

static char gpt[512], giantrun[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("rollback", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

#define GPT_ARGS                                                                                                   \
  "--corpus", text, "--data", data, "--steps", "24", "--layers", "2", "--channels", "32", "--heads", "4", "--seq", \
      "16", "--global-batch", "12", "--accum", "2", "--sample", "0", "--print-every", "1", "--zero1"

static float final_loss(const run_result *r) {
  float a, b = NAN;
  int from, to;
  const char *p = strstr(r->output, "loss ");
  for (; p; p = strstr(p + 1, "loss "))
    if (sscanf(p, "loss %f -> %f over steps %d..%d", &a, &b, &from, &to) == 4 && to == 24) return b;
  return NAN;
}

static void test_lost_shard_rolls_back_in_process(void **state) {
  (void)state;
  run_result *ref = malloc(sizeof *ref), *r = malloc(sizeof *r);
  assert_non_null(ref);
  assert_non_null(r);
  /* One process, 24 tiny steps: < 2 s, 120 s. */
  run_cmd((char *[]){gpt, GPT_ARGS, NULL}, (char *[]){"OMP_NUM_THREADS=1", NULL}, 120, ref);
  if (ref->exit_code != 0) run_fail(ref, "reference run: exit %d", ref->exit_code);
  float want = final_loss(ref);
  char ck[128];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  char *argv[] = {giantrun,
                  "--standalone",
                  "--nproc-per-node",
                  "4",
                  "--plan",
                  "dp=4",
                  "--reshape",
                  "--ckpt-dir",
                  ck,
                  "--ckpt-every",
                  "4",
                  gpt,
                  GPT_ARGS,
                  "--mirror-every",
                  "1000",
                  NULL};
  /* 24 steps on four ranks with one reshape and a load: ~3 s, ~20 s under
   * ASan on loaded cores; 300 s is > 15x. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=crash:rank=1,at=10", NULL}, 300, r);
  if (r->exit_code != 0) run_fail(r, "giantrun: exit %d, its output above", r->exit_code);
  const char *back = strstr(r->output, "rolled back in-process to ");
  if (!back) run_fail(r, "no in-process roll-back to the checkpoint");
  int step = -1, lost = -1;
  const char *st = strstr(back, "(step ");
  if (!st || sscanf(st, "(step %d), %d step(s) lost", &step, &lost) != 2) run_fail(r, "unreadable roll-back line");
  if (step != 8 || lost < 1 || lost > 4)
    run_fail(r, "rolled back to step %d losing %d, expected step 8, 1..4 lost", step, lost);
  if (strstr(r->output, "restart 1:")) run_fail(r, "the job restarted; it should have rolled back in-process");
  float got = final_loss(r);
  print_message("rolled back to step %d (%d lost); final loss %.6f, uninterrupted %.6f\n", step, lost, got, want);
  if (!(fabsf(got - want) <= 1e-5f * fabsf(want))) run_fail(r, "final loss %.7f, uninterrupted %.7f", got, want);
  free(ref);
  free(r);
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_lost_shard_rolls_back_in_process)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
