/* Models laid out by their annotations alone (no layout flag) train to the
 * single-process result: a replicated first block (embedding and h0)
 * before a split body on 4 ranks, the same inside two replicas with
 * ZeRO-1, explicit stage scopes with pipeline(2), and all of them nested (a
 * region and a split inside each stage, inside the model's replicate).
 * An offload(w) scope offloads the model by itself. Every run takes its
 * micro-batches per step from pipeline(2) (the
 * trainer's grad_accum is 0), and the region's gradients are summed once
 * per step over two micro-batches. Losses and final parameters agree with
 * one process of the same model within 1e-5, the bound of the other
 * cross-layout tests.
 *
 * Ranks are forked processes (one thread each); results come back through
 * shared memory, in the single-process layout (tests/parallel/train_result.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "examples/gpt/gpt.h"
#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/log.h"
#include "giant/engine/plan.h"
#include "localkit/ranks.h"
#include "parallel/train_result.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "parallel/plan_engine.h"

enum { V = 64, T = 16, C = 32, NH = 4, L = 2, ROWS = 4, M = 2, STEPS = 12 };

typedef struct run_cfg {
  const char *annotate; /* the GPT example's annotation list */
  bool zero1;
  train_result *out;
  int micro_batches; /* out: what the trainer took from pipeline(m) */
  int layout[3];     /* out: dp, tp, pp of the plan */
  bool offloaded;    /* out: the model was offloaded */
} run_cfg;

static int train(int rank, int world, void *arg) {
  run_cfg *cfg = arg;
  gt_log_set_rank(rank);
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = false};
  CHECK_OK(gpt_parse_annotations(cfg->annotate, &gc.ann));
  /* The annotations, from the model declared on a model never built. */
  gt_annotations ann;
  gt_model *probe;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = T, .seed = 42}, &probe));
  CHECK_OK(gpt_add_layers(probe, &gc));
  CHECK_OK(gt_model_annotations(probe, &ann));
  gt_model_destroy(probe);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist(&(gt_plan_config){.world = world,
                                    .rank = rank,
                                    .layout = world > 1 ? "auto" : NULL,
                                    .zero1 = cfg->zero1,
                                    .bucket_bytes = 8192,
                                    .annotations = &ann},
                  "gen0", &store, &plan, &dist);
  int rows = ROWS / plan.layout.dp, row0 = plan.me.dp * rows;
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = rows, .T_max = T, .seed = 42}, &m));
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(m, &mp));
  }
  CHECK_OK(gpt_add_layers(m, &gc));
  CHECK_OK(gt_plan_cut_stages(&plan, m, rows, T, NULL)); /* the stage scopes override it */
  CHECK_OK(gt_model_build(m));
  CHECK(plan.layout.pp == 1 || gt_model_stages_annotated(m));
  if (dist) CHECK_OK(gt_plan_check_model(&plan, m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 0,
                          .dist = dist,
                          .schedule = (gt_lr_schedule){1e-3f, 1e-4f, 2, STEPS}};
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
      cfg->out->losses[s] = st.loss;
      cfg->out->norms[s] = st.grad_norm;
      cfg->micro_batches = st.micro_batches;
    }
  }
  if (rank == 0) cfg->offloaded = gt_model_offloaded(m);
  if (rank == 0) {
    cfg->layout[0] = plan.layout.dp;
    cfg->layout[1] = plan.layout.tp;
    cfg->layout[2] = plan.layout.pp;
  }
  size_t n = gt_model_buffer_floats(m);
  float *p = malloc(n * sizeof *p);
  CHECK(p);
  CHECK_OK(gt_model_get_params(m, p, n));
  if (!dist) train_result_set_layout(cfg->out, m);
  if (plan.me.dp == 0) train_result_write(cfg->out, m, p, plan.me.tp);
  if (dist) CHECK_OK(gt_comm_barrier(gt_grid_world(gt_dist_grid(dist)))); /* every rank has written */
  free(p);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

static train_result *reference;

static int setup(void **state) {
  (void)state;
  reference = train_result_new(NULL);
  run_cfg *cfg = harness_shared(sizeof *cfg);
  *cfg = (run_cfg){.annotate = "pipeline=2", .out = reference};
  int codes[1];
  /* A run of this small model takes well under 1 s on busy cores, also on
   * several ranks: the 120 s and 240 s bounds here are > 100x. */
  return harness_run(1, train, cfg, 120, codes) == 0 && cfg->micro_batches == M ? 0 : -1;
}

/* Trains the model annotated so on `world` ranks and compares it with one
 * process; the plan the annotations made must be dp x tp x pp. */
static void annotated_case(const char *annotate, bool zero1, int world, int dp, int tp, int pp, bool offloaded) {
  run_cfg *cfg = harness_shared(sizeof *cfg);
  *cfg = (run_cfg){.annotate = annotate, .zero1 = zero1, .out = train_result_new(reference)};
  int codes[8];
  int bad = harness_run(world, train, cfg, 240, codes);
  if (bad) fail_msg("%s: %d rank(s) failed", annotate, bad);
  train_diff d = train_result_compare(reference, cfg->out, STEPS, C);
  print_message(
      "%-36s dp=%d,tp=%d,pp=%d%s loss %.4f -> %.4f, max relative difference: loss %.2e, parameters %.2e "
      "(%s)\n",
      annotate, cfg->layout[0], cfg->layout[1], cfg->layout[2], zero1 ? " + ZeRO-1" : "", cfg->out->losses[0],
      cfg->out->losses[STEPS - 1], d.loss, d.param, d.worst);
  assert_true(cfg->layout[0] == dp && cfg->layout[1] == tp && cfg->layout[2] == pp);
  assert_int_equal(cfg->micro_batches, M);
  assert_true(cfg->offloaded == offloaded);
  assert_true(cfg->out->losses[STEPS - 1] < cfg->out->losses[0]);
  assert_true(d.loss <= 1e-5);
  assert_true(d.param <= 1e-5);
  if (offloaded && world == 1) assert_true(d.param == 0 && d.loss == 0); /* offloading is exact */
}

/* Whale's heterogeneous case: the embedding and first block replicated over
 * the four ranks (one row each of every micro-batch), the body split four ways. */
static void test_replicated_first_block_split_body(void **state) {
  (void)state;
  annotated_case("embed,split=4,pipeline=2", false, 4, 1, 4, 1, false);
}

/* The same inside two replicas of the whole model, with ZeRO-1 sharding
 * the optimizer state over them. */
static void test_region_inside_replicas_zero1(void **state) {
  (void)state;
  annotated_case("embed,replicate=2,split=2,pipeline=2", true, 4, 2, 2, 1, false);
}

/* Two stage scopes make pp=2; pipeline(2) the micro-batches it pipelines. */
static void test_stage_scopes_pipeline(void **state) {
  (void)state;
  annotated_case("stages=2,pipeline=2", false, 2, 1, 1, 2, false);
}

/* Nested: in the model's replicate, a pipeline of two stages; in stage 0 a
 * replicated region, then a split; in stage 1 a split. */
static void test_nested_region_split_stage(void **state) {
  (void)state;
  annotated_case("embed,stages=2,split=2,pipeline=2", false, 4, 1, 2, 2, false);
}

/* offload(w): the model offloads itself (the config leaves the window
 * open), on one process (exactly the result without offloading) and in two
 * replicas; replicate(4) alone makes four. */
static void test_offload_and_replicate_scopes(void **state) {
  (void)state;
  annotated_case("offload=2,pipeline=2", false, 1, 1, 1, 1, true);
  annotated_case("replicate=2,offload=1,pipeline=2", false, 2, 2, 1, 1, true);
  annotated_case("replicate=4,pipeline=2", false, 4, 4, 1, 1, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replicated_first_block_split_body),
      cmocka_unit_test(test_region_inside_replicas_zero1),
      cmocka_unit_test(test_stage_scopes_pipeline),
      cmocka_unit_test(test_nested_region_split_stage),
      cmocka_unit_test(test_offload_and_replicate_scopes),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
