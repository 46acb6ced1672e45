/* Annotations decide the plan as docs/annotations.md says: each scope
 * changes the --print-plan table's "decide" lines, field by field; flags
 * come first, then annotations, then the planner; explicit stage scopes
 * cut the pipeline where they say; and every conflict the document lists
 * is refused with its message and the layer it concerns. No processes: a
 * tensor-parallel group is faked for the shape checks at build. (Training
 * under annotations against one process: test_annotated_training.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

#include "examples/gpt/gpt.h"
#include "giant/engine/plan.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "parallel/plan_engine.h"

enum { V = 64, T = 8, C = 24, NH = 4, L = 2 };

static gt_backend *be;
static gt_group group; /* a stand-in tensor-parallel group: build needs only its size */

static gpt_config gpt_with(const char *annotate) {
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = false};
  OK(gpt_parse_annotations(annotate, &gc.ann));
  return gc;
}

/* The GPT annotated with `annotate`, declared only: its annotations. */
static gt_status annotations_of(const char *annotate, gt_annotations *out) {
  gpt_config gc = gpt_with(annotate);
  gt_model *m;
  GT_TRY(gt_model_create(be, &(gt_model_config){.B_max = 4, .T_max = T, .seed = 1}, &m));
  gt_status s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_model_annotations(m, out);
  gt_model_destroy(m);
  return s;
}

/* The plan of rank 0 for `annotate` at `layout` (NULL: auto) on `world`
 * ranks, with the model built at it and the table printed into *text. */
static gt_status plan_and_print(const char *annotate, const char *layout, int world, const gt_plan_config *extra,
                                gt_plan *plan, char **text) {
  gt_annotations ann;
  GT_TRY(annotations_of(annotate, &ann));
  gt_plan_config pc = extra ? *extra : (gt_plan_config){0};
  pc.world = world;
  pc.rank = 0;
  pc.layout = layout ? layout : "auto";
  pc.annotations = &ann;
  GT_TRY(gt_plan_resolve(&pc, plan));
  group = (gt_group){.rank = 0, .size = plan->layout.tp};
  gt_model_parallel mp = {
      .tp = plan->layout.tp > 1 ? &group : NULL, .pp_rank = 0, .pp_size = plan->layout.pp, .pp_chunks = plan->chunks};
  gpt_config gc = gpt_with(annotate);
  gt_model *m;
  GT_TRY(gt_model_create(
      be,
      &(gt_model_config){
          .B_max = 4, .T_max = T, .seed = 1, .offload_window = plan->offload_window ? plan->offload_window : -1},
      &m));
  gt_status s = gt_model_set_parallel(m, &mp);
  if (s == GT_OK) s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_plan_cut_stages(plan, m, 4, T, NULL);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) s = gt_plan_check_model(plan, m);
  if (s == GT_OK) {
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    gt_plan_print(plan, m, f);
    fclose(f);
  }
  gt_model_destroy(m);
  return s;
}

static void has(const char *text, const char *line) {
  if (!strstr(text, line)) text_fail("the plan", text, "no '%s' in the plan (printed above)", line);
}

/* Each annotation changes the decision it names, and says so. */
static void test_each_annotation_decides_its_field(void **state) {
  (void)state;
  gt_plan p;
  char *t = NULL;
  /* replicate(2) and split(2): dp and tp from the annotations. */
  OK(plan_and_print("replicate=2,split=2", NULL, 4, NULL, &p, &t));
  assert_true(p.layout.dp == 2 && p.layout.tp == 2 && p.layout.pp == 1);
  assert_true(p.from_dp == GT_FROM_ANNOTATION && p.from_tp == GT_FROM_ANNOTATION && p.from_pp == GT_FROM_PLANNER);
  has(t, "decide dp=2 from annotation (replicate(2) around the model)");
  has(t, "decide tp=2 from annotation (split(2) from 'embed')");
  has(t, "decide pp=1 from planner (auto)");
  has(t, "decide micro-batches=default from planner");
  has(t, "decide offload=off from planner");
  has(t, "12x24 (part 1/2)"); /* h0's qkv rows split in two */
  free(t);
  t = NULL;
  /* split(4) alone: tp from the annotation, dp fills the world. */
  OK(plan_and_print("split=4", NULL, 8, NULL, &p, &t));
  assert_true(p.layout.dp == 2 && p.layout.tp == 4);
  has(t, "decide dp=2 from planner");
  has(t, "decide tp=4 from annotation (split(4) from 'embed')");
  free(t);
  t = NULL;
  /* stage scopes and pipeline(m): pp, the cut and the micro-batches. */
  OK(plan_and_print("stages=2,pipeline=4", NULL, 2, NULL, &p, &t));
  assert_true(p.layout.pp == 2 && p.from_pp == GT_FROM_ANNOTATION && p.micro_batches == 4);
  has(t, "decide pp=2 from annotation (2 stage scopes from 'embed')");
  has(t, "decide micro-batches=4 from annotation (pipeline(4) from 'embed')");
  has(t, "decide stages=0-2|3-4 from annotation (stage scopes from 'embed')");
  free(t);
  t = NULL;
  /* Interleaved: four stage scopes make two ranks of two chunks each. */
  OK(plan_and_print("stages=4", NULL, 2, &(gt_plan_config){.schedule = GT_PP_INTERLEAVED, .chunks = 2}, &p, &t));
  assert_true(p.layout.pp == 2 && p.chunks == 2);
  has(t, "decide stages=0-1|2-2|3-3|4-4 from annotation");
  free(t);
  t = NULL;
  /* offload(w), on one process, where every layout factor is 1. */
  OK(plan_and_print("offload=2,stages=2,replicate=4", NULL, 1, NULL, &p, &t));
  assert_true(p.layout.dp == 1 && p.layout.pp == 1 && p.offload_window == 2);
  has(t, "decide dp=1 from planner");
  has(t, "decide offload=2 from annotation (offload(2) from 'embed')");
  has(t, "[host; device in a window slot]");
  free(t);
  t = NULL;
  /* zero(2): the ZeRO stage, over the replicas; a flag's stage wins. */
  OK(plan_and_print("zero=2,replicate=2", NULL, 2, NULL, &p, &t));
  assert_true(p.zero == 2 && p.zero1 && p.from_zero == GT_FROM_ANNOTATION);
  has(t, "decide zero=2 from annotation (zero(2) from 'embed')");
  has(t, "ZeRO-2 on");
  has(t, "gradients: the same floats of the flat buffer");
  free(t);
  t = NULL;
  OK(plan_and_print("zero=2", "dp=2", 2, &(gt_plan_config){.zero = -1}, &p, &t));
  assert_true(p.zero == 0 && !p.zero1 && p.from_zero == GT_FROM_FLAG);
  has(t, "decide zero=0 from flag");
  free(t);
  t = NULL;
  OK(plan_and_print("", "tp=2", 2, &(gt_plan_config){.zero = 2}, &p, &t));
  has(t, "decide zero=2 from flag (dp=1: nothing to shard)");
  free(t);
  t = NULL;
  expect_error(plan_and_print("zero=2,offload=2", NULL, 2, NULL, &p, &t), GT_EUNSUPPORTED,
               "ZeRO-2 with offloading (a window of 2 layers, from annotation) is not supported");
  /* A replicated region: tp from the split, the region's layers whole. */
  OK(plan_and_print("embed,split=2", NULL, 2, NULL, &p, &t));
  has(t, "decide tp=2 from annotation (split(2) from 'h1')");
  has(t, "decide replicate=embed..h0 over 2 ranks from annotation");
  has(t, "wte                    64x24                64x24"); /* the region's embedding, whole */
  has(t, "0    embed            embedding    0      rows/2");  /* on half the rows */
  has(t, "2    h1               block        0      2-way");
  free(t);
  t = NULL;
  /* A region alone gives tp too. */
  gt_annotations ann;
  OK(annotations_of("embed", &ann));
  assert_int_equal(ann.regions, 1);
  assert_string_equal(ann.region_at, "embed");
  assert_string_equal(ann.region_end, "h0");
}

/* Flags before annotations, annotations before the planner. */
static void test_precedence(void **state) {
  (void)state;
  gt_plan p;
  char *t = NULL;
  /* --plan tp=2 on a model annotated split(4): the flag wins. */
  OK(plan_and_print("split=4", "tp=2", 4, NULL, &p, &t));
  assert_true(p.layout.tp == 2 && p.layout.dp == 2 && p.from_tp == GT_FROM_FLAG);
  has(t, "decide tp=2 from flag");
  has(t, "decide dp=2 from planner");
  free(t);
  t = NULL;
  /* --accum and --offload over pipeline(m) and offload(w). */
  OK(plan_and_print("pipeline=4,offload=2", NULL, 1, &(gt_plan_config){.micro_batches = 3, .offload_window = -1}, &p,
                    &t));
  assert_true(p.micro_batches == 3 && p.offload_window == 0);
  has(t, "decide micro-batches=3 from flag");
  has(t, "decide offload=off from flag");
  free(t);
  t = NULL;
  /* The planner fills what flag and annotations leave open, and only that:
   * gt_plan_preview says what is fixed. */
  gt_annotations ann;
  OK(annotations_of("replicate=2", &ann));
  gt_plan_config pc = {.world = 8, .rank = 0, .layout = "pp=2", .annotations = &ann};
  gt_grid_layout fixed;
  OK(gt_plan_preview(&pc, &fixed));
  assert_true(fixed.dp == 2 && fixed.tp == 0 && fixed.pp == 2);
  gt_grid_layout chosen = {.dp = 2, .tp = 2, .pp = 2};
  pc.planner = &chosen;
  OK(gt_plan_resolve(&pc, &p));
  assert_true(p.from_dp == GT_FROM_ANNOTATION && p.from_tp == GT_FROM_PLANNER && p.from_pp == GT_FROM_FLAG);
  assert_int_equal(p.layout.tp, 2);
  gt_grid_layout wrong = {.dp = 4, .tp = 1, .pp = 2};
  pc.planner = &wrong;
  expect_error(gt_plan_resolve(&pc, &p), GT_EINVAL, "changes dp, which the annotation fixed at 2");
  /* Stage scopes that do not make the flag's stages leave the cut to the planner. */
  OK(plan_and_print("stages=3", "pp=2", 2, NULL, &p, &t));
  has(t, "from planner (the 3 stage scopes do not make the 2 stages)");
  free(t);
  t = NULL;
}

/* Explicit stage cuts give the stages they name, over the planner's cut:
 * here stage 0 is the embedding alone, which a cut balancing FLOPs would
 * never make. */
static void test_explicit_stages_override_the_planner(void **state) {
  (void)state;
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = T, .seed = 1}, &m));
  OK(gt_model_set_parallel(m, &(gt_model_parallel){.pp_rank = 1, .pp_size = 2, .pp_chunks = 1}));
  OK(gt_model_scope_begin(m, GT_SCOPE_PIPELINE, 6));
  OK(gt_model_scope_begin(m, GT_SCOPE_STAGE, 0));
  OK(gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){V, C, T, true}, NULL));
  OK(gt_model_scope_end(m));
  OK(gt_model_scope_begin(m, GT_SCOPE_STAGE, 1));
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "h%d", i);
    OK(gt_model_add(m, &gt_block_layer, name, &(gt_block_config){.C = C, .NH = NH, .n_layers_total = 3}, NULL));
  }
  OK(gt_model_add(m, &gt_lm_head_layer, "lm_head", &(gt_lm_head_config){C, V, NULL}, NULL));
  OK(gt_model_scope_end(m));
  OK(gt_model_scope_end(m));
  assert_int_equal(gt_model_num_stages(m), 2);
  assert_int_equal(gt_model_pipeline_micro_batches(m), 6);
  gt_plan p;
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 1, .layout = "pp=2"}, &p));
  OK(gt_plan_cut_stages(&p, m, 2, T, NULL)); /* the planner's cut, which the scopes override */
  OK(gt_model_build(m));
  assert_true(gt_model_stages_annotated(m));
  int lo, hi;
  OK(gt_model_stage_layers(m, 0, &lo, &hi));
  assert_true(lo == 0 && hi == 0);
  OK(gt_model_stage_layers(m, 1, &lo, &hi));
  assert_true(lo == 1 && hi == 4);
  assert_false(gt_model_layer(m, 0)->local);
  assert_true(gt_model_layer(m, 4)->local);
  gt_model_destroy(m);
}

/* ---- conflicts ---- */

typedef struct scope_op {
  char op; /* 'b' begin, 'e' end, 'l' a block layer, 'E' the embedding, 'H' the head */
  gt_scope_kind kind;
  int count;
} scope_op;

/* A model from a list of operations, with the model config's offload
 * window and, when `cut` is given, that two-stage cut: the first failure,
 * or the build's. */
static gt_status script_with(const scope_op *ops, int n, const gt_model_parallel *mp, int offload, const int *cut) {
  gt_model *m;
  GT_TRY(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = T, .seed = 1, .offload_window = offload}, &m));
  gt_status s = mp ? gt_model_set_parallel(m, mp) : GT_OK;
  int blocks = 0;
  for (int i = 0; i < n && s == GT_OK; i++) {
    char name[16];
    switch (ops[i].op) {
      case 'b': s = gt_model_scope_begin(m, ops[i].kind, ops[i].count); break;
      case 'e': s = gt_model_scope_end(m); break;
      case 'E': s = gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){V, C, T, true}, NULL); break;
      case 'H':
        s = gt_model_add(m, &gt_lm_head_layer, "lm_head", &(gt_lm_head_config){C, V, ops[i].count ? "embed" : NULL},
                         NULL);
        break;
      default:
        snprintf(name, sizeof name, "h%d", blocks++);
        s = gt_model_add(m, &gt_block_layer, name, &(gt_block_config){.C = C, .NH = NH, .n_layers_total = 4}, NULL);
    }
  }
  if (s == GT_OK && cut) s = gt_model_set_stage_cut(m, cut, 2);
  if (s == GT_OK) s = gt_model_build(m);
  gt_model_destroy(m);
  return s;
}

static gt_status script(const scope_op *ops, int n, const gt_model_parallel *mp) {
  return script_with(ops, n, mp, 0, NULL);
}

#define B_(k, n) \
  { 'b', GT_SCOPE_##k, n }
#define END \
  { 'e', 0, 0 }
#define EMB \
  { 'E', 0, 0 }
#define BLK \
  { 'l', 0, 0 }
#define HEAD \
  { 'H', 0, 0 }
#define RUN(ops, mp) script(ops, (int)(sizeof ops / sizeof ops[0]), mp)

static void test_every_conflict_is_refused_with_its_layer(void **state) {
  (void)state;
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = T, .seed = 1}, &m));
  expect_error(gt_model_scope_begin(m, GT_SCOPE_SPLIT, -2), GT_EINVAL, "a scope's count cannot be negative");
  expect_error(gt_model_scope_begin(m, GT_SCOPE_PIPELINE, 0), GT_EINVAL, "needs at least 1 micro-batch");
  expect_error(gt_model_scope_begin(m, GT_SCOPE_OFFLOAD, 0), GT_EINVAL, "needs a window of at least 1 layer");
  expect_error(gt_model_scope_begin(m, GT_SCOPE_ZERO, 0), GT_EINVAL, "a ZeRO scope names stage 1, 2 or 3");
  expect_error(gt_model_scope_begin(m, GT_SCOPE_ZERO, 4), GT_EINVAL, "a ZeRO scope names stage 1, 2 or 3");
  OK(gt_model_scope_begin(m, GT_SCOPE_STAGE, 0));
  OK(gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){V, C, T, true}, NULL));
  expect_error(gt_model_scope_begin(m, GT_SCOPE_STAGE, 1), GT_EINVAL,
               "begins at layer 'embed': stage scopes cannot nest");
  gt_model_destroy(m);

  const scope_op part_zero[] = {EMB, B_(ZERO, 2), BLK, END, HEAD};
  expect_error(RUN(part_zero, NULL), GT_EINVAL, "zero(2) around 'h0'..'h0' must enclose the whole model");
  const scope_op empty[] = {EMB, B_(SPLIT, 0), END, BLK, HEAD};
  expect_error(RUN(empty, NULL), GT_EINVAL, "split(0) holds no layer (it closes before layer 'h0')");
  const scope_op open[] = {B_(SPLIT, 0), EMB, BLK, HEAD};
  expect_error(RUN(open, NULL), GT_EINVAL, "still open at build");
  const scope_op two_dp[] = {B_(REPLICATE, 2), B_(REPLICATE, 2), EMB, BLK, HEAD, END, END};
  expect_error(RUN(two_dp, NULL), GT_EINVAL, "two replicate scopes around the whole model (from layer 'embed')");
  const scope_op nested[] = {B_(REPLICATE, 0), EMB, B_(REPLICATE, 0), BLK, END, END, B_(SPLIT, 0), BLK, HEAD, END};
  expect_error(RUN(nested, NULL), GT_EINVAL, "around 'h0'..'h0' lies inside another replicated region");
  const scope_op split_in[] = {B_(REPLICATE, 0), EMB, B_(SPLIT, 0), BLK, END, END, B_(SPLIT, 0), BLK, HEAD, END};
  expect_error(RUN(split_in, NULL), GT_EINVAL, "layer 'h0' is split inside the replicated region 'embed'..'h0'");
  const scope_op loss_in[] = {EMB, B_(SPLIT, 0), BLK, END, B_(REPLICATE, 0), BLK, HEAD, END};
  expect_error(RUN(loss_in, NULL), GT_EINVAL, "region 'h1'..'lm_head' holds the loss layer");
  const scope_op ways[] = {B_(REPLICATE, 2), EMB, END, B_(SPLIT, 0), BLK,  END,
                           B_(REPLICATE, 4), BLK, END, B_(SPLIT, 0), HEAD, END};
  expect_error(RUN(ways, NULL), GT_EINVAL, "replicate(4) around 'h1' conflicts with replicate(2) around 'embed'");
  const scope_op splits[] = {B_(SPLIT, 2), EMB, BLK, END, B_(SPLIT, 4), BLK, HEAD, END};
  expect_error(RUN(splits, NULL), GT_EINVAL,
               "split(4) around 'h1' conflicts with split(2) around 'embed': a model has one tensor-parallel size");
  const scope_op region_split[] = {B_(REPLICATE, 2), EMB, END, B_(SPLIT, 4), BLK, HEAD, END};
  expect_error(RUN(region_split, NULL), GT_EINVAL,
               "replicate(2) around 'embed'..'embed' spans the ranks of the split around it, but split(4) around 'h0'");
  const scope_op no_split[] = {B_(REPLICATE, 2), EMB, END, BLK, HEAD};
  expect_error(RUN(no_split, NULL), GT_EINVAL,
               "around 'embed'..'embed' shares rows among the ranks of a split, but "
               "no layer is split");
  const scope_op order[] = {B_(STAGE, 0), EMB, END, B_(STAGE, 2), BLK, HEAD, END};
  expect_error(RUN(order, NULL), GT_EINVAL,
               "stage(2) around 'h0' should be stage(1): stages are numbered 0, 1, 2, ...");
  const scope_op cover[] = {B_(STAGE, 0), EMB, BLK, END, HEAD};
  expect_error(RUN(cover, NULL), GT_EINVAL, "layer 'lm_head' is outside every stage scope");
  const scope_op pipe[] = {B_(STAGE, 0), EMB, END, B_(PIPELINE, 2), B_(STAGE, 1), BLK, HEAD, END, END};
  expect_error(RUN(pipe, NULL), GT_EINVAL, "stage(0) around 'embed' lies outside the pipeline scope");
  const scope_op pipes[] = {B_(PIPELINE, 2), EMB, END, B_(PIPELINE, 2), BLK, HEAD, END};
  expect_error(RUN(pipes, NULL), GT_EINVAL, "a second pipeline scope around 'h0': a model has at most one");
  const scope_op offl[] = {EMB, B_(OFFLOAD, 1), BLK, END, HEAD};
  expect_error(RUN(offl, NULL), GT_EINVAL, "offload(1) around 'h0'..'h0' must enclose the whole model");

  /* Conflicts with the world and the plan. */
  gt_annotations ann;
  gt_plan p;
  OK(annotations_of("stages=3", &ann));
  expect_error(
      gt_plan_resolve(
          &(gt_plan_config){.world = 4, .rank = 0, .annotations = &ann, .schedule = GT_PP_INTERLEAVED, .chunks = 2},
          &p),
      GT_EINVAL, "the 3 stage scopes (from layer 'embed') do not make 2 chunks per pipeline rank");
  OK(annotations_of("replicate=2,split=4", &ann));
  expect_error(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .annotations = &ann}, &p), GT_EINVAL,
               "the layout dp=2 (annotation), tp=4 (annotation), pp=1 (planner) makes 8 ranks, but the world has 4");
  OK(annotations_of("embed,replicate=4", &ann)); /* dp takes every rank: the region has one, and runs whole */
  OK(gt_plan_resolve(&(gt_plan_config){.world = 4, .rank = 0, .annotations = &ann}, &p));
  assert_true(p.layout.dp == 4 && p.layout.tp == 1);
  OK(annotations_of("embed,split=2", &ann));
  ann.tp = 0; /* as if no split gave a count: the region's own then sets tp */
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .annotations = &ann}, &p));
  assert_int_equal(p.layout.tp, 1); /* the region follows the split, which gave no count */
  ann.region_ways = 2;
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .annotations = &ann}, &p));
  assert_int_equal(p.layout.tp, 2);
  /* --plan dp=2,tp=1 is a flag: the region then has one rank, and runs whole. */
  OK(gt_plan_resolve(&(gt_plan_config){.world = 2, .rank = 0, .layout = "dp=2,tp=1", .annotations = &ann}, &p));
  assert_int_equal(p.layout.tp, 1);
  /* A gpt that ties a replicated embedding to its split head. */
  gt_model *gm;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = T, .seed = 1}, &gm));
  gpt_config tied = gpt_with("embed");
  tied.tie_weights = true;
  expect_error(gpt_add_layers(gm, &tied), GT_EINVAL, "untie them");
  gt_model_destroy(gm);

  /* Conflicts found at build, once the layout is known. */
  group = (gt_group){.rank = 0, .size = 3};
  gt_model_parallel tp3 = {.tp = &group};
  const scope_op heads[] = {EMB, B_(SPLIT, 3), BLK, END, HEAD};
  expect_error(RUN(heads, &tp3), GT_EINVAL,
               "layer 'h0' (block): tensor parallelism tp=3 does not divide the head count");
  group = (gt_group){.rank = 0, .size = 2};
  gt_model_parallel tp2pp2 = {.tp = &group, .pp_size = 2, .pp_chunks = 1};
  const scope_op cross[] = {B_(STAGE, 0), B_(REPLICATE, 0), EMB,  END, END, B_(STAGE, 1), B_(REPLICATE, 0), BLK,
                            END,          B_(SPLIT, 0),     HEAD, END, END};
  OK(RUN(cross, &tp2pp2)); /* each region inside a stage */
  const scope_op crossing[] = {B_(REPLICATE, 0), EMB, BLK, END, B_(SPLIT, 0), BLK, BLK, HEAD, END};
  /* a cut between embed and h0, inside the region */
  expect_error(script_with(crossing, (int)(sizeof crossing / sizeof crossing[0]), &tp2pp2, 0, (int[]){0, 1, 5}),
               GT_EINVAL, "the replicated region 'embed'..'h0' crosses the cut between pipeline stages 0 and 1");
  const scope_op tie[] = {B_(REPLICATE, 0), EMB, END, B_(SPLIT, 0), BLK, {'H', 0, 1}, END};
  gt_model_parallel one = {0};
  expect_error(RUN(tie, &one), GT_EINVAL,
               "layer 'lm_head' ties 'lm_head.w' to layer 'embed' across the edge of a "
               "replicated region");
  gt_model_parallel tp2 = {.tp = &group};
  const scope_op offloaded[] = {B_(REPLICATE, 0), EMB, END, B_(SPLIT, 0), HEAD, END};
  expect_error(script_with(offloaded, 6, &tp2, 1, NULL), GT_EUNSUPPORTED,
               "the replicated region 'embed'..'embed' cannot run offloaded yet");
}

/* The GPT example's annotation list: every key, and bad input refused. */
static void test_gpt_annotation_list(void **state) {
  (void)state;
  gpt_annotations a;
  OK(gpt_parse_annotations("replicate=2,split=4,stages=3,pipeline=8,offload=2,zero=2,embed", &a));
  assert_true(a.replicate == 2 && a.split == 4 && a.stages == 3 && a.pipeline == 8 && a.offload == 2 && a.zero == 2 &&
              a.replicate_embed);
  OK(gpt_parse_annotations("", &a));
  assert_true(!a.replicate && !a.split && !a.replicate_embed);
  expect_error(gpt_parse_annotations("split=two", &a), GT_EINVAL, "'split=two' needs a count");
  expect_error(gpt_parse_annotations("split=-1", &a), GT_EINVAL, "needs a count");
  expect_error(gpt_parse_annotations("shard=2", &a), GT_EINVAL, "unknown 'shard=2'");
  expect_error(gpt_parse_annotations("embed=1", &a), GT_EINVAL, "unknown 'embed=1'");
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
      cmocka_unit_test(test_each_annotation_decides_its_field),
      cmocka_unit_test(test_precedence),
      cmocka_unit_test(test_explicit_stages_override_the_planner),
      cmocka_unit_test(test_every_conflict_is_refused_with_its_layer),
      cmocka_unit_test(test_gpt_annotation_list),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
