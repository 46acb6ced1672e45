/* The model's attention kind (gt_model_config.attention): tiled and full
 * attention train the example GPT to the same losses, the block saves and
 * scratches by the kind chosen, bf16 products reach attention only when it
 * is full, and an unknown kind is refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

static gt_backend *be;

static int setup(void **state) {
  (void)state;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  if (gt_backend_create(&c, &be) != GT_OK) return -1;
  gt_backend_set_peak_flops(be, 1e9); /* skip the measurement */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

static gt_model *gpt(gt_attention_kind kind, int B, int T, int C, int NH, int L) {
  gt_model *m = NULL;
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 77, .attention = kind};
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = 53, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  return m;
}

static void test_tiled_and_full_train_to_the_same_losses(void **state) {
  (void)state;
  enum { B = 2, T = 40, STEPS = 5 };
  int32_t tok[B * T + STEPS];
  uint64_t seed = 9;
  for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((seed >> 33) % 53);
  }
  float losses[2][STEPS];
  for (int k = 0; k < 2; k++) {
    gt_model *m = gpt(k == 0 ? GT_ATTENTION_TILED : GT_ATTENTION_FULL, B, T, 32, 4, 2);
    OK(gt_model_build(m));
    gt_trainer *t = NULL;
    gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                            .grad_clip = 1.0f,
                            .schedule = {.lr_max = 3e-3f, .lr_min = 3e-3f, .warmup = 0, .total = 100}};
    OK(gt_trainer_create(m, &tc, &t));
    for (int s = 0; s < STEPS; s++) {
      gt_batch b = {.B = B, .T = T, .inputs = tok + s, .targets = tok + s + 1};
      gt_step_stats st;
      OK(gt_trainer_step_batches(t, &b, 1, &st));
      losses[k][s] = st.loss;
    }
    gt_trainer_destroy(t);
    gt_model_destroy(m);
  }
  for (int s = 0; s < STEPS; s++)
    if (!(fabsf(losses[0][s] - losses[1][s]) <= 1e-5f * fabsf(losses[1][s])))
      fail_msg("step %d: tiled loss %.9g, full %.9g", s, (double)losses[0][s], (double)losses[1][s]);
  assert_true(losses[0][STEPS - 1] < losses[0][0]);
}

/* The block's saved activations and scratch at T = 2048: tiled keeps a
 * float per row and head where full keeps T of them, and needs no T x T
 * scratch. The width is small (C = 32) so that the rest of the block, 15C
 * floats a token, stays below the tenth; at GPT-2's C = 768, NH = 12 tiled
 * keeps about a third of full's bytes. */
static void test_tiled_saves_a_tenth_of_full_at_2048(void **state) {
  (void)state;
  enum { B = 1, T = 2048 };
  size_t acts[2], scratch[2];
  for (int k = 0; k < 2; k++) {
    gt_model *m = gpt(k == 0 ? GT_ATTENTION_TILED : GT_ATTENTION_FULL, B, T, 32, 4, 1);
    const gt_layer *block = gt_model_layer(m, 1);
    assert_ptr_equal(block->type, &gt_block_layer);
    acts[k] = block->type->acts_floats(block, B, T);
    scratch[k] = block->type->scratch_floats(block, B, T);
    gt_model_destroy(m);
  }
  print_message("block at T=%d: acts %zu floats tiled, %zu full; scratch %zu tiled, %zu full\n", T, acts[0], acts[1],
                scratch[0], scratch[1]);
  assert_true(acts[0] * 10 < acts[1]);
  assert_true(scratch[0] * 10 < scratch[1]);
  /* Exactly the attention slot differs: (B, NH, T) against (B, NH, T, T). */
  assert_int_equal(acts[1] - acts[0], (size_t)B * 4 * T * (T - 1));
}

static float first_loss(gt_attention_kind kind, gt_precision p) {
  enum { B = 2, T = 24 };
  int32_t tok[B * T + 1];
  for (int i = 0; i < B * T + 1; i++) tok[i] = (int32_t)((i * 7 + 3) % 53);
  gt_model *m = gpt(kind, B, T, 32, 4, 2);
  OK(gt_model_build(m));
  OK(gt_model_set_precision(m, p));
  gt_acts *a = NULL;
  OK(gt_acts_create(m, &a));
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = tok + 1};
  float loss = 0;
  OK(gt_model_forward(m, a, &b, &loss));
  gt_acts_destroy(a);
  gt_model_destroy(m);
  return loss;
}

/* Under bf16, full attention takes its products in bf16 (the composed
 * path) and tiled attention stays fp32: both near the fp32 loss, but not
 * equal to each other. */
static void test_bf16_takes_bf16_products_only_with_full_attention(void **state) {
  (void)state;
  float l32 = first_loss(GT_ATTENTION_TILED, GT_PRECISION_FP32);
  float tiled = first_loss(GT_ATTENTION_TILED, GT_PRECISION_BF16);
  float full = first_loss(GT_ATTENTION_FULL, GT_PRECISION_BF16);
  print_message("loss fp32 %.7f, bf16 tiled %.7f, bf16 full %.7f\n", (double)l32, (double)tiled, (double)full);
  assert_true(fabsf(tiled - l32) < 2e-3f * l32);
  assert_true(fabsf(full - l32) < 2e-3f * l32);
  assert_true(fabsf(full - tiled) > 1e-7f * l32);
}

static void test_unknown_attention_kind_is_refused(void **state) {
  (void)state;
  gt_model *m = NULL;
  gt_model_config mc = {.B_max = 1, .T_max = 4, .attention = (gt_attention_kind)7};
  assert_int_equal(gt_model_create(be, &mc, &m), GT_EINVAL);
  assert_null(m);
  assert_non_null(strstr(gt_last_error(), "attention"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiled_and_full_train_to_the_same_losses),
      cmocka_unit_test(test_tiled_saves_a_tenth_of_full_at_2048),
      cmocka_unit_test(test_bf16_takes_bf16_products_only_with_full_attention),
      cmocka_unit_test(test_unknown_attention_kind_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
