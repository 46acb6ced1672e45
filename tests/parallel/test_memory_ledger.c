/* The memory ledger against the expected peak: a small GPT trains two steps
 * and the peak the ledger measured, category by category, must equal what
 * gt_model_device_estimate_ex predicted (both in the arena's size classes),
 * on one process and at dp=2 with ZeRO-1 (each rank's optimizer state one
 * half of the buffer's) and with ZeRO-3 (the parameters and gradients
 * sharded too, with their slots), in fp32 and bf16. The one thing the estimate
 * leaves out, the bf16 operand scratch that grows to the largest product,
 * is added from the model's own record of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/arena.h"
#include "core/model/model_internal.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/dist.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"
#include "localkit/ranks.h"
#include "parallel/train_result.h"

enum { V = 64, T = 16, C = 32, NH = 4, L = 2, ROWS = 2, STEPS = 2 };

/* Why a category differs, for the message; 0 when all agree. */
static int compare(const gt_model *m, const gt_memory_ledger *l, const gt_device_estimate *e, char *why, size_t n) {
  for (int k = 0; k < GT_MEM_KINDS; k++) {
    size_t want = gt_device_estimate_bytes(e, (gt_mem_kind)k);
    if (k == GT_MEM_SCRATCH && m->mp_scratch_bytes) want += gt_arena_block_size(m->mp_scratch_bytes);
    if (l->peak[k] != want) {
      snprintf(why, n, "%s: measured %zu bytes at the peak, expected %zu", gt_mem_kind_name((gt_mem_kind)k), l->peak[k],
               want);
      return 1;
    }
  }
  return 0;
}

typedef struct run_cfg {
  gt_precision precision;
  int world; /* 1: one process, no dist */
  int zero;  /* the ZeRO stage with dist: 1 or more */
} run_cfg;

/* Trains STEPS steps and checks the ledger on this rank; the bytes of its
 * optimizer state at the peak into *optim. Returns 0 or fails in place. */
static int train_and_check(int rank, int world, const run_cfg *cfg, size_t *optim, char *why, size_t n) {
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_store *store = NULL;
  gt_dist *dist = NULL;
  gt_plan plan;
  char layout[16];
  snprintf(layout, sizeof layout, "dp=%d", world);
  if (world > 1)
    train_rank_dist(&(gt_plan_config){.world = world, .rank = rank, .layout = layout, .zero1 = true, .zero = cfg->zero},
                    "ledger", &store, &plan, &dist);
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 7}, &m));
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(m, &mp));
  }
  CHECK_OK(
      gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true}));
  CHECK_OK(gt_model_build(m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .schedule = {3e-3f, 3e-4f, 0, STEPS},
                          .dist = dist,
                          .precision = cfg->precision};
  gt_trainer *tr;
  CHECK_OK(gt_trainer_create(m, &tc, &tr));
  gt_device_estimate e;
  CHECK_OK(gt_model_device_estimate_ex(
      m, &(gt_estimate_config){.optim_states = 2, .optim_shards = world, .distributed = dist != NULL}, &e));
  int32_t in[ROWS * T], tg[ROWS * T];
  gt_step_stats st;
  for (int s = 0; s < STEPS; s++) {
    train_batch_for(s, rank, V, T, ROWS, in, tg);
    CHECK_OK(gt_trainer_step_batches(tr, &(gt_batch){.B = ROWS, .T = T, .inputs = in, .targets = tg}, 1, &st));
  }
  gt_memory_ledger l;
  CHECK_OK(gt_model_memory_ledger(m, &l));
  int bad = compare(m, &l, &e, why, n);
  /* The attention tensors are the blocks' log-sum-exps, B*NH*T floats
   * (tiled attention, the default). */
  CHECK(l.peak[GT_MEM_ATTENTION] == (size_t)L * ROWS * NH * T * sizeof(float));
  CHECK(l.peak[GT_MEM_OTHER] == 0);
  size_t sum = 0;
  for (int k = 0; k < GT_MEM_KINDS; k++) sum += l.peak[k];
  CHECK(sum == l.peak_total && l.peak_total == st.mem_peak && l.peak_total == gt_arena_peak(gt_model_arena(m)));
  CHECK(l.device_peak >= l.peak_total);
  *optim = l.peak[GT_MEM_OPTIMIZER];
  /* A new peak starts from what is held now. */
  gt_model_memory_reset_peak(m);
  CHECK_OK(gt_model_memory_ledger(m, &l));
  CHECK(l.peak_total == l.current_total && !memcmp(l.peak, l.current, sizeof l.peak));
  /* Without the trainer, its optimizer state, activations and buffers are
   * gone and the model's own buffers stay. */
  gt_trainer_destroy(tr);
  CHECK_OK(gt_model_memory_ledger(m, &l));
  CHECK(l.current[GT_MEM_OPTIMIZER] == 0 && l.current[GT_MEM_ACTIVATIONS] == 0 && l.current[GT_MEM_ATTENTION] == 0);
  CHECK(l.current[GT_MEM_PARAMS] == e.weights && l.current[GT_MEM_GRADS] == e.grads);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return bad;
}

typedef struct shared_out {
  size_t optim[2];
  char why[2][256];
  int bad[2];
} shared_out;

static shared_out *shared;
static run_cfg rank_cfg;

static int rank_main(int rank, int world, void *arg) {
  (void)arg;
  shared->bad[rank] =
      train_and_check(rank, world, &rank_cfg, &shared->optim[rank], shared->why[rank], sizeof shared->why[rank]);
  return RANK_OK;
}

static void one_process(gt_precision p, size_t *optim) {
  char why[256] = "";
  run_cfg cfg = {.precision = p, .world = 1};
  int bad = train_and_check(0, 1, &cfg, optim, why, sizeof why);
  if (bad) fail_msg("%s, one process: %s", gt_precision_name(p), why);
}

static void dp2(gt_precision p, size_t whole_optim, int zero) {
  rank_cfg = (run_cfg){.precision = p, .world = 2, .zero = zero};
  memset(shared, 0, sizeof *shared);
  int codes[HARNESS_MAX];
  /* Well under a second a rank; only a hang gets near the bound. */
  assert_int_equal(harness_run(2, rank_main, NULL, 120, codes), 0);
  for (int r = 0; r < 2; r++) {
    if (shared->bad[r]) fail_msg("%s, dp=2 ZeRO-%d, rank %d: %s", gt_precision_name(p), zero, r, shared->why[r]);
    /* Each rank holds half of the moments (the buffer padded to 2). */
    assert_true(shared->optim[r] <= whole_optim / 2 + 2 * gt_arena_block_size(1));
    assert_true(shared->optim[r] >= whole_optim / 2 - whole_optim / 8);
  }
}

static void fp32(void **state) {
  (void)state;
  size_t optim;
  one_process(GT_PRECISION_FP32, &optim);
  dp2(GT_PRECISION_FP32, optim, 1);
  dp2(GT_PRECISION_FP32, optim, 3);
}

static void bf16(void **state) {
  (void)state;
  size_t optim;
  one_process(GT_PRECISION_BF16, &optim);
  dp2(GT_PRECISION_BF16, optim, 1);
  dp2(GT_PRECISION_BF16, optim, 3);
}

/* The arena's categories: a block in two parts, freed and reused. */
static void arena_parts(void **state) {
  (void)state;
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be), GT_OK);
  gt_arena *a;
  assert_int_equal(gt_arena_create(be, 0, &a), GT_OK);
  void *p, *q, *r;
  size_t cur[GT_MEM_KINDS], peak[GT_MEM_KINDS];
  assert_int_equal(gt_arena_alloc_parts(a, GT_MEM_ACTIVATIONS, 10000, GT_MEM_ATTENTION, 4000, &p), GT_OK);
  assert_int_equal(gt_arena_alloc_as(a, GT_MEM_PARAMS, 1000, &q), GT_OK);
  gt_arena_kinds(a, cur, peak);
  size_t cls = gt_arena_block_size(10000);
  assert_int_equal(cur[GT_MEM_ATTENTION], 4000);
  assert_int_equal(cur[GT_MEM_ACTIVATIONS], cls - 4000);
  assert_int_equal(cur[GT_MEM_PARAMS], gt_arena_block_size(1000));
  gt_arena_free(a, p);
  assert_int_equal(gt_arena_alloc(a, 10000, &r), GT_OK); /* the cached block, now untagged */
  gt_arena_kinds(a, cur, peak);
  assert_int_equal(cur[GT_MEM_ATTENTION], 0);
  assert_int_equal(cur[GT_MEM_OTHER], cls);
  assert_int_equal(peak[GT_MEM_ATTENTION], 4000); /* the peak was first reached with the parts */
  gt_arena_reset_peak(a);
  gt_arena_kinds(a, cur, peak);
  assert_memory_equal(cur, peak, sizeof cur);
  gt_arena_free(a, q);
  gt_arena_free(a, r);
  gt_arena_destroy(a);
  gt_backend_destroy(be);
}

int main(void) {
  shared = harness_shared(sizeof *shared);
  const struct CMUnitTest tests[] = {cmocka_unit_test(arena_parts), cmocka_unit_test(fp32), cmocka_unit_test(bf16)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
