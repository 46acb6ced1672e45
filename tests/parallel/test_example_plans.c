/* examples/gpt under giantrun at several plans: the same model code trains at
 * every layout, layouts that see the same data agree with one process (and
 * replicas with uneven shares by --speeds with even ones), and a
 * plan that cannot work fails before training with the constraint named. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char giantrun[512], gpt[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("plans", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* Runs the example on `nproc` workers at `plan` (with extra flags) and
 * returns its final loss. */
static float run_plan(int nproc, const char *plan, const char *extra, int want_exit, const char *want_words) {
  char np[16];
  snprintf(np, sizeof np, "%d", nproc);
  char *argv[40] = {giantrun, "--standalone", "--nproc-per-node", np, "--plan", (char *)plan, gpt,
                    "--corpus", text, "--data", data, "--steps", "8", "--layers", "2", "--channels", "32",
                    "--heads", "4", "--seq", "16", "--batch", "4", "--sample", "0", "--print-every", "0"};
  int n = 27;
  char words[256];
  snprintf(words, sizeof words, "%s", extra ? extra : "");
  for (char *save = NULL, *w = strtok_r(words, " ", &save); w && n < 38; w = strtok_r(NULL, " ", &save))
    argv[n++] = w; /* one flag and its value per word */
  argv[n] = NULL;
  run_result r;
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 120, &r);
  if (r.exit_code != want_exit || (want_words && !strstr(r.output, want_words)))
    fail_msg("plan %s%s%s: exit %d (wanted %d):\n%s", plan, extra ? " " : "", extra ? extra : "", r.exit_code,
             want_exit, r.output);
  if (want_exit != 0) return NAN;
  const char *p = strstr(r.output, "] loss ");
  float first, last;
  if (!p || sscanf(p, "] loss %f -> %f", &first, &last) != 2) fail_msg("no loss line:\n%s", r.output);
  assert_true(last < first);
  print_message("%-10s %-16s loss %.6f -> %.6f\n", plan, extra ? extra : "", first, last);
  return last;
}

static void close_to(float a, float b) {
  if (fabsf(a - b) > 1e-5f * fabsf(b)) fail_msg("losses differ: %.7f vs %.7f", a, b);
}

static void test_every_layout_trains_and_agrees(void **state) {
  (void)state;
  /* One replica: one process, tp=2, tp=4 and sequence parallelism see the same batches. */
  float one = run_plan(1, "auto", NULL, 0, NULL);
  close_to(run_plan(2, "tp=2", NULL, 0, NULL), one);
  close_to(run_plan(4, "tp=4", "--seq-parallel", 0, NULL), one);
  /* Two replicas read two shards: dp=2 with and without tensor parallelism agree. */
  float dp2 = run_plan(2, "dp=2", NULL, 0, NULL);
  close_to(run_plan(4, "dp=2,tp=2", "--zero1", 0, NULL), dp2);
  /* Replicas of unequal speed take 5 and 3 of every 8 rows, the same 8 rows
   * the even replicas take, and every token weighs the same. */
  close_to(run_plan(2, "dp=2", "--speeds 1,0.5", 0, NULL), dp2);
  run_plan(4, "dp=4", "--zero1", 0, NULL);
}

static void test_plans_that_cannot_work_are_refused(void **state) {
  (void)state;
  run_plan(4, "tp=3", NULL, 1, "does not divide the world size 4");
  run_plan(4, "tp=8", NULL, 1, "does not divide the world size 4");
  run_plan(2, "dp=2,sp=1", NULL, 1, "unknown factor 'sp'");
  run_plan(2, "dp=2", "--seq-parallel", 1, "sequence parallelism needs tensor parallelism");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_layout_trains_and_agrees),
      cmocka_unit_test(test_plans_that_cannot_work_are_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
