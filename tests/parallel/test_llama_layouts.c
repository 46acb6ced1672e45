/* The Llama model (examples/llama) at other layouts against one process:
 * tp=2 (query and key/value heads split, two query heads per key/value
 * head), pp=2 with 1F1B, tp=2,pp=2, and dp=2 with ZeRO-1, 20 training
 * steps each must give the single-process losses and final parameters
 * within 1e-5, the GPT's cross-layout tolerance (test_pipeline). SGD with
 * momentum, as there: AdamW magnifies the reordered sums of near-zero
 * gradients. Ranks are forked; results come back in shared memory, each
 * rank writing the parameters it holds into the single-process layout. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "localkit/ranks.h"
#include "examples/llama/llama.h"
#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "parallel/train_result.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "parallel/plan_engine.h"

enum { V = 64, T = 8, C = 32, NH = 4, NKV = 2, L = 3, ROWS = 2, M = 4, STEPS = 20 };

typedef train_result result;

typedef struct run_cfg {
  const char *layout; /* NULL: one process */
  bool zero1;
  result *out;
} run_cfg;

static int train(int rank, int world, void *arg) {
  run_cfg *cfg = arg;
  result *out = cfg->out;
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist(
      &(gt_plan_config){
          .world = world, .rank = rank, .layout = cfg->layout, .schedule = GT_PP_1F1B, .zero1 = cfg->zero1},
      "gen0", &store, &plan, &dist);
  int rows = ROWS / plan.layout.dp, row0 = plan.me.dp * rows;
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = rows, .T_max = T, .seed = 42}, &m));
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(m, &mp));
  }
  llama_config lc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .n_kv_heads = NKV, .L = L, .mlp_hidden = 48};
  CHECK_OK(llama_add_layers(m, &lc));
  CHECK_OK(gt_model_build(m));
  if (dist) CHECK_OK(gt_plan_check_model(&plan, m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_SGD),
                          .grad_clip = 1.0f,
                          .grad_accum = M,
                          .dist = dist,
                          .schedule = (gt_lr_schedule){0.03f, 0.003f, 2, STEPS}};
  gt_trainer *tr;
  CHECK_OK(gt_trainer_create(m, &tc, &tr));
  int32_t in[M][ROWS * T], tg[M][ROWS * T];
  gt_batch b[M];
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < M; k++) {
      train_batch_for(s, k, V, T, ROWS, in[k], tg[k]);
      b[k] = (gt_batch){.B = rows, .T = T, .inputs = in[k] + row0 * T, .targets = tg[k] + row0 * T};
    }
    gt_step_stats st;
    CHECK_OK(gt_trainer_step_batches(tr, b, M, &st));
    if (rank == 0) {
      out->losses[s] = st.loss;
      out->norms[s] = st.grad_norm;
    }
  }
  size_t n = gt_model_buffer_floats(m);
  float *p = malloc(n * sizeof *p);
  CHECK_OK(gt_model_get_params(m, p, n));
  if (!cfg->layout) train_result_set_layout(out, m);
  if (plan.me.dp == 0) train_result_write(out, m, p, plan.me.tp);
  free(p);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

static result *reference;

static int setup(void **state) {
  (void)state;
  reference = train_result_new(NULL);
  run_cfg cfg = {.layout = NULL, .out = reference};
  int codes[1];
  /* A run of this small model takes well under 1 s on busy cores, also on
   * several ranks: the 120 s and 240 s bounds here are > 100x. */
  return harness_run(1, train, &cfg, 120, codes) == 0 ? 0 : -1;
}

static void run_case(int world, const char *layout, bool zero1) {
  result *r = train_result_new(reference);
  run_cfg cfg = {.layout = layout, .zero1 = zero1, .out = r};
  int codes[4];
  int bad = harness_run(world, train, &cfg, 240, codes);
  if (bad) fail_msg("%s: %d rank(s) failed", layout, bad);
  train_diff d = train_result_compare(reference, r, STEPS, C);
  print_message("%-12s%s loss %.4f -> %.4f, max relative difference: loss %.2e, parameters %.2e (%s)\n", layout,
                zero1 ? " + ZeRO-1" : "", r->losses[0], r->losses[STEPS - 1], d.loss, d.param, d.worst);
  assert_true(r->losses[STEPS - 1] < r->losses[0]); /* it learns */
  assert_true(d.loss <= 1e-5);
  assert_true(d.param <= 1e-5);
}

static void test_tp2(void **state) {
  (void)state;
  run_case(2, "tp=2", false);
}
static void test_pp2(void **state) {
  (void)state;
  run_case(2, "pp=2", false);
}
static void test_tp2_pp2(void **state) {
  (void)state;
  run_case(4, "tp=2,pp=2", false);
}
static void test_dp2_zero1(void **state) {
  (void)state;
  run_case(2, "dp=2", true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tp2),
      cmocka_unit_test(test_pp2),
      cmocka_unit_test(test_tp2_pp2),
      cmocka_unit_test(test_dp2_zero1),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
