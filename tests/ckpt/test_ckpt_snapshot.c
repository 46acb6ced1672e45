/* On the CPU backend a save's snapshot copy runs on the writer thread
 * while training goes on; the model's next write waits for it. Here the
 * parameters are overwritten the moment gt_ckpt_save returns, while the
 * writer is copying 48 MB of them: the checkpoint must still hold the
 * values at the save, every float, and the time the write waited is
 * counted in the stall. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "examples/gpt/gpt.h"
#include "giant/ckpt.h"
#include "giant/engine/trainer.h"
#include "ckpt/peers_api.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"

static char dir[] = "/tmp/giant-ckpt-snapshot-XXXXXX";

static void fill(float *p, size_t n, float base) {
  for (size_t i = 0; i < n; i++) p[i] = base + (float)(i % 1013) * 1e-3f;
}

static void test_write_after_save_waits_for_the_copy(void **state) {
  (void)state;
  assert_non_null(mkdtemp(dir));
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be), GT_OK);
  gt_backend_set_peak_flops(be, 1e9);
  gt_model *m;
  assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 8, .seed = 1}, &m), GT_OK);
  gpt_config gc = {.vocab_size = 64, .T_max = 8, .C = 1024, .NH = 8, .L = 1, .tie_weights = true};
  assert_int_equal(gpt_add_layers(m, &gc), GT_OK);
  assert_int_equal(gt_model_build(m), GT_OK);
  gt_trainer *tr;
  gt_trainer_config tc = {
      .optim = gt_optim_defaults(GT_OPTIM_ADAMW), .grad_accum = 1, .schedule = {1e-3f, 1e-4f, 1, 10}};
  assert_int_equal(gt_trainer_create(m, &tc, &tr), GT_OK);
  gt_ckpt *ck;
  assert_int_equal(gt_ckpt_create(&(gt_ckpt_config){.dir = dir}, tr, NULL, &ck), GT_OK);

  size_t n = gt_model_buffer_floats(m);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *back = malloc(n * sizeof *back);
  assert_true(a && b && back);
  print_message("%zu floats (%.0f MB) of parameters\n", n, (double)n * 4 / 1e6);
  assert_true(n * sizeof(float) > (size_t)40 << 20);
  fill(a, n, 1.0f);
  fill(b, n, -7.0f);
  assert_int_equal(gt_model_set_params(m, a, n), GT_OK);
  gt_ckpt_stats before, after;
  gt_ckpt_get_stats(ck, &before);
  assert_int_equal(gt_ckpt_save(ck), GT_OK);
  assert_int_equal(gt_model_set_params(m, b, n), GT_OK); /* waits for the copy */
  assert_int_equal(gt_ckpt_wait(ck), GT_OK);
  gt_ckpt_get_stats(ck, &after);
  print_message("stall %.1f ms (the save and the write's wait for the copy)\n", (after.stall_s - before.stall_s) * 1e3);
  assert_true(after.stall_s > before.stall_s);

  assert_int_equal(gt_ckpt_load(ck, NULL, NULL), GT_OK);
  assert_int_equal(gt_model_get_params(m, back, n), GT_OK);
  /* Padding between parameters is not stored; every parameter's floats are. */
  size_t diff = 0;
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    if (p->tied_to >= 0) continue;
    for (size_t j = 0; j < p->numel; j++) diff += back[p->offset + j] != a[p->offset + j];
  }
  print_message("%zu floats differ from the values at the save\n", diff);
  assert_int_equal(diff, 0);

  gt_ckpt_destroy(ck);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  free(a);
  free(b);
  free(back);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_write_after_save_waits_for_the_copy)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
