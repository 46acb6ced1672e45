/* Activation recomputation across ranks: at tp=2 (with and without
 * sequence parallelism, and with a replicated region), at pp=2 with four
 * micro-batches in 1F1B and GPipe, and at tp=2,pp=2, training a GPT with
 * AdamW while recomputing the attention core or whole layers gives the
 * losses, gradient norms, last gradients and final parameters of the same
 * layout keeping every activation, bit for bit. The recomputed forward runs
 * the tensor-parallel collectives again, in the same order on every rank
 * of the group, and a pipeline's micro-batches in flight share the one
 * area. Ranks are forked; results come back in shared memory, each rank
 * writing what it holds into the single-process layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "localkit/ranks.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "parallel/train_result.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/trainer.h"
#include "parallel/plan_engine.h"

enum { V = 64, T = 8, C = 32, NH = 4, L = 4, ROWS = 4, M = 4, STEPS = 4 };

typedef train_result result;

typedef struct run_cfg {
  const char *layout;
  gt_pp_kind schedule;
  bool seq_parallel, region;
  gt_recompute mode;
  result *params, *grads;
} run_cfg;

static gpt_config gpt_for(bool region) {
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = !region};
  gc.ann.replicate_embed = region;
  return gc;
}

static int train(int rank, int world, void *arg) {
  run_cfg *cfg = arg;
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist(&(gt_plan_config){.world = world,
                                    .rank = rank,
                                    .layout = cfg->layout,
                                    .schedule = cfg->schedule,
                                    .seq_parallel = cfg->seq_parallel},
                  "gen0", &store, &plan, &dist);
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 42, .recompute = cfg->mode}, &m));
  gt_model_parallel mp = gt_dist_model_parallel(dist);
  CHECK_OK(gt_model_set_parallel(m, &mp));
  gpt_config gc = gpt_for(cfg->region);
  CHECK_OK(gpt_add_layers(m, &gc));
  CHECK_OK(gt_model_build(m));
  CHECK_OK(gt_plan_check_model(&plan, m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = M,
                          .dist = dist,
                          .schedule = {3e-3f, 3e-4f, 1, STEPS}};
  gt_trainer *tr;
  CHECK_OK(gt_trainer_create(m, &tc, &tr));
  int32_t in[M][ROWS * T], tg[M][ROWS * T];
  gt_batch b[M];
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < M; k++) {
      train_batch_for(s, k, V, T, ROWS, in[k], tg[k]);
      b[k] = (gt_batch){.B = ROWS, .T = T, .inputs = in[k], .targets = tg[k]};
    }
    gt_step_stats st;
    CHECK_OK(gt_trainer_step_batches(tr, b, M, &st));
    if (rank == 0) {
      cfg->params->losses[s] = st.loss;
      cfg->params->norms[s] = st.grad_norm;
    }
  }
  size_t n = gt_model_buffer_floats(m);
  float *p = malloc(n * sizeof *p);
  CHECK(p);
  CHECK_OK(gt_model_get_params(m, p, n));
  train_result_write(cfg->params, m, p, plan.me.tp);
  CHECK_OK(gt_model_get_grads(m, p, n));
  train_result_write(cfg->grads, m, p, plan.me.tp);
  free(p);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

/* The single-process parameter layouts results are written in: tied, and
 * untied (the replicated region's). */
static result *layouts[2];

static int setup(void **state) {
  (void)state;
  gt_backend *be;
  if (gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be) != GT_OK) return -1;
  for (int k = 0; k < 2; k++) {
    gt_model *m;
    gpt_config gc = gpt_for(k == 1);
    if (gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 42}, &m) != GT_OK) return -1;
    if (gpt_add_layers(m, &gc) != GT_OK || gt_model_build(m) != GT_OK) return -1;
    layouts[k] = train_result_new(NULL);
    train_result_set_layout(layouts[k], m);
    gt_model_destroy(m);
  }
  gt_backend_destroy(be);
  return 0;
}

static void run(int world, run_cfg *cfg) {
  int codes[8];
  /* A run of this small model takes well under a second on busy cores:
   * 240 s is > 100x, with room for ASan. */
  if (harness_run(world, train, cfg, 240, codes))
    fail_msg("%s recompute=%s: a rank failed", cfg->layout, gt_recompute_name(cfg->mode));
}

static void same_bits(const result *a, const result *b, const char *what, const char *layout, gt_recompute mode) {
  size_t n = a->nparams * sizeof(float);
  if (memcmp(a->losses, b->losses, sizeof a->losses) || memcmp(a->norms, b->norms, sizeof a->norms) ||
      memcmp(a->params, b->params, n))
    fail_msg("%s recompute=%s: the %s differ from keeping every activation", layout, gt_recompute_name(mode), what);
}

/* The layout keeping everything, then recomputing the attention core and
 * whole layers. */
static void compare(int world, const char *layout, gt_pp_kind kind, bool sp, bool region) {
  result *ref[2] = {NULL, NULL};
  for (int mode = GT_RECOMPUTE_NONE; mode <= GT_RECOMPUTE_BLOCK; mode++) {
    result *p = train_result_new(layouts[region]), *g = train_result_new(layouts[region]);
    run_cfg cfg = {.layout = layout,
                   .schedule = kind,
                   .seq_parallel = sp,
                   .region = region,
                   .mode = (gt_recompute)mode,
                   .params = p,
                   .grads = g};
    run(world, &cfg);
    if (!ref[0]) {
      ref[0] = p;
      ref[1] = g;
      continue;
    }
    same_bits(ref[0], p, "losses, norms or parameters", layout, cfg.mode);
    same_bits(ref[1], g, "last gradients", layout, cfg.mode);
    print_message("%-10s %-6s%s%s recompute=%-9s loss %.4f -> %.4f, bit-identical\n", layout, gt_pp_name(kind),
                  sp ? " sp" : "", region ? " region" : "", gt_recompute_name(cfg.mode), p->losses[0],
                  p->losses[STEPS - 1]);
  }
}

static void test_tp2(void **state) {
  (void)state;
  compare(2, "tp=2", GT_PP_1F1B, false, false);
}

static void test_tp2_seq_parallel(void **state) {
  (void)state;
  compare(2, "tp=2", GT_PP_1F1B, true, false);
}

/* The embedding and first block replicated over the split, each rank on
 * its rows. */
static void test_tp2_region(void **state) {
  (void)state;
  compare(2, "tp=2", GT_PP_1F1B, false, true);
}

static void test_pp2(void **state) {
  (void)state;
  compare(2, "pp=2", GT_PP_1F1B, false, false);
  compare(2, "pp=2", GT_PP_GPIPE, false, false);
}

static void test_tp2_pp2(void **state) {
  (void)state;
  compare(4, "tp=2,pp=2", GT_PP_1F1B, true, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tp2), cmocka_unit_test(test_tp2_seq_parallel), cmocka_unit_test(test_tp2_region),
      cmocka_unit_test(test_pp2), cmocka_unit_test(test_tp2_pp2),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
