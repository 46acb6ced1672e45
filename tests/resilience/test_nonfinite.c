/* A step with a non-finite loss or gradient (gt_trainer_config.skip_nonfinite):
 *   - a NaN put once into the gradients (GT_FAULT nangrad, a transient
 *     fault) is cleared by running the step again on the same samples: the
 *     parameters after the run equal, bit for bit, a run without the fault;
 *   - a NaN every time the step runs (GT_FAULT nan on the loss at that step)
 *     skips the step's samples: the parameters equal a run that never saw
 *     them (its loader moved past them), and the skipped step reports its
 *     rows;
 *   - more such steps in a row than allowed, or skip_nonfinite 0, fail with
 *     the divergence message and change nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "giant/backend.h"
#include "giant/data.h"
#include "optim/fault/fault.h"
#include "examples/gpt/gpt.h"
#include "giant/model.h"
#include "giant/engine/trainer.h"
#include "core/data/loader_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"

enum { B = 2, T = 8, STEPS = 6, VOCAB = 16 };

static char tokpath[64];

typedef struct run {
  gt_backend *be;
  gt_model *m;
  gt_trainer *t;
  gt_loader *l;
} run;

static void run_open(run *r, int skip_nonfinite, const char *fault) {
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &r->be));
  gt_backend_set_peak_flops(r->be, 1e9);
  OK(gt_model_create(r->be, &(gt_model_config){.B_max = B, .T_max = T, .seed = 1}, &r->m));
  OK(gpt_add_layers(r->m,
                    &(gpt_config){.vocab_size = VOCAB, .T_max = T, .C = 16, .NH = 2, .L = 1, .tie_weights = true}));
  OK(gt_model_build(r->m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_accum = 2,
                          .grad_clip = 1.0f,
                          .skip_nonfinite = skip_nonfinite,
                          .schedule = {.lr_max = 1e-2f, .lr_min = 1e-3f, .warmup = 1, .total = STEPS}};
  if (fault) setenv("GT_FAULT", fault, 1);
  gt_fault_env_reset(); /* read once per process: read this run's */
  OK(gt_trainer_create(r->m, &tc, &r->t));
  unsetenv("GT_FAULT");
  gt_status s = gt_loader_open(&(gt_loader_config){.path = tokpath, .B = B, .T_max = T, .nshards = 1}, 0, &r->l);
  if (s != GT_OK) fail_msg("%s", gt_last_error());
}

static void run_close(run *r) {
  gt_loader_close(r->l);
  gt_trainer_destroy(r->t);
  gt_model_destroy(r->m);
  gt_backend_destroy(r->be);
}

static float *params(run *r) {
  size_t n = (size_t)gt_model_buffer_floats(r->m);
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  OK(gt_model_get_params(r->m, p, n));
  return p;
}

static int setup(void **state) {
  (void)state;
  strcpy(tokpath, "/tmp/giant-nonfinite-XXXXXX");
  int fd = mkstemp(tokpath);
  if (fd < 0) return -1;
  close(fd);
  uint32_t tok[4096];
  for (int i = 0; i < 4096; i++) tok[i] = (uint32_t)((i * 7 + i / 13) % VOCAB);
  return gt_tokfile_write(tokpath, tok, 4096, VOCAB, 0) == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  unlink(tokpath);
  return 0;
}

/* A run of STEPS steps; into *ref the parameters after it. */
static void plain_run(float **ref, uint64_t skip_rows_at_step, int skip_step) {
  run r;
  run_open(&r, 0, NULL);
  gt_step_stats st;
  for (int i = 0; i < STEPS; i++) {
    if (i == skip_step) { /* a run that never saw that step's samples */
      OK(gt_loader_restart_at(r.l, gt_loader_next_row(r.l) + skip_rows_at_step));
      gt_trainer_set_step_index(r.t, i + 1);
      continue;
    }
    OK(gt_trainer_step(r.t, r.l, &st));
  }
  *ref = params(&r);
  run_close(&r);
}

static void test_transient_nan_runs_again(void **state) {
  (void)state;
  float *ref;
  plain_run(&ref, 0, -1);
  run r;
  run_open(&r, 1, "nangrad:rank=0,at=2");
  gt_step_stats st;
  for (int i = 0; i < STEPS; i++) {
    OK(gt_trainer_step(r.t, r.l, &st));
    assert_false(st.skipped);
    assert_true(isfinite(st.loss));
    assert_int_equal(st.first_row, (uint64_t)i * 2 * B);
    assert_int_equal(st.rows, 2 * B);
  }
  float *p = params(&r);
  assert_memory_equal(p, ref, (size_t)gt_model_buffer_floats(r.m) * sizeof *p);
  free(p);
  free(ref);
  run_close(&r);
}

static void test_persistent_nan_skips_samples(void **state) {
  (void)state;
  float *ref;
  plain_run(&ref, 2 * B, 3);
  run r;
  run_open(&r, 2, "nan:rank=0,at=3");
  gt_step_stats st;
  for (int i = 0; i < STEPS; i++) {
    OK(gt_trainer_step(r.t, r.l, &st));
    assert_int_equal(st.step, i);
    assert_int_equal(st.skipped, i == 3);
    assert_int_equal(st.first_row, (uint64_t)i * 2 * B);
    assert_int_equal(st.rows, 2 * B);
  }
  assert_int_equal(gt_trainer_step_index(r.t), STEPS);
  float *p = params(&r);
  assert_memory_equal(p, ref, (size_t)gt_model_buffer_floats(r.m) * sizeof *p);
  free(p);
  free(ref);
  run_close(&r);
}

static void test_too_many_in_a_row_fail(void **state) {
  (void)state;
  /* Two bad steps in a row, one allowed: the second fails. */
  run r;
  run_open(&r, 1, "nan:rank=0,at=1;nan:rank=0,at=2");
  gt_step_stats st;
  OK(gt_trainer_step(r.t, r.l, &st));
  OK(gt_trainer_step(r.t, r.l, &st));
  assert_true(st.skipped);
  float *before = params(&r);
  gt_status s = gt_trainer_step(r.t, r.l, &st);
  assert_int_equal(s, GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "2 steps in a row"));
  assert_non_null(strstr(gt_last_error(), "diverged"));
  float *after = params(&r);
  assert_memory_equal(before, after, (size_t)gt_model_buffer_floats(r.m) * sizeof *before);
  free(before);
  free(after);
  run_close(&r);
  /* skip_nonfinite 0: the first fails. */
  run_open(&r, 0, "nangrad:rank=0,at=0");
  s = gt_trainer_step(r.t, r.l, &st);
  assert_int_equal(s, GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "training diverged"));
  run_close(&r);
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transient_nan_runs_again),
      cmocka_unit_test(test_persistent_nan_skips_samples),
      cmocka_unit_test(test_too_many_in_a_row_fail),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
