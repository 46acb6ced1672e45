/* examples/gpt --rebalance --rebalance-local (the ranks decide, without
 * the leader: test_lead_rebalance has the leader's) under giantrun, dp=2,
 * with rank 1 made twice as slow from step 20 (GT_FAULT). The rows move away from the slow replica
 * in a few moves, and the loss is a clean run's, since every token weighs
 * the same and every sample is taken once whatever the shares. The step
 * times before the fault, before the move and after it are printed, not
 * asserted: how close the mitigated job comes to the ideal for the
 * capacity left is bench_failslow's figure (bench/RESULTS.md). (That noise
 * does not move rows back and forth is test_rebalance's: here the ranks
 * share two busy cores, their speeds really change, and a row may move
 * back.)
 *
 * At pp=2 (dp=1), with rank 1, the second stage, made three times as slow
 * from step 10: --rebalance re-cuts the stages by their measured speeds,
 * layers leave stage 1 with their parameters and AdamW moments, and the
 * loss is that of the same faulty run without it (every layer computes as
 * before; the gradient norm's sum over stages is associated differently,
 * within the hybrid tests' 1e-5). Step times printed, not asserted. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

enum { STEPS = 60, FROM = 20, MAXSTEPS = 64 };

/* A run (60 small steps on two ranks, one slowed) takes ~4 s, 10 to 20 s
 * on loaded cores: 240 s is >= 12x. */
#define RUN_TIMEOUT_S 240

static char giantrun[512], gpt[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("rebalance", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

typedef struct run {
  float first, last;       /* losses */
  double step_s[MAXSTEPS]; /* the lead's step times */
  int moves;               /* rebalances */
  int settled;             /* the step after which replica 1 first held at most 6 rows (-1: never) */
  int share[2];            /* the shares after the last */
} run;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_steps(const run *r, int lo, int hi) {
  double v[MAXSTEPS];
  int n = 0;
  for (int s = lo; s < hi; s++) v[n++] = r->step_s[s];
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void run_gpt(const char *tag, const char *fault, bool rebalance, run *out) {
  static run_result r;
  char metrics[160], steps[16], env[128];
  snprintf(metrics, sizeof metrics, "%s/%s.jsonl", dir, tag);
  snprintf(steps, sizeof steps, "%d", STEPS);
  snprintf(env, sizeof env, "GT_FAULT=%s", fault ? fault : "");
  char *argv[40] = {giantrun,
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "--plan",
                    "dp=2",
                    gpt,
                    "--corpus",
                    text,
                    "--data",
                    data,
                    "--steps",
                    steps,
                    "--layers",
                    "2",
                    "--channels",
                    "128",
                    "--heads",
                    "4",
                    "--seq",
                    "128",
                    "--batch",
                    "8",
                    "--sample",
                    "0",
                    "--print-every",
                    "0",
                    "--metrics",
                    metrics};
  int n = 29;
  if (rebalance) {
    argv[n++] = "--rebalance";
    argv[n++] = "--rebalance-local";
  }
  argv[n] = NULL;
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", env, NULL}, RUN_TIMEOUT_S, &r);
  if (r.exit_code != 0) run_fail(&r, "%s: exit %d, its output above", tag, r.exit_code);
  memset(out, 0, sizeof *out);
  const char *p = strstr(r.output, "] loss ");
  if (!p || sscanf(p, "] loss %f -> %f", &out->first, &out->last) != 2)
    run_fail(&r, "%s: no loss line, its output above", tag);
  out->settled = -1;
  for (p = r.output; (p = strstr(p, "rebalance after step ")); p++) {
    int step, a, b;
    if (sscanf(p, "rebalance after step %d: rows %*d,%*d -> %d,%d", &step, &a, &b) != 3)
      run_fail(&r, "%s: malformed rebalance line in its output (above)", tag);
    if (b <= 6 && out->settled < 0) out->settled = step;
    out->share[0] = a;
    out->share[1] = b;
    out->moves++;
  }
  FILE *f = fopen(metrics, "r");
  assert_non_null(f);
  char line[1024];
  int got = 0;
  while (fgets(line, sizeof line, f)) {
    int step;
    double t;
    const char *q = strstr(line, "\"step_time_s\":");
    if (sscanf(line, "{\"step\":%d", &step) == 1 && q && sscanf(q, "\"step_time_s\":%lf", &t) == 1 && step >= 0 &&
        step < MAXSTEPS) {
      out->step_s[step] = t;
      got++;
    }
  }
  fclose(f);
  assert_int_equal(got, STEPS);
}

/* One run with the fault and --rebalance: the loss must match every time;
 * where the rows went is judged by the return value. */
static bool attempt(int k, const run *clean, run *moved) {
  char fault[64], tag[16];
  snprintf(fault, sizeof fault, "slow:rank=1,factor=2,from=%d", FROM);
  snprintf(tag, sizeof tag, "moved%d", k);
  run_gpt(tag, fault, true, moved);
  double loss_gap = fabs((double)moved->last - clean->last) / clean->last;
  assert_true(loss_gap <= 1e-4);
  /* Rows leave replica 1 in a move or two (a third as it settles, no
   * flapping), at most 6 of 16 left on it where a third (5.3) is the ideal
   * for the rows' cost alone (what each step costs besides its rows pushes
   * a little further), early enough to time 10 steps after. */
  bool moved_ok = moved->moves >= 1 && moved->moves <= 4 && moved->share[0] + moved->share[1] == 16 &&
                  moved->share[1] <= 6 && moved->share[1] >= 2 && moved->settled >= FROM &&
                  moved->settled + 12 <= STEPS;
  /* Steps at even shares before the fault, slow ones before the move, and
   * those after it. */
  double t_clean = median_steps(moved, 5, FROM), t_slow = NAN, t_after = NAN, ideal = t_clean / 0.75;
  if (moved->settled >= FROM) t_slow = median_steps(moved, FROM + 1, moved->settled + 1);
  if (moved->settled >= FROM) t_after = median_steps(moved, moved->settled + 2, STEPS);
  bool ok = moved_ok;
  print_message(
      "try %d: %d move(s), rows %d,%d at the end, at most 6 on rank 1 after step %d; %.1f ms a step "
      "before the fault, %.1f ms after it, %.1f ms once moved: %.0f%% of the ideal's (%.1f ms) steps/s; rows%s; "
      "loss %.5f vs clean %.5f (%.1e)\n",
      k, moved->moves, moved->share[0], moved->share[1], moved->settled, 1e3 * t_clean, 1e3 * t_slow, 1e3 * t_after,
      100 * ideal / t_after, 1e3 * ideal, ok ? "" : " (not within the bounds)", moved->last, clean->last, loss_gap);
  return ok;
}

/* The ranks run on cores other jobs may share, which moves the measured
 * speeds: where the rows go has three tries, the loss holds on every one. */
static void test_rows_leave_the_slow_replica(void **state) {
  (void)state;
  run *clean = calloc(1, sizeof *clean), *moved = calloc(1, sizeof *moved);
  assert_true(clean && moved);
  run_gpt("clean", NULL, false, clean);
  bool ok = false;
  for (int k = 0; k < 3 && !ok; k++) ok = attempt(k, clean, moved);
  free(clean);
  free(moved);
  assert_true(ok);
}

/* The pipeline case: the lead's output, its final loss and the median
 * step time over [lo, hi) from its printed steps. */
static void run_pp(const char *tag, bool rebalance, run_result *r, float *loss) {
  char *argv[40] = {giantrun,
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "--plan",
                    "pp=2",
                    gpt,
                    "--corpus",
                    text,
                    "--data",
                    data,
                    "--steps",
                    "60",
                    "--layers",
                    "4",
                    "--channels",
                    "64",
                    "--heads",
                    "4",
                    "--seq",
                    "64",
                    "--batch",
                    "8",
                    "--accum",
                    "4",
                    "--sample",
                    "0",
                    "--print-every",
                    "0"};
  int n = 29;
  if (rebalance) {
    argv[n++] = "--rebalance";
    argv[n++] = "--rebalance-local";
  }
  argv[n] = NULL;
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=slow:rank=1,factor=3,from=10", NULL}, RUN_TIMEOUT_S, r);
  if (r->exit_code != 0) run_fail(r, "%s: exit %d, its output above", tag, r->exit_code);
  const char *p = strstr(r->output, "] loss ");
  float first;
  if (!p || sscanf(p, "] loss %f -> %f", &first, loss) != 2) run_fail(r, "%s: no loss line, its output above", tag);
}

/* One run with the fault and --rebalance against the run without: the
 * loss must match every time; whether the cut moved once and held is the
 * return value. */
static bool attempt_pp(int k, float kept_loss) {
  static run_result recut;
  float recut_loss;
  run_pp("recut", true, &recut, &recut_loss);
  double gap = fabs((double)recut_loss - kept_loss) / kept_loss;
  assert_true(gap <= 1e-5);
  const char *p = strstr(recut.output, "re-cut after step ");
  int step, a0, a1, b0, b1, layers;
  if (!p || sscanf(p, "re-cut after step %d: first layers of the stages %d,%d -> %d,%d of %d", &step, &a0, &a1, &b0,
                   &b1, &layers) != 6)
    run_fail(&recut, "no re-cut line, its output above");
  int recuts = 0;
  for (const char *q = p; (q = strstr(q, "re-cut after step ")); q++) recuts++;
  /* The first re-cut gives stage 1 fewer layers; the new cut holds (a
   * second may follow as the speeds settle), no flapping. */
  bool ok = step >= 10 && b0 == 0 && b1 > a1 && b1 < layers && recuts <= 2;
  print_message(
      "try %d: pp=2, stage 1 x3 from step 10: re-cut after step %d, stage 1 from layer %d to layer %d of "
      "%d, %d re-cut(s)%s; loss %.6f vs %.6f without (%.1e)\n",
      k, step, a1, b1, layers, recuts, ok ? "" : " (not within the bounds)", recut_loss, kept_loss, gap);
  if (!ok && k == 2) print_message("%s", recut.output);
  return ok;
}

/* As for the rows: the stage speeds are measured on shared cores, so
 * where the layers go has three tries; the loss holds on every one. */
static void test_layers_leave_the_slow_stage(void **state) {
  (void)state;
  static run_result kept;
  float kept_loss;
  run_pp("kept", false, &kept, &kept_loss);
  bool ok = false;
  for (int k = 0; k < 3 && !ok; k++) ok = attempt_pp(k, kept_loss);
  assert_true(ok);
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows_leave_the_slow_replica),
                                     cmocka_unit_test(test_layers_leave_the_slow_stage)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
