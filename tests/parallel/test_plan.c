/* Plans: layouts parsed and checked against the world and the model, with
 * messages that name the constraint; the printed table. No processes are
 * needed: a tensor-parallel group is faked for the shape checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "parallel/plan_engine.h"

static gt_backend *be;

static void test_layouts_parse_and_factor_the_world(void **state) {
  (void)state;
  gt_grid_layout l;
  bool autom;
  OK(gt_plan_parse("dp=2,tp=2,pp=1", 4, &l, &autom));
  assert_true(l.dp == 2 && l.tp == 2 && l.pp == 1 && !autom);
  OK(gt_plan_parse("tp=2", 8, &l, &autom)); /* dp fills the world */
  assert_true(l.dp == 4 && l.tp == 2 && l.pp == 1);
  OK(gt_plan_parse("auto", 6, &l, &autom));
  assert_true(l.dp == 6 && autom);
  expect_error(gt_plan_parse("dp=2,xp=2", 4, &l, &autom), GT_EINVAL, "unknown factor 'xp'");
  expect_error(gt_plan_parse("dp=two", 4, &l, &autom), GT_EINVAL, "positive integer");
  expect_error(gt_plan_parse("dp=0", 4, &l, &autom), GT_EINVAL, "positive integer");
  expect_error(gt_plan_parse("tp=3", 4, &l, &autom), GT_EINVAL, "does not divide the world size 4");
  /* Factors whose product passes 2^31 are refused, not wrapped. */
  expect_error(gt_plan_parse("tp=65536,pp=65536", 4, &l, &autom), GT_EINVAL, "tp*pp = 4294967296");
  gt_plan p;
  expect_error(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .layout = "dp=2,tp=4"}, &p), GT_EINVAL,
               "dp=2,tp=4");
  expect_error(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .layout = "tp=65536,pp=65536"}, &p), GT_EINVAL,
               "tp*pp = 4294967296");
  expect_error(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .layout = "dp=1048576,tp=1048576,pp=2"}, &p),
               GT_EINVAL, "makes 2199023255552 ranks");
  expect_error(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .layout = "dp=4", .seq_parallel = true}, &p),
               GT_EINVAL, "sequence parallelism needs tensor parallelism");
  OK(gt_plan_resolve(&(gt_plan_config){.world = 8, .rank = 5, .layout = "dp=2,tp=2,pp=2"}, &p));
  /* Megatron order: tp fastest, then dp, then pp. */
  assert_true(p.me.tp == 1 && p.me.dp == 0 && p.me.pp == 1);
}

/* A stand-in group: shape checks at build time need only its size. */
static gt_group fake_group(int rank, int size) {
  gt_group g = {.rank = rank, .size = size};
  return g;
}

static gt_group group; /* outlives the models that point at it */

static gt_status build_gpt(int tp_rank, int tp, int NH, int V, gt_model **out) {
  gt_group *g = &group;
  *g = fake_group(tp_rank, tp);
  gt_model_config mc = {.B_max = 2, .T_max = 8, .seed = 1};
  GT_TRY(gt_model_create(be, &mc, out));
  gt_model_parallel mp = {.tp = tp > 1 ? g : NULL};
  GT_TRY(gt_model_set_parallel(*out, &mp));
  gpt_config gc = {.vocab_size = V, .T_max = 8, .C = 24, .NH = NH, .L = 1, .tie_weights = true};
  gt_status s = gpt_add_layers(*out, &gc);
  if (s == GT_OK) s = gt_model_build(*out);
  return s;
}

static void test_model_constraints_are_named(void **state) {
  (void)state;
  gt_model *m = NULL;
  expect_error(build_gpt(0, 4, 6, 64, &m), GT_EINVAL, "tp=4 does not divide the head count NH=6");
  gt_model_destroy(m);
  m = NULL;
  expect_error(build_gpt(0, 4, 4, 66, &m), GT_EINVAL, "tp=4 does not divide the vocabulary size 66");
  gt_model_destroy(m);
  m = NULL;
  /* Rank 1 of 2 holds the second half of every split parameter. */
  OK(build_gpt(1, 2, 4, 64, &m));
  int wte = -1, qkv = -1;
  for (int i = 0; i < gt_model_num_params(m); i++) {
    if (!strcmp(gt_model_param(m, i)->name, "embed.wte")) wte = i;
    if (!strcmp(gt_model_param(m, i)->name, "h0.qkv.w")) qkv = i;
  }
  const gt_param *w = gt_model_param(m, wte), *q = gt_model_param(m, qkv);
  assert_int_equal(w->shape[0], 32);
  assert_int_equal(w->global_shape[0], 64);
  assert_int_equal(gt_param_global_index(w, 0), 32 * 24);
  assert_int_equal(q->shape[1], 12);                                      /* (3, C/2, C): its heads' q, k and v rows */
  assert_int_equal(gt_param_global_index(q, 12 * 24), 24 * 24 + 12 * 24); /* k block, second half */
  /* A plan with tp=2 over a model with no split layer is rejected. */
  gt_model *plain;
  gt_model_config mc = {.B_max = 1, .T_max = 4, .seed = 1};
  OK(gt_model_create(be, &mc, &plain));
  OK(gt_model_add(plain, &gt_embedding_layer, "e", &(gt_embedding_config){8, 4, 4, false}, NULL));
  OK(gt_model_add(plain, &gt_lm_head_layer, "h", &(gt_lm_head_config){4, 8, "e"}, NULL));
  OK(gt_model_build(plain));
  gt_plan p;
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .layout = "tp=2"}, &p));
  expect_error(gt_plan_check_model(&p, plain), GT_EINVAL, "no layer of the model is split");
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .layout = "pp=2"}, &p));
  expect_error(gt_plan_check_model(&p, plain), GT_EINVAL, "built for 1 stages");
  /* The table names the layout, the split and the shards. */
  OK(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 3, .layout = "dp=2,tp=2", .zero1 = true}, &p));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gt_plan_print(&p, m, f);
  fclose(f);
  assert_non_null(strstr(buf, "dp 2 x tp 2 x pp 1"));
  assert_non_null(strstr(buf, "rank 3 is dp 1, tp 1"));
  assert_non_null(strstr(buf, "2-way"));
  assert_non_null(strstr(buf, "32x24 (part 2/2)"));
  assert_non_null(strstr(buf, "shard 2 of 2"));
  free(buf);
  gt_model_destroy(plain);
  gt_model_destroy(m);
  /* Annotation scopes must be balanced. */
  OK(gt_model_create(be, &mc, &plain));
  OK(gt_model_scope_begin(plain, GT_SCOPE_SPLIT, 0));
  OK(gt_model_add(plain, &gt_embedding_layer, "e", &(gt_embedding_config){8, 4, 4, false}, NULL));
  OK(gt_model_add(plain, &gt_lm_head_layer, "h", &(gt_lm_head_config){4, 8, "e"}, NULL));
  expect_error(gt_model_build(plain), GT_EINVAL, "still open");
  OK(gt_model_scope_end(plain));
  expect_error(gt_model_scope_end(plain), GT_ESTATE, "without a matching begin");
  expect_error(gt_model_scope_begin(plain, GT_SCOPE_PIPELINE, 0), GT_EINVAL, "at least 1 micro-batch");
  gt_model_destroy(plain);
}

/* The planner cuts the layers into stages by FLOPs and speed: equal speeds
 * balance the blocks, a rank at half speed gets fewer layers. */
static void test_planner_cuts_pipeline_stages(void **state) {
  (void)state;
  int counts[2][2];
  const double speeds[2][2] = {{1.0, 1.0}, {1.0, 0.5}};
  for (int k = 0; k < 2; k++) {
    gt_model *m;
    OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = 16, .seed = 1}, &m));
    OK(gt_model_set_parallel(m, &(gt_model_parallel){.pp_rank = 0, .pp_size = 2, .pp_chunks = 1}));
    gpt_config gc = {.vocab_size = 64, .T_max = 16, .C = 64, .NH = 4, .L = 8, .tie_weights = true};
    OK(gpt_add_layers(m, &gc));
    gt_plan p;
    OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .layout = "pp=2"}, &p));
    OK(gt_plan_cut_stages(&p, m, 2, 16, speeds[k]));
    OK(gt_model_build(m));
    counts[k][0] = counts[k][1] = 0;
    for (int i = 0; i < gt_model_num_layers(m); i++) counts[k][gt_model_layer(m, i)->stage]++;
    print_message("speeds %.1f/%.1f: %d + %d layers\n", speeds[k][0], speeds[k][1], counts[k][0], counts[k][1]);
    assert_int_equal(counts[k][0] + counts[k][1], 11);
    gt_model_destroy(m);
  }
  assert_true(abs(counts[0][0] - counts[0][1]) <= 1); /* 8 blocks and 3 light layers, balanced */
  assert_true(counts[1][1] < counts[1][0] - 2);       /* the half-speed rank holds about a third */
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 4, .seed = 1}, &m));
  OK(gt_model_add(m, &gt_embedding_layer, "e", &(gt_embedding_config){8, 4, 4, false}, NULL));
  OK(gt_model_add(m, &gt_lm_head_layer, "h", &(gt_lm_head_config){4, 8, "e"}, NULL));
  expect_error(gt_model_set_stage_cut(m, (int[]){0, 2, 2}, 2), GT_EINVAL, "holds no layer");
  expect_error(gt_model_set_stage_cut(m, (int[]){0, 1}, 1), GT_EINVAL, "from layer 0 to the last");
  gt_model_destroy(m);
}

static int setup(void **state) {
  (void)state;
  return gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be) == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts_parse_and_factor_the_world),
      cmocka_unit_test(test_model_constraints_are_named),
      cmocka_unit_test(test_planner_cuts_pipeline_stages),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
