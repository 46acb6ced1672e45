/* Every rung of the mitigation ladder, carried out in a running job: the
 * same decision (run/ladder.c) picks a rung when the fail-slow monitor
 * flags a rank, and the run takes it. examples/gpt under giantrun
 * --standalone on two ranks, rank 1 made x3 slow from step 20 (GT_FAULT),
 * with --ladder forcing each rung in turn (what it would cost is logged
 * all the same):
 *   rows     dp=2, --rebalance: rows move off rank 1's replica;
 *   recut    pp=2, --rebalance: layers move off rank 1's stage;
 *   exclude  dp=2, --reshape: rank 1 leaves, rank 0 trains on alone;
 *   restart  dp=2, --ckpt-dir: a checkpoint of the step, then every worker
 *            exits 75 and giantrun restarts the job from it (the slowness
 *            played in generation 0 only), which then trains to the end.
 * The bar is x2 (--failslow-theta 1): what is tested is the rungs, and
 * two unpinned ranks on two shared cores now and then read x1.4-1.8 for
 * a few steps before the fault, which would take the forced rung early
 * (how soon x1.5 is flagged, test_failslow_pair and test_failslow_job
 * show). Each case checks the ladder's line names the rung, that the rung ran
 * within a few steps of the flag, and that the job ended 0. And
 * rebalancing goes on after a reshape, at the new layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

enum { STEPS = 80 };

static char gpt[512], giantrun[512], dir[64], text[128], data[128], wrap[160];
static run_result res;

static int setup(void **state) {
  (void)state;
  if (giantrun_scratch("ladder", giantrun, gpt, dir, text, data) != 0) return -1;
  /* The slowness in generation 0 only: a restarted job runs at speed, and
   * its ladder chooses by the prices again (a later flag wins), so that a
   * false alarm beside a CPU hog costs no second forced restart. */
  snprintf(wrap, sizeof wrap, "%s/slow-gen0.sh", dir);
  FILE *f = fopen(wrap, "w");
  if (!f) return -1;
  fprintf(f,
          "#!/bin/sh\nif [ \"$GT_GENERATION\" = 0 ]; then\n"
          "  GT_FAULT='slow:rank=1,factor=3,from=20'; export GT_FAULT; exec \"$@\"\n"
          "fi\nexec \"$@\" --ladder auto\n");
  fclose(f);
  return chmod(wrap, 0755);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* The step of the first line holding `what` after `from` (its "after step
 * N" or "at step N"), or -1. */
static int step_of(const char *from, const char *what, const char *marker) {
  const char *p = from ? strstr(from, what) : NULL;
  if (!p) return -1;
  const char *m = strstr(p, marker);
  return m ? atoi(m + strlen(marker)) : -1;
}

/* The step the monitor flagged rank 1 at, and the ladder's line after it. */
static const char *flagged(const run_result *r, int *step) {
  const char *f = strstr(r->output, "fail-slow: rank 1 compute x");
  const char *at = f ? strstr(f, "(flagged at step ") : NULL;
  *step = at ? atoi(at + strlen("(flagged at step ")) : -1;
  return strstr(r->output, "gpt: ladder: rank 1 is x");
}

static void run_case(const char *plan, const char *ladder, const char *const *extra) {
  char steps[16], ck[128];
  snprintf(steps, sizeof steps, "%d", STEPS);
  snprintf(ck, sizeof ck, "%s/ck-%s", dir, ladder);
  char *argv[64] = {giantrun,
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "--plan",
                    (char *)plan,
                    "--max-restarts",
                    "1",
                    wrap,
                    gpt,
                    "--corpus",
                    text,
                    "--data",
                    data,
                    "--steps",
                    steps,
                    "--layers",
                    "4",
                    "--channels",
                    "64",
                    "--heads",
                    "4",
                    "--seq",
                    "32",
                    "--batch",
                    "4",
                    "--accum",
                    "2",
                    "--sample",
                    "0",
                    "--print-every",
                    "0",
                    "--failslow",
                    "--failslow-clock",
                    "cpu",
                    "--failslow-theta",
                    "1",
                    "--ladder",
                    (char *)ladder};
  int k = 0;
  while (argv[k]) k++;
  for (int i = 0; extra[i]; i++) argv[k++] = !strcmp(extra[i], "CK") ? ck : (char *)extra[i];
  argv[k] = NULL;
  /* 80 small steps on two ranks, a third of them x3, one mitigation:
   * ~10 s, ~60 s under ASan on loaded cores; 600 s. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 600, &res);
  if (res.exit_code != 0) run_fail(&res, "--ladder %s: exit %d, its output above", ladder, res.exit_code);
}

static void expect_rung(const char *rung, int flag, const char *line) {
  if (flag < 20) run_fail(&res, "rank 1 was not flagged after its slowness began at step 20");
  if (!line) run_fail(&res, "no ladder line after the flag");
  const char *eol = strchr(line, '\n');
  const char *name = strstr(line, rung);
  if (!name || (eol && name > eol) || !strstr(line, "(--ladder)"))
    run_fail(&res, "the ladder's line does not end with %s (--ladder)", rung);
}

static void test_rows(void **state) {
  (void)state;
  run_case("dp=2", "rows", (const char *[]){"--rebalance", "--rebalance-local", NULL});
  int flag;
  const char *line = flagged(&res, &flag);
  expect_rung("S1 rebalance", flag, line);
  int moved = step_of(line, "rebalance after step ", "rebalance after step ");
  print_message("rank 1 flagged at step %d; rows moved after step %d\n", flag, moved);
  if (moved < flag || moved > flag + 10) run_fail(&res, "rows moved after step %d, the flag at %d", moved, flag);
  if (!strstr(strstr(line, "rebalance after step "), "-> ")) run_fail(&res, "no new rows");
}

static void test_recut(void **state) {
  (void)state;
  run_case("pp=2", "recut", (const char *[]){"--rebalance", "--rebalance-local", NULL});
  int flag;
  const char *line = flagged(&res, &flag);
  expect_rung("S2 re-cut", flag, line);
  int cut = step_of(line, "re-cut after step ", "re-cut after step ");
  print_message("rank 1 flagged at step %d; re-cut after step %d\n", flag, cut);
  if (cut < flag || cut > flag + 10) run_fail(&res, "re-cut after step %d, the flag at %d", cut, flag);
}

static void test_exclude(void **state) {
  (void)state;
  run_case("dp=2", "exclude", (const char *[]){"--reshape", NULL});
  int flag;
  const char *line = flagged(&res, &flag);
  expect_rung("S3 exclude", flag, line);
  int left = step_of(line, "[rank 1] gpt: excluded after step ", "excluded after step ");
  print_message("rank 1 flagged at step %d; left after step %d\n", flag, left);
  if (left != flag + 1 && left != flag) run_fail(&res, "rank 1 left after step %d, the flag at %d", left, flag);
  if (!strstr(line, "reshaped in ")) run_fail(&res, "rank 0 did not reshape without it");
}

static void test_restart(void **state) {
  (void)state;
  run_case("dp=2", "restart", (const char *[]){"--ckpt-dir", "CK", "--ckpt-every", "50", NULL});
  int flag;
  const char *line = flagged(&res, &flag);
  expect_rung("S4 restart", flag, line);
  int saved = step_of(line, "ladder: restart: checkpoint of step ", "checkpoint of step ");
  char resumed[64];
  snprintf(resumed, sizeof resumed, "(step %d, taken at", saved);
  print_message("rank 1 flagged at step %d; checkpoint of step %d, then a restart\n", flag, saved);
  if (saved < flag || saved > flag + 1) run_fail(&res, "saved step %d, the flag at %d", saved, flag);
  const char *res_line = strstr(line, "checkpoints: resumed from ");
  if (!res_line || !strstr(res_line, resumed)) run_fail(&res, "the restarted job did not resume at step %d", saved);
  if (!strstr(res_line, "over steps ")) run_fail(&res, "the restarted job did not train to the end");
}

/* Rebalancing goes on after a reshape, at the new layout: three ranks at
 * dp=3 with --rebalance --reshape, rank 2 killed at step 10 (GT_FAULT
 * crash), rank 1 made x3 slow from step 25. The two left reshape to dp=2,
 * and rows then move off rank 1's replica (it was not rebalanced at all
 * after a reshape before). */
static void test_rebalance_after_reshape(void **state) {
  (void)state;
  char steps[16];
  snprintf(steps, sizeof steps, "%d", STEPS);
  char *argv[] = {giantrun,
                  "--standalone",
                  "--nproc-per-node",
                  "3",
                  "--plan",
                  "dp=3",
                  "--reshape",
                  gpt,
                  "--corpus",
                  text,
                  "--data",
                  data,
                  "--steps",
                  steps,
                  "--layers",
                  "4",
                  "--channels",
                  "64",
                  "--heads",
                  "4",
                  "--seq",
                  "32",
                  "--global-batch",
                  "12",
                  "--accum",
                  "2",
                  "--sample",
                  "0",
                  "--print-every",
                  "0",
                  "--rebalance",
                  "--rebalance-local",
                  NULL};
  /* 80 small steps, a reshape, rows moved: ~10 s, ~60 s under ASan on
   * loaded cores; 600 s. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=crash:rank=2,at=10;slow:rank=1,factor=3,from=25", NULL}, 600,
          &res);
  if (res.exit_code != 0) run_fail(&res, "giantrun: exit %d, its output above", res.exit_code);
  const char *reshaped = strstr(res.output, "[rank 0] gpt: reshaped in ");
  if (!reshaped || !strstr(reshaped, " of 2 in membership epoch")) run_fail(&res, "no reshape to two ranks");
  int moved = step_of(reshaped, "rebalance after step ", "rebalance after step ");
  print_message("reshaped to dp=2; rows moved after step %d\n", moved);
  if (moved < 25) run_fail(&res, "no rows moved after the reshape, off the slow replica (from step 25)");
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rebalance_after_reshape),
      cmocka_unit_test(test_rows),
      cmocka_unit_test(test_recut),
      cmocka_unit_test(test_exclude),
      cmocka_unit_test(test_restart),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
