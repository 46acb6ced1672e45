/* --tensorboard, read back by TensorBoard's own reader (EventAccumulator,
 * through tests/run/tboard_check.py): examples/gpt trains 25 steps and
 * every scalar is in the event file at every step with the metrics file's
 * value, the validation loss (--eval-every) at the steps evaluated; the
 * step line shows the fraction done and the time left, and the
 * metrics lines hold them. A step that fails (GT_FAULT's nan, with
 * --skip-nonfinite 0) is a text summary the text plugin reads. A run
 * killed with SIGKILL mid-run (GT_FAULT's crash) leaves a file that reads
 * cleanly, and so does that file cut at any byte of its last records. A
 * --tensorboard that cannot be a directory is refused as a bad flag.
 * Skipped without python3 and tensorboard (tools/deps.sh installs them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_skip.h"
#include "common/gt_test.h"
#include "common/run_cmd.h"

enum { STEPS = 25 };

static char gpt[512], dir[64], text[128], data[128];
static bool have_tensorboard;
static run_result res;

static void python(char *const argv_tail[], run_result *r) {
  char *argv[12] = {GT_PYTHON3, GT_SOURCE_DIR "/tests/run/tboard_check.py"};
  int n = 2;
  while (argv_tail[n - 2] && n < 11) argv[n] = argv_tail[n - 2], n++;
  argv[n] = NULL;
  run_cmd(argv, NULL, 300, r);
}

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  if (scratch_corpus("tboard", dir, text, data) != 0) return -1;
  char *probe[] = {GT_PYTHON3, "-c", "import tensorboard.backend.event_processing.event_accumulator", NULL};
  if (access(GT_PYTHON3, X_OK) == 0) {
    run_cmd(probe, NULL, 120, &res);
    have_tensorboard = res.exit_code == 0;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* gpt, small, with --tensorboard dir/<name> and --metrics dir/<name>.jsonl,
 * and --eval-every eval_every on a held-out 5% where that is not NULL. */
static void run_gpt(const char *name, const char *steps, const char *eval_every, char *const env[], run_result *r) {
  char tb[128], metrics[128];
  snprintf(tb, sizeof tb, "%s/%s", dir, name);
  snprintf(metrics, sizeof metrics, "%s/%s.jsonl", dir, name);
  char *argv[40] = {gpt,           "--corpus",      text, "--data",           data, "--steps",
                    (char *)steps, "--layers",      "1",  "--channels",       "32", "--heads",
                    "4",           "--seq",         "16", "--batch",          "4",  "--sample",
                    "0",           "--print-every", "5",  "--skip-nonfinite", "0",  "--metrics",
                    metrics,       "--tensorboard", tb};
  int n = 27;
  if (eval_every) {
    argv[n++] = "--eval-every";
    argv[n++] = (char *)eval_every;
    argv[n++] = "--eval-split";
    argv[n++] = "0.05";
  }
  argv[n] = NULL;
  run_cmd(argv, env, 120, r); /* 25 small steps: 1-2 s on busy cores */
}

static void check(char *const tail[]) {
  python(tail, &res);
  if (res.exit_code != 0) run_fail(&res, "tboard_check.py %s: exit %d", tail[0], res.exit_code);
  print_message("%s", res.output);
}

/* The value of "key": in the metrics line of step. */
static double metrics_field(const char *name, int step, const char *key) {
  char path[128], line[2048], want[32], k[64];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  snprintf(want, sizeof want, "{\"step\":%d,", step);
  snprintf(k, sizeof k, "\"%s\":", key);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  double v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, want, strlen(want)) && strstr(line, k)) v = atof(strstr(line, k) + strlen(k));
  fclose(f);
  return v;
}

static void test_scalars_match_metrics(void **state) {
  (void)state;
  if (!have_tensorboard) SKIP_CASE("no python3 with tensorboard (tools/deps.sh giant_install_py_deps)");
  char steps[16], tb[128], metrics[128];
  snprintf(steps, sizeof steps, "%d", STEPS);
  run_gpt("plain", steps, "10", NULL, &res);
  if (res.exit_code != 0) run_fail(&res, "gpt: exit %d", res.exit_code);
  /* Step 20 of 25: 21 done. */
  if (!strstr(res.output, "| 84.0% | ETA ")) run_fail(&res, "no '84.0%% | ETA' on step 20's line");
  assert_true(metrics_field("plain", 0, "eta_s") > 0);
  assert_true(metrics_field("plain", 0, "done") > 0.039 && metrics_field("plain", 0, "done") < 0.041);
  assert_true(metrics_field("plain", STEPS - 1, "done") == 1.0);
  assert_true(metrics_field("plain", STEPS - 1, "eta_s") == 0.0);
  /* --eval-every 10: after steps 9 and 19, and after the last. */
  assert_true(metrics_field("plain", 9, "eval_loss") > 0 && metrics_field("plain", 8, "eval_loss") < 0);
  assert_true(metrics_field("plain", STEPS - 1, "eval_loss") > 0);
  if (!strstr(res.output, "| eval ")) run_fail(&res, "no '| eval' on a step line");
  snprintf(tb, sizeof tb, "%s/plain", dir);
  snprintf(metrics, sizeof metrics, "%s/plain.jsonl", dir);
  check((char *[]){"scalars", tb, metrics, NULL});
}

static void test_failed_step_is_text(void **state) {
  (void)state;
#ifndef GIANT_FAULTS
  SKIP_CASE("a build without fault points (GIANT_FAULTS=OFF) refuses GT_FAULT");
#endif
  if (!have_tensorboard) SKIP_CASE("no python3 with tensorboard (tools/deps.sh giant_install_py_deps)");
  char tb[128];
  run_gpt("nan", "12", NULL, (char *[]){"GT_FAULT=nan:rank=0,at=6", NULL}, &res);
  if (res.exit_code != 70)
    run_fail(&res, "gpt with a NaN at step 6 and --skip-nonfinite 0: exit %d, want 70", res.exit_code);
  snprintf(tb, sizeof tb, "%s/nan", dir);
  check((char *[]){"text", tb, "events/fault", "6", "step 6 failed", NULL});
}

static void test_killed_run_reads_cleanly(void **state) {
  (void)state;
#ifndef GIANT_FAULTS
  SKIP_CASE("a build without fault points (GIANT_FAULTS=OFF) refuses GT_FAULT");
#endif
  if (!have_tensorboard) SKIP_CASE("no python3 with tensorboard (tools/deps.sh giant_install_py_deps)");
  char tb[128], metrics[128];
  run_gpt("killed", "1000", NULL, (char *[]){"GT_FAULT=crash:rank=0,at=15", NULL}, &res);
  if (res.exit_code != 128 + 9) run_fail(&res, "gpt crashed at step 15: exit %d, want 137", res.exit_code);
  assert_true(metrics_field("killed", 14, "loss") > 0);
  snprintf(tb, sizeof tb, "%s/killed", dir);
  snprintf(metrics, sizeof metrics, "%s/killed.jsonl", dir);
  check((char *[]){"cut", tb, metrics, NULL});
}

static void test_bad_dir_is_a_bad_flag(void **state) {
  (void)state;
  char file[128];
  snprintf(file, sizeof file, "%s/afile", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  char *argv[] = {gpt,  "--corpus", text, "--data", data, "--steps",  "3", "--layers",      "1",  "--channels",
                  "32", "--heads",  "4",  "--seq",  "16", "--sample", "0", "--tensorboard", file, NULL};
  run_cmd(argv, NULL, 120, &res);
  if (res.exit_code != 2) run_fail(&res, "--tensorboard naming a file: exit %d, want 2", res.exit_code);
  if (!strstr(res.output, "--tensorboard")) run_fail(&res, "the error does not name --tensorboard");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars_match_metrics),
      cmocka_unit_test(test_failed_step_is_text),
      cmocka_unit_test(test_killed_run_reads_cleanly),
      cmocka_unit_test(test_bad_dir_is_a_bad_flag),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
