/* Offloading against no offloading: the same training, bit for bit.
 *
 * A 6-layer GPT (8 layers in the model's list: embedding, blocks, final
 * LayerNorm, the LM head tied to the embedding) trains 20 steps of 2
 * micro-batches with AdamW and clipping, with and without offloading, at
 * one process, dp=2 (also with ZeRO-1), tp=2 and pp=2 (1F1B), in fp32 and
 * bf16, with windows of 1, 2 and every layer. The losses and the final
 * parameters must be identical to the last bit: offloading moves bytes and
 * changes no arithmetic (core/model/offload.c).
 *
 * The device budget: a GPT whose weights, gradients and AdamW state are
 * more than 6 times the budget trains offloaded inside it, with its device
 * peak within 10% of gt_model_device_estimate, and fails at start without
 * offloading, with the budget's message.
 *
 * Ranks are forked (localkit); results come back in shared memory, each rank
 * writing what it holds into the single-process layout.
 *
 * `test_offload cuda` runs the same checks on CUDA devices, a rank on each
 * (the copy stream and events of the CUDA backend, pinned host memory, and
 * NCCL reducing host buffers through its staging): one process and the
 * budget on one device; `test_offload cuda2` the parallel layouts, on two.
 * Each is skipped (77) without its devices. There the offloaded update runs on the host and
 * the reference's on the device, whose kernels fuse multiply-adds: the
 * first loss must be the same bits, the rest the same to rounding. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "localkit/ranks.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "parallel/train_result.h"
#include "core/model/model_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"
#include "parallel/plan_engine.h"

enum { V = 64, T = 8, C = 32, NH = 4, L = 6, ROWS = 2, M = 2, STEPS = 20, ALL = 64 };

/* A run (20 steps of a toy GPT in one or two forked ranks) takes ~0.2 s,
 * a few seconds on loaded cores under ASan: 240 s is > 50x, a bound only
 * on a hung rank. */
#define RUN_TIMEOUT_S 240

typedef train_result result;

/* Where the ranks train: the CPU, or CUDA device `rank` (main's argument);
 * how many CUDA devices there are. */
static gt_device_kind device_kind = GT_DEVICE_CPU;
static int cuda_devices;

static gt_backend_config backend_for(int rank, size_t budget) {
  return (gt_backend_config){.kind = device_kind,
                             .device = device_kind == GT_DEVICE_CUDA ? rank : 0,
                             .num_threads = 1,
                             .device_mem_limit = budget};
}

typedef struct run_cfg {
  const char *layout; /* NULL: one process */
  bool zero1;
  gt_precision precision;
  int window;          /* 0: no offloading; ALL: every layer */
  bool no_clip;        /* grad_clip 0 */
  bool per_layer;      /* update_per_layer */
  size_t bucket_bytes; /* dp: 0, the plan's default */
  int *early;          /* per_layer: layers updated before backward ended, summed over steps (shared) */
  result *out;
} run_cfg;

static void batch_for(int s, int k, int32_t *in, int32_t *tg) { train_batch_for(s, k, V, T, ROWS, in, tg); }

static int train(int rank, int world, void *arg) {
  run_cfg *cfg = arg;
  result *out = cfg->out;
  gt_backend *be;
  gt_backend_config bc = backend_for(rank, 0);
  CHECK_OK(gt_backend_create(&bc, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist_be(&(gt_plan_config){.world = world,
                                       .rank = rank,
                                       .layout = cfg->layout,
                                       .schedule = GT_PP_1F1B,
                                       .zero1 = cfg->zero1,
                                       .bucket_bytes = cfg->bucket_bytes},
                     "gen0", be, &store, &plan, &dist);
  int rows = ROWS / plan.layout.dp, row0 = plan.me.dp * rows;
  gt_model *m;
  gt_model_config mc = {.B_max = rows, .T_max = T, .seed = 42, .offload_window = cfg->window};
  CHECK_OK(gt_model_create(be, &mc, &m));
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(m, &mp));
  }
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  CHECK_OK(gpt_add_layers(m, &gc));
  CHECK_OK(gt_model_build(m));
  if (dist) CHECK_OK(gt_plan_check_model(&plan, m));
  CHECK(gt_model_offloaded(m) == (cfg->window > 0));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = cfg->no_clip ? 0.0f : 1.0f,
                          .grad_accum = M,
                          .dist = dist,
                          .precision = cfg->precision,
                          .schedule = (gt_lr_schedule){3e-3f, 3e-4f, 2, STEPS},
                          .update_per_layer = cfg->per_layer};
  gt_trainer *tr;
  CHECK_OK(gt_trainer_create(m, &tc, &tr));
  int32_t in[M][ROWS * T], tg[M][ROWS * T];
  gt_batch b[M];
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < M; k++) {
      batch_for(s, k, in[k], tg[k]);
      b[k] = (gt_batch){.B = rows, .T = T, .inputs = in[k] + row0 * T, .targets = tg[k] + row0 * T};
    }
    gt_step_stats st;
    CHECK_OK(gt_trainer_step_batches(tr, b, M, &st));
    if (rank == 0) {
      out->losses[s] = st.loss;
      out->norms[s] = st.grad_norm;
    }
    if (cfg->per_layer && rank == 0) *cfg->early += gt_trainer_layers_updated_early(tr);
  }
  if (cfg->window > 0) {
    /* The window really moved weights: every step refetches each layer
     * after the update (at least), and gradients went back. */
    gt_offload_stats os = gt_model_offload_stats(m);
    CHECK(os.window >= 1 && os.fetches >= (uint64_t)STEPS && os.bytes_out > 0);
  }
  size_t n = gt_model_buffer_floats(m);
  float *p = malloc(n * sizeof *p);
  CHECK_OK(gt_model_get_params(m, p, n));
  if (!cfg->layout) train_result_set_layout(out, m);
  if (dist) CHECK_OK(gt_comm_barrier(gt_grid_world(gt_dist_grid(dist))));
  if (plan.me.dp == 0) train_result_write(out, m, p, plan.me.tp);
  if (dist) CHECK_OK(gt_comm_barrier(gt_grid_world(gt_dist_grid(dist))));
  free(p);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

static result *run(const char *layout, bool zero1, gt_precision prec, int window, const result *layout_of) {
  result *r = train_result_new(layout_of);
  run_cfg cfg = {.layout = layout, .zero1 = zero1, .precision = prec, .window = window, .out = r};
  int world = 1;
  if (layout) world = 2;
  int codes[2];
  int bad = harness_run(world, train, &cfg, RUN_TIMEOUT_S, codes);
  if (bad)
    fail_msg("%s%s %s window %d: %d rank(s) failed", layout ? layout : "one process", zero1 ? " + ZeRO-1" : "",
             gt_precision_name(prec), window, bad);
  return r;
}

/* Offloaded runs at windows 1, 2 and all against the same layout without. */
static void case_layout(const char *layout, bool zero1) {
  if (layout && device_kind == GT_DEVICE_CUDA && cuda_devices < 2)
    SKIP_CASE("%s: one CUDA device, and a rank needs its own", layout);
  for (int pi = 0; pi < 2; pi++) {
    gt_precision prec = pi ? GT_PRECISION_BF16 : GT_PRECISION_FP32;
    result *ref = run(NULL, false, prec, 0, NULL); /* the single-process layout */
    if (layout) ref = run(layout, zero1, prec, 0, ref);
    static const int windows[] = {1, 2, ALL};
    for (int w = 0; w < 3; w++) {
      result *r = run(layout, zero1, prec, windows[w], ref);
      print_message("%-14s %s%s window %-3d loss %.4f -> %.4f\n", layout ? layout : "one process",
                    gt_precision_name(prec), zero1 ? " ZeRO-1" : "", windows[w], r->losses[0], r->losses[STEPS - 1]);
      if (device_kind == GT_DEVICE_CUDA) {
        /* On a GPU the offloaded model's update and gradient norm run on
         * the host (the CPU's AdamW, without fused multiply-adds), the
         * device's own with them: the first loss, before any update, is
         * the same bits, and the rest agree to rounding. */
        train_diff d = train_result_compare(ref, r, STEPS, C);
        print_message("  against the device's update: loss %.2e, parameters %.2e (%s)\n", d.loss, d.param,
                      d.worst ? d.worst : "-");
        assert_memory_equal(&r->losses[0], &ref->losses[0], sizeof r->losses[0]);
        assert_true(d.loss <= 1e-5 && d.param <= 1e-5);
      } else {
        assert_memory_equal(r->losses, ref->losses, sizeof r->losses);
        assert_memory_equal(r->params, ref->params, ref->nparams * sizeof(float));
      }
      assert_true(r->losses[STEPS - 1] < r->losses[0]);
    }
  }
}

static void test_one_process(void **state) {
  (void)state;
  case_layout(NULL, false);
}

/* The update layer by layer while backward goes on (no clipping): the same
 * bits as the update after backward without offloading. How many layers
 * were done before backward ended depends on the machine; it is printed. */
static void test_update_per_layer(void **state) {
  (void)state;
  int *early = harness_shared(sizeof *early);
  /* One process, and dp=2, where a layer is updated once its buckets are
   * averaged over the replicas: small buckets, so that most end during
   * backward. */
  for (int li = 0; li < 2; li++) {
    const char *layout = li ? "dp=2" : NULL;
    int world = layout ? 2 : 1;
    for (int pi = 0; pi < 2; pi++) {
      gt_precision prec = pi ? GT_PRECISION_BF16 : GT_PRECISION_FP32;
      result *ref = train_result_new(NULL);
      run_cfg rc = {.precision = prec, .no_clip = true, .out = ref};
      int codes[2];
      if (harness_run(1, train, &rc, RUN_TIMEOUT_S, codes)) fail_msg("reference run failed");
      if (layout) {
        rc = (run_cfg){.layout = layout, .precision = prec, .no_clip = true, .out = train_result_new(ref)};
        if (harness_run(world, train, &rc, RUN_TIMEOUT_S, codes)) fail_msg("dp=2 reference run failed");
        ref = rc.out;
      }
      static const int windows[] = {1, 2, ALL};
      for (int w = 0; w < 3; w++) {
        result *r = train_result_new(ref);
        *early = 0;
        run_cfg cfg = {.layout = layout,
                       .precision = prec,
                       .no_clip = true,
                       .window = windows[w],
                       .per_layer = true,
                       .early = early,
                       .out = r,
                       .bucket_bytes = 16 << 10};
        if (harness_run(world, train, &cfg, RUN_TIMEOUT_S, codes))
          fail_msg("update per layer, %s, window %d: failed", layout ? layout : "one process", windows[w]);
        print_message(
            "update per layer %-11s %s window %-3d loss %.4f -> %.4f; %d of %d layer updates done "
            "before backward ended\n",
            layout ? layout : "one process", gt_precision_name(prec), windows[w], r->losses[0], r->losses[STEPS - 1],
            *early, STEPS * (L + 3));
        assert_memory_equal(r->losses, ref->losses, sizeof r->losses);
        assert_memory_equal(r->params, ref->params, ref->nparams * sizeof(float));
      }
    }
  }
}

/* ---- the one-step delayed update ---- */

/* The delayed update against its own definition, written out here with the
 * model and optimizer alone: each step computes its gradients g[t] at the
 * parameters it has, then applies g[t-1] with step t-1's learning rate and
 * clip factor (nothing at step 0). One micro-batch a step, clipping on. */
typedef struct delayed_cfg {
  bool reference;
  int window;
  gt_precision precision;
  float params_out[1 << 18];
  float losses[STEPS];
  size_t n;
} delayed_cfg;

static const gt_lr_schedule delayed_lr = {3e-3f, 3e-4f, 2, STEPS};

static int train_delayed(int rank, int world, void *arg) {
  (void)rank;
  (void)world;
  delayed_cfg *cfg = arg;
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 42, .offload_window = cfg->window},
                           &m));
  CHECK_OK(
      gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true}));
  CHECK_OK(gt_model_build(m));
  size_t n = gt_model_buffer_floats(m);
  CHECK(n <= sizeof cfg->params_out / sizeof(float));
  int32_t in[ROWS * T], tg[ROWS * T];
  if (!cfg->reference) {
    gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                            .grad_clip = 1.0f,
                            .grad_accum = 1,
                            .precision = cfg->precision,
                            .schedule = delayed_lr,
                            .delayed_update = true};
    gt_trainer *tr;
    CHECK_OK(gt_trainer_create(m, &tc, &tr));
    for (int s = 0; s < STEPS; s++) {
      batch_for(s, 0, in, tg);
      gt_step_stats st;
      CHECK_OK(gt_trainer_step_batches(tr, &(gt_batch){.B = ROWS, .T = T, .inputs = in, .targets = tg}, 1, &st));
      cfg->losses[s] = st.loss;
    }
    CHECK_OK(gt_trainer_flush(tr));
    gt_trainer_destroy(tr);
  } else {
    CHECK_OK(gt_model_set_precision(m, cfg->precision));
    gt_optimizer *o;
    gt_optim_config oc = gt_optim_defaults(GT_OPTIM_ADAMW);
    CHECK_OK(gt_optimizer_create(m, &oc, &o));
    gt_acts *a;
    CHECK_OK(gt_acts_create(m, &a));
    float *held = malloc(n * sizeof *held);
    CHECK(held != NULL);
    float held_lr = 0, held_clip = 0;
    for (int s = 0; s <= STEPS; s++) {
      /* Step s's gradients at the current parameters (none after the last
       * step: only the held update is left, as gt_trainer_flush applies). */
      float *g = gt_model_grads(m);
      float *now = malloc(n * sizeof *now);
      CHECK(now != NULL);
      double norm = 0;
      if (s < STEPS) {
        batch_for(s, 0, in, tg);
        CHECK_OK(gt_model_zero_grads(m));
        float loss;
        CHECK_OK(gt_model_forward(m, a, &(gt_batch){.B = ROWS, .T = T, .inputs = in, .targets = tg}, &loss));
        int64_t valid = gt_acts_targets(a);
        /* The trainer's scale for one micro-batch: weight 1 over the
         * valid targets. */
        CHECK_OK(gt_model_backward(m, a, (float)(1.0 / (double)valid)));
        cfg->losses[s] = loss;
        CHECK_OK(gt_grad_norm(m, &norm));
        memcpy(now, g, n * sizeof *now);
      }
      if (s > 0) {
        memcpy(g, held, n * sizeof *held);
        CHECK_OK(gt_optimizer_step(o, held_lr, held_clip));
      }
      memcpy(held, now, n * sizeof *held);
      held_lr = gt_lr_at(&delayed_lr, s);
      held_clip = gt_clip_factor(norm, 1.0f);
      free(now);
    }
    free(held);
    gt_acts_destroy(a);
    gt_optimizer_destroy(o);
  }
  cfg->n = n;
  CHECK_OK(gt_model_get_params(m, cfg->params_out, n));
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return RANK_OK;
}

static void test_delayed_update(void **state) {
  (void)state;
  for (int pi = 0; pi < 2; pi++) {
    gt_precision prec = pi ? GT_PRECISION_BF16 : GT_PRECISION_FP32;
    delayed_cfg *ref = harness_shared(sizeof *ref);
    *ref = (delayed_cfg){.reference = true, .precision = prec};
    int codes[1];
    if (harness_run(1, train_delayed, ref, RUN_TIMEOUT_S, codes)) fail_msg("the delayed update's reference failed");
    static const int windows[] = {1, 2, ALL};
    for (int w = 0; w < 3; w++) {
      delayed_cfg *r = harness_shared(sizeof *r);
      *r = (delayed_cfg){.window = windows[w], .precision = prec};
      if (harness_run(1, train_delayed, r, RUN_TIMEOUT_S, codes))
        fail_msg("delayed update, window %d: failed", windows[w]);
      print_message("delayed update %s window %-3d loss %.4f -> %.4f\n", gt_precision_name(prec), windows[w],
                    r->losses[0], r->losses[STEPS - 1]);
      assert_int_equal(r->n, ref->n);
      assert_memory_equal(r->losses, ref->losses, sizeof r->losses);
      assert_memory_equal(r->params_out, ref->params_out, ref->n * sizeof(float));
      assert_true(r->losses[STEPS - 1] < r->losses[0]);
    }
  }
}

/* What the mode cannot do is refused at creation, saying why. */
static void test_update_per_layer_refused(void **state) {
  (void)state;
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  for (int k = 0; k < 2; k++) {
    gt_model *m;
    OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = T, .seed = 1, .offload_window = k ? 2 : 0}, &m));
    OK(gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = 1, .tie_weights = true}));
    OK(gt_model_build(m));
    gt_trainer *tr = NULL;
    gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                            .grad_accum = 1,
                            .schedule = {1e-3f, 1e-3f, 0, 1},
                            .update_per_layer = true,
                            .grad_clip = k ? 1.0f : 0};
    expect_error(gt_trainer_create(m, &tc, &tr), GT_EINVAL, k ? "needs grad_clip = 0" : "offload the model");
    assert_null(tr);
    /* The delayed update takes clipping, but not without offloading, nor
     * together with the other way. */
    tc.update_per_layer = k;
    tc.delayed_update = true;
    expect_error(gt_trainer_create(m, &tc, &tr), GT_EINVAL, k ? "choose one" : "delayed_update updates an offloaded");
    assert_null(tr);
    gt_model_destroy(m);
  }
  gt_backend_destroy(be);
}
static void test_dp2(void **state) {
  (void)state;
  case_layout("dp=2", false);
}
static void test_dp2_zero1(void **state) {
  (void)state;
  case_layout("dp=2", true);
}
static void test_tp2(void **state) {
  (void)state;
  case_layout("tp=2", false);
}
static void test_pp2(void **state) {
  (void)state;
  case_layout("pp=2", false);
}

/* ---- the device budget ---- */

enum { BL = 12, BC = 128, BNH = 4, BT = 16, BV = 320, BB = 1 };

typedef struct budget_cfg {
  int window;
  size_t budget;
  /* out */
  gt_status status;
  char message[512];
  size_t params, peak, estimate;
  float loss0, loss_last;
} budget_cfg;

static int train_budget(int rank, int world, void *arg) {
  (void)rank;
  (void)world;
  budget_cfg *cfg = arg;
  gt_backend *be;
  gt_backend_config bc = backend_for(0, cfg->budget);
  CHECK_OK(gt_backend_create(&bc, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_model *m = NULL;
  gt_trainer *tr = NULL;
  gt_model_config mc = {.B_max = BB, .T_max = BT, .seed = 7, .offload_window = cfg->window};
  gpt_config gc = {.vocab_size = BV, .T_max = BT, .C = BC, .NH = BNH, .L = BL, .tie_weights = true};
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .schedule = (gt_lr_schedule){3e-3f, 3e-4f, 0, 5}};
  gt_status s = gt_model_create(be, &mc, &m);
  if (s == GT_OK) s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) cfg->params = gt_model_param_count(m);
  if (s == GT_OK) s = gt_trainer_create(m, &tc, &tr);
  gt_device_estimate est;
  if (s == GT_OK) s = gt_model_device_estimate(m, 2, &est);
  if (s == GT_OK) cfg->estimate = est.total;
  int32_t in[BB * BT], tg[BB * BT];
  for (int step = 0; s == GT_OK && step < 5; step++) {
    for (int i = 0; i < BB * BT; i++) {
      in[i] = (i * 7 + 3) % BV;
      tg[i] = (i * 7 + 10) % BV;
    }
    gt_batch b = {.B = BB, .T = BT, .inputs = in, .targets = tg};
    gt_step_stats st;
    s = gt_trainer_step_batches(tr, &b, 1, &st);
    if (s == GT_OK && step == 0) cfg->loss0 = st.loss;
    if (s == GT_OK) cfg->loss_last = st.loss;
  }
  cfg->status = s;
  if (s != GT_OK) snprintf(cfg->message, sizeof cfg->message, "%s", gt_last_error());
  cfg->peak = gt_backend_mem(be).peak;
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return RANK_OK;
}

static void test_budget(void **state) {
  (void)state;
  budget_cfg *cfg = harness_shared(sizeof *cfg);
  /* The model's size first, with no budget; its peak is the estimate's. */
  *cfg = (budget_cfg){.window = 0};
  int codes[1];
  if (harness_run(1, train_budget, cfg, RUN_TIMEOUT_S, codes)) fail_msg("sizing run failed");
  assert_int_equal(cfg->status, GT_OK);
  print_message("not offloaded: device peak %zu bytes, estimate %zu\n", cfg->peak, cfg->estimate);
  assert_true(fabs((double)cfg->peak - (double)cfg->estimate) <= 0.1 * (double)cfg->estimate);
  /* Weights, gradients and AdamW's two moments: 16 bytes a parameter. */
  size_t state_bytes = cfg->params * 16, budget = state_bytes / 6;
  print_message("GPT L=%d C=%d: %zu parameters, %zu bytes of state, budget %zu bytes (1/6)\n", BL, BC, cfg->params,
                state_bytes, budget);

  *cfg = (budget_cfg){.window = 1, .budget = budget};
  if (harness_run(1, train_budget, cfg, RUN_TIMEOUT_S, codes)) fail_msg("offloaded run failed");
  if (cfg->status != GT_OK) fail_msg("offloaded under the budget: %s", cfg->message);
  print_message("offloaded, window 1: device peak %zu bytes of %zu, estimate %zu; loss %.4f -> %.4f\n", cfg->peak,
                budget, cfg->estimate, cfg->loss0, cfg->loss_last);
  assert_true(cfg->peak <= budget);
  assert_true(fabs((double)cfg->peak - (double)cfg->estimate) <= 0.1 * (double)cfg->estimate);
  assert_true(cfg->loss_last < cfg->loss0);

  *cfg = (budget_cfg){.window = 0, .budget = budget};
  if (harness_run(1, train_budget, cfg, RUN_TIMEOUT_S, codes)) fail_msg("run without offloading crashed");
  print_message("without offloading: %s\n", cfg->message);
  assert_int_equal(cfg->status, GT_ENOMEM);
  assert_non_null(strstr(cfg->message, "device memory budget exceeded"));
  assert_non_null(strstr(cfg->message, "asked for"));
  assert_non_null(strstr(cfg->message, "in use"));
}

int main(int argc, char **argv) {
  /* The CUDA runs, apart by the devices they need, so that a machine with
   * one shows the one-device cases passed and only the layouts skipped. */
  if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
    if ((cuda_devices = harness_cuda_devices(2)) < 1) return 77;
    device_kind = GT_DEVICE_CUDA;
    const struct CMUnitTest cuda_tests[] = {cmocka_unit_test(test_one_process), cmocka_unit_test(test_budget)};
    return gt_test_exit(cmocka_run_group_tests(cuda_tests, NULL, NULL));
  }
  if (argc > 1 && strcmp(argv[1], "cuda2") == 0) {
    if ((cuda_devices = harness_cuda_devices(2)) < 2) {
      printf("skipped: %d CUDA device(s), and the layouts need two\n", cuda_devices);
      return 77;
    }
    device_kind = GT_DEVICE_CUDA;
    const struct CMUnitTest cuda_tests[] = {
        cmocka_unit_test(test_dp2),
        cmocka_unit_test(test_dp2_zero1),
        cmocka_unit_test(test_tp2),
        cmocka_unit_test(test_pp2),
    };
    return gt_test_exit(cmocka_run_group_tests(cuda_tests, NULL, NULL));
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_process),
      cmocka_unit_test(test_update_per_layer),
      cmocka_unit_test(test_update_per_layer_refused),
      cmocka_unit_test(test_delayed_update),
      cmocka_unit_test(test_dp2),
      cmocka_unit_test(test_dp2_zero1),
      cmocka_unit_test(test_tp2),
      cmocka_unit_test(test_pp2),
      cmocka_unit_test(test_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
