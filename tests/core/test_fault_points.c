/* Fault points only in a build that asked for them (GIANT_FAULTS,
 * docs/faults.md). On a build with them, GT_FAULT=crash:rank=0,at=1 kills
 * the example with SIGKILL at step 1: step 0 is recorded, step 1 is not;
 * under giantrun the worker is restarted and killed again. On a build
 * without them, the example refuses GT_FAULT before it does anything (no
 * data prepared, no step), says how to get a build that has them, and
 * exits 2 (GT_RUN_EXIT_USAGE), which giantrun does not restart; a trainer
 * made directly, not through the run API, refuses alike. CI runs the core
 * tests on a build of each kind (.ci/run). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"
#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "giant/protocol.h"
#include "giant/engine/device.h"
#include "giant/engine/trainer.h"
#include "optim/fault/fault.h"

static char gpt[512], giantrun[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  build_path("launch/giantrun", giantrun, sizeof giantrun);
  return access(gpt, X_OK) == 0 && scratch_corpus("faultpoints", dir, text, data) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static void test_example(void **state) {
  (void)state;
  char metrics[128];
  snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  /* Tiny steps: the run lasts a second or two, on busy cores too. */
  run_cmd((char *[]){gpt, "--corpus", text, "--data",        data, "--steps",   "5",     "--warmup",
                     "1", "--layers", "1",  "--channels",    "32", "--seq",     "32",    "--batch",
                     "2", "--sample", "0",  "--print-every", "1",  "--metrics", metrics, NULL},
          (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=crash:rank=0,at=1", NULL}, 120, r);
  if (GT_TEST_FAULTS) {
    if (r->exit_code != 128 + SIGKILL || !strstr(r->output, "GT_FAULT: rank 0 crashes at step 1"))
      run_fail(r, "exit %d (wanted %d: SIGKILL at step 1), its output above", r->exit_code, 128 + SIGKILL);
    /* The metrics are flushed each step: step 0 ran, step 1 did not end. */
    assert_int_equal(count_lines(metrics), 1);
  } else {
    if (r->exit_code != GT_RUN_EXIT_USAGE || !strstr(r->output, "GT_FAULT is set") ||
        !strstr(r->output, "this build has no fault points: configure with -DGIANT_FAULTS=ON"))
      run_fail(r, "exit %d (wanted %d and the refusal), its output above", r->exit_code, GT_RUN_EXIT_USAGE);
    /* Refused at the start: before the data was made, or any step. */
    assert_int_equal(access(data, F_OK), -1);
    assert_int_equal(access(metrics, F_OK), -1);
    assert_null(strstr(r->output, "step "));
  }
  free(r);
}

static int count(const char *text, const char *words) {
  int n = 0;
  for (const char *p = strstr(text, words); p; p = strstr(p + 1, words)) n++;
  return n;
}

/* giantrun --standalone (etcd; giantrun needs GIANT_ETCD) with restarts
 * allowed: the crash is a failure a restart may mend, once here; the
 * refusal is not, and nothing starts again. Seconds either way. */
static void test_giantrun(void **state) {
  (void)state;
  if (access(giantrun, X_OK) != 0 || system("command -v etcd >/dev/null 2>&1") != 0) {
    SKIP_CASE("no giantrun (GIANT_ETCD=OFF) or no etcd on PATH");
  }
  char tok[160];
  snprintf(tok, sizeof tok, "%s/giantrun.tok", dir);
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  run_cmd((char *[]){giantrun,
                     "--standalone",
                     "--nproc-per-node",
                     "1",
                     "--max-restarts",
                     "1",
                     gpt,
                     "--corpus",
                     text,
                     "--data",
                     tok,
                     "--steps",
                     "5",
                     "--warmup",
                     "1",
                     "--layers",
                     "1",
                     "--channels",
                     "32",
                     "--seq",
                     "32",
                     "--batch",
                     "2",
                     "--sample",
                     "0",
                     NULL},
          (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=crash:rank=0,at=1", NULL}, 240, r);
  if (r->exit_code <= 0) run_fail(r, "giantrun: exit %d, wanted a failed job, its output above", r->exit_code);
  if (GT_TEST_FAULTS) {
    if (count(r->output, "GT_FAULT: rank 0 crashes at step 1") != 2 || !strstr(r->output, "restart 1:"))
      run_fail(r, "wanted the worker killed at step 1, restarted once and killed again, its output above");
  } else {
    if (count(r->output, "GT_FAULT is set") != 1 || !strstr(r->output, "exited with status 2") ||
        strstr(r->output, "restart 1:"))
      run_fail(r, "wanted one refusal (status 2) and no restart, its output above");
  }
  free(r);
}

/* A program that makes its trainer itself meets the same answer. */
static void test_trainer(void **state) {
  (void)state;
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9); /* skip the measurement */
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = 8, .seed = 1}, &m));
  OK(gpt_add_layers(m, &(gpt_config){.vocab_size = 16, .T_max = 8, .C = 16, .NH = 2, .L = 1, .tie_weights = true}));
  OK(gt_model_build(m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_accum = 1,
                          .schedule = {.lr_max = 1e-3f, .lr_min = 1e-4f, .warmup = 1, .total = 10}};
  gt_trainer *t = NULL;
  setenv("GT_FAULT", "crash:rank=0,at=1", 1);
  gt_fault_env_reset(); /* read once per process: read this value */
  if (GT_TEST_FAULTS) {
    OK(gt_trainer_create(m, &tc, &t)); /* taken (test_fault plays it) */
    gt_trainer_destroy(t);
  } else {
    expect_error(gt_trainer_create(m, &tc, &t), GT_EUNSUPPORTED, "configure with -DGIANT_FAULTS=ON");
    assert_null(t);
  }
  /* Set but empty is no fault, on either build (giantrun's tests pass it). */
  setenv("GT_FAULT", "", 1);
  gt_fault_env_reset();
  OK(gt_trainer_create(m, &tc, &t));
  gt_trainer_destroy(t);
  unsetenv("GT_FAULT");
  gt_fault_env_reset();
  OK(gt_fault_check_env());
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

int main(void) {
  printf("this build %s fault points\n", GT_TEST_FAULTS ? "has" : "has no");
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_example), cmocka_unit_test(test_giantrun),
                                     cmocka_unit_test(test_trainer)};
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
