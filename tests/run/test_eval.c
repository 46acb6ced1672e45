/* The validation loss (--eval-every) is the same number at every layout and
 * after a resume: examples/gpt with --global-batch (so every layout trains
 * on the same rows) evaluates after steps 2 and 5 on a held-out split, in
 * one process and under giantrun at dp=2 x tp=2, and the two agree within
 * the cross-layout tolerance of test_example_plans; a run stopped at step 3
 * and resumed from its checkpoint evaluates bit for bit as one that went
 * straight through. A pipeline layout is refused. --eval-data evaluates on a file of its own. Flags that
 * do not agree are refused before anything starts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

static char giantrun[512], gpt[512], dir[64], text[128], data[128];
static run_result res;

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("eval", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* gpt's flags, small, evaluating every 3 steps on a held-out 2% (or on
 * eval_data), metrics into dir/<name>.jsonl, then `extra` (space-separated
 * words, may be NULL), from argv[at] on; returns the count. */
static int gpt_args(char **argv, int at, const char *name, const char *steps, const char *eval_data, const char *extra,
                    char *metrics, char *words) {
  snprintf(metrics, 128, "%s/%s.jsonl", dir, name);
  char *tail[] = {gpt,    "--corpus",   text, "--data",        data, "--steps",      (char *)steps, "--layers",
                  "2",    "--channels", "32", "--heads",       "4",  "--seq",        "16",          "--global-batch",
                  "8",    "--sample",   "0",  "--print-every", "0",  "--eval-every", "3",           "--metrics",
                  metrics};
  int n = at;
  for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) argv[n++] = tail[i];
  argv[n++] = eval_data ? "--eval-data" : "--eval-split";
  argv[n++] = eval_data ? (char *)eval_data : "0.02";
  snprintf(words, 256, "%s", extra ? extra : "");
  for (char *save = NULL, *w = strtok_r(words, " ", &save); w && n < 46; w = strtok_r(NULL, " ", &save)) argv[n++] = w;
  argv[n] = NULL;
  return n;
}

static void run_one(const char *name, const char *steps, const char *eval_data, const char *extra) {
  char *argv[48], metrics[128], words[256];
  gpt_args(argv, 0, name, steps, eval_data, extra, metrics, words);
  run_cmd(argv, NULL, 120, &res); /* a few small steps: 1-2 s on busy cores */
  if (res.exit_code != 0) run_fail(&res, "gpt (%s): exit %d", name, res.exit_code);
}

/* "eval_loss" of step's metrics line, as printed (NULL: none). */
static const char *eval_text(const char *name, int step, char *out, size_t cap) {
  char path[128], line[2048], want[32];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  snprintf(want, sizeof want, "{\"step\":%d,", step);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  const char *got = NULL;
  while (fgets(line, sizeof line, f)) {
    char *e = strstr(line, "\"eval_loss\":");
    if (strncmp(line, want, strlen(want)) || !e) continue;
    e += strlen("\"eval_loss\":");
    e[strcspn(e, ",}")] = 0;
    snprintf(out, cap, "%s", e);
    got = out;
  }
  fclose(f);
  return got;
}

static float eval_at(const char *name, int step) {
  char v[64];
  if (!eval_text(name, step, v, sizeof v)) fail_msg("%s: no eval_loss at step %d", name, step);
  return strtof(v, NULL);
}

static void test_every_layout_agrees(void **state) {
  (void)state;
  run_one("one", "6", NULL, NULL);
  char *argv[64] = {giantrun, "--standalone", "--nproc-per-node", "4", "--plan", "dp=2,tp=2"};
  char metrics[128], words[256];
  gpt_args(argv, 6, "four", "6", NULL, NULL, metrics, words);
  /* A standalone etcd and 6 small steps on four workers: a few seconds. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 180, &res);
  if (res.exit_code != 0) run_fail(&res, "giantrun dp=2,tp=2: exit %d", res.exit_code);
  for (int step = 2; step <= 5; step += 3) {
    float a = eval_at("one", step), b = eval_at("four", step);
    print_message("step %d: validation loss %.6f alone, %.6f at dp=2,tp=2\n", step, a, b);
    if (!(fabsf(a - b) <= 1e-5f * fabsf(a))) fail_msg("step %d: %.7f alone, %.7f at dp=2,tp=2", step, a, b);
  }
  /* Training moved the model: the loss is not a constant. */
  assert_true(eval_at("one", 2) != eval_at("one", 5));
}

/* A pipeline layout does not evaluate: refused at start, as a bad flag. */
static void test_pipeline_is_refused(void **state) {
  (void)state;
  char *argv[64] = {giantrun, "--standalone", "--nproc-per-node", "2", "--plan", "pp=2"};
  char metrics[128], words[256];
  gpt_args(argv, 6, "pp", "3", NULL, NULL, metrics, words);
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 180, &res);
  /* The workers exit 2 (a usage error, which giantrun does not restart), and the job fails. */
  if (res.exit_code == 0 || !strstr(res.output, "not supported at pipeline layouts") ||
      !strstr(res.output, "exited with status 2"))
    run_fail(&res, "--eval-every at pp=2: exit %d, want the workers' status 2 and the reason", res.exit_code);
}

static void test_resume_evaluates_alike(void **state) {
  (void)state;
  char ck[128], extra[192], a[64], b[64];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  snprintf(extra, sizeof extra, "--ckpt-dir %s --ckpt-every 3", ck);
  run_one("straight", "6", NULL, NULL);
  run_one("stopped", "3", NULL, extra);
  run_one("resumed", "6", NULL, extra);
  if (!strstr(res.output, "resum")) run_fail(&res, "the second run did not resume");
  assert_non_null(eval_text("stopped", 2, a, sizeof a));
  assert_string_equal(a, eval_text("straight", 2, b, sizeof b));
  assert_non_null(eval_text("resumed", 5, a, sizeof a));
  assert_string_equal(a, eval_text("straight", 5, b, sizeof b));
}

static void test_eval_data_file(void **state) {
  (void)state;
  run_one("file", "3", data, NULL);
  assert_true(eval_at("file", 2) > 0);
}

static void test_flags_that_disagree(void **state) {
  (void)state;
  const char *bad[][4] = {
      {"--eval-split", "0.1", NULL, "give --eval-every"},
      {"--eval-every", "2", NULL, "needs one of --eval-data"},
      {"--eval-every", "2", "--eval-split=0.9", "--eval-split"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[] = {gpt,
                    "--corpus",
                    text,
                    "--data",
                    data,
                    "--steps",
                    "2",
                    "--sample",
                    "0",
                    (char *)bad[i][0],
                    (char *)bad[i][1],
                    (char *)bad[i][2],
                    NULL};
    run_cmd(argv, NULL, 60, &res);
    if (res.exit_code != 2 || !strstr(res.output, bad[i][3]))
      run_fail(&res, "%s %s %s: exit %d, want 2 and '%s'", bad[i][0], bad[i][1], bad[i][2] ? bad[i][2] : "",
               res.exit_code, bad[i][3]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_layout_agrees),    cmocka_unit_test(test_pipeline_is_refused),
      cmocka_unit_test(test_resume_evaluates_alike), cmocka_unit_test(test_eval_data_file),
      cmocka_unit_test(test_flags_that_disagree),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
