/* The training loop: determinism, overfitting one batch, gradient
 * accumulation, the schedule, clipping, metrics and memory in steady state. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

static gt_backend *be;

static int setup(void **state) {
  (void)state;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  if (gt_backend_create(&c, &be) != GT_OK) return -1;
  gt_backend_set_peak_flops(be, 1e9); /* skip the measurement; MFU is not under test here */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

typedef struct run {
  gt_model *m;
  gt_trainer *t;
} run;

static run make_run(int V, int T, int C, int NH, int L, int B, int accum, gt_optim_kind kind, float lr,
                    const char *metrics) {
  run r;
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 1234};
  OK(gt_model_create(be, &mc, &r.m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(r.m, &gc));
  OK(gt_model_build(r.m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(kind),
                          .grad_clip = 1.0f,
                          .grad_accum = accum,
                          .metrics_path = metrics,
                          .schedule = {.lr_max = lr, .lr_min = lr / 10, .warmup = 2, .total = 50}};
  OK(gt_trainer_create(r.m, &tc, &r.t));
  return r;
}

static void free_run(run *r) {
  gt_trainer_destroy(r->t);
  gt_model_destroy(r->m);
}

static void tokens(int32_t *t, size_t n, int V, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = (int32_t)((seed >> 33) % (uint64_t)V);
  }
}

static void test_same_seed_gives_bit_identical_losses(void **state) {
  (void)state;
  enum { V = 31, T = 16, B = 4, STEPS = 8 };
  int32_t tok[B * T + STEPS];
  tokens(tok, sizeof tok / sizeof tok[0], V, 5);
  float losses[2][STEPS];
  float *params[2];
  for (int k = 0; k < 2; k++) {
    run r = make_run(V, T, 32, 4, 2, B, 1, GT_OPTIM_ADAMW, 3e-3f, NULL);
    for (int s = 0; s < STEPS; s++) {
      gt_batch b = {.B = B, .T = T, .inputs = tok + s, .targets = tok + s + 1};
      gt_step_stats st;
      OK(gt_trainer_step_batches(r.t, &b, 1, &st));
      losses[k][s] = st.loss;
    }
    size_t n = gt_model_buffer_floats(r.m);
    params[k] = malloc(n * sizeof(float));
    OK(gt_model_get_params(r.m, params[k], n));
    if (k == 1) assert_memory_equal(params[0], params[1], n * sizeof(float));
    free_run(&r);
  }
  assert_memory_equal(losses[0], losses[1], sizeof losses[0]);
  assert_true(losses[0][STEPS - 1] < losses[0][0]);
  free(params[0]);
  free(params[1]);
}

static void overfit(gt_optim_kind kind, float lr, int steps) {
  enum { V = 32, T = 16, B = 4 };
  int32_t tok[B * T + 1];
  tokens(tok, B * T + 1, V, 77);
  run r = make_run(V, T, 32, 2, 1, B, 1, kind, lr, NULL);
  gt_trainer_config unused;
  (void)unused;
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = tok + 1};
  gt_step_stats st = {0};
  float first = 0;
  for (int s = 0; s < steps; s++) {
    OK(gt_trainer_step_batches(r.t, &b, 1, &st));
    if (s == 0) first = st.loss;
  }
  print_message("%s: loss %.4f -> %.4f after %d steps\n", kind == GT_OPTIM_ADAMW ? "adamw" : "sgd", first, st.loss,
                steps);
  assert_true(st.loss < 0.05f);
  free_run(&r);
}

/* The schedule decays to lr/10 over 50 steps, so these need a high rate. */
static void test_tiny_model_overfits_one_batch_adamw(void **state) {
  (void)state;
  overfit(GT_OPTIM_ADAMW, 2e-2f, 150);
}

static void test_tiny_model_overfits_one_batch_sgd(void **state) {
  (void)state;
  overfit(GT_OPTIM_SGD, 0.5f, 300);
}

/* Two micro-batches of 2 rows accumulate to the same gradient and update as
 * one batch of 4 rows (every row has all its targets, so the means weigh
 * alike). SGD, so that the comparison of parameters is not dominated by
 * Adam's normalisation of near-zero gradients. */
static void test_gradient_accumulation_equals_the_larger_batch(void **state) {
  (void)state;
  enum { V = 23, T = 8 };
  int32_t in[4 * T], tg[4 * T];
  tokens(in, 4 * T, V, 9);
  tokens(tg, 4 * T, V, 10);
  run big = make_run(V, T, 16, 2, 2, 4, 1, GT_OPTIM_SGD, 0.1f, NULL);
  run acc = make_run(V, T, 16, 2, 2, 2, 2, GT_OPTIM_SGD, 0.1f, NULL);
  size_t n = gt_model_buffer_floats(big.m);
  float *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
  gt_step_stats sb, sa;
  for (int step = 0; step < 3; step++) {
    gt_batch whole = {.B = 4, .T = T, .inputs = in, .targets = tg};
    gt_batch halves[2] = {{.B = 2, .T = T, .inputs = in, .targets = tg},
                          {.B = 2, .T = T, .inputs = in + 2 * T, .targets = tg + 2 * T}};
    OK(gt_trainer_step_batches(big.t, &whole, 1, &sb));
    OK(gt_trainer_step_batches(acc.t, halves, 2, &sa));
    assert_true(fabsf(sb.loss - sa.loss) <= 1e-5f * fabsf(sb.loss));
    assert_true(fabs(sb.grad_norm - sa.grad_norm) <= 1e-5 * sb.grad_norm);
    /* The step's gradients stay in the buffer until the next step. */
    OK(gt_model_get_grads(big.m, p, n));
    OK(gt_model_get_grads(acc.m, q, n));
    for (size_t i = 0; i < n; i++) assert_true(fabs((double)p[i] - q[i]) <= 1e-5 * sb.grad_norm);
  }
  OK(gt_model_get_params(big.m, p, n));
  OK(gt_model_get_params(acc.m, q, n));
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)p[i] - q[i]) / (fabs((double)p[i]) + 1e-2);
    if (d > worst) worst = d;
  }
  print_message("accumulation vs big batch: max relative parameter difference %.2e\n", worst);
  assert_true(worst < 1e-5);
  free(p);
  free(q);
  free_run(&big);
  free_run(&acc);
}

static void test_schedule_and_clipping(void **state) {
  (void)state;
  gt_lr_schedule s = {.lr_max = 1.0f, .lr_min = 0.1f, .warmup = 4, .total = 14};
  assert_true(fabsf(gt_lr_at(&s, 0) - 0.25f) < 1e-6f);
  assert_true(fabsf(gt_lr_at(&s, 3) - 1.0f) < 1e-6f);
  assert_true(fabsf(gt_lr_at(&s, 4) - 1.0f) < 1e-6f);
  assert_true(fabsf(gt_lr_at(&s, 9) - 0.55f) < 1e-6f); /* halfway through the cosine */
  assert_true(fabsf(gt_lr_at(&s, 14) - 0.1f) < 1e-6f);
  assert_true(fabsf(gt_lr_at(&s, 100) - 0.1f) < 1e-6f);
  for (int i = 5; i < 14; i++) assert_true(gt_lr_at(&s, i) < gt_lr_at(&s, i - 1));
  assert_true(gt_clip_factor(0.5, 1.0f) == 1.0f);
  assert_true(fabsf(gt_clip_factor(4.0, 1.0f) - 0.25f) < 1e-6f);
  assert_true(gt_clip_factor(4.0, 0.0f) == 1.0f);
}

/* The clipped global norm is what the update sees: one SGD step without
 * momentum moves the parameters by exactly lr * clip / norm * grad. */
static void test_clipping_scales_the_update(void **state) {
  (void)state;
  enum { V = 11, T = 4, B = 2 };
  int32_t tok[B * T + 1];
  tokens(tok, B * T + 1, V, 4);
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 3};
  gt_model *m;
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = 8, .NH = 2, .L = 1, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  gt_optim_config oc = gt_optim_defaults(GT_OPTIM_SGD);
  oc.momentum = 0;
  gt_trainer_config tc = {
      .optim = oc, .grad_clip = 0.01f, .grad_accum = 1, .schedule = {.lr_max = 0.5f, .lr_min = 0.5f}};
  gt_trainer *t;
  OK(gt_trainer_create(m, &tc, &t));
  size_t n = gt_model_buffer_floats(m);
  float *before = malloc(n * sizeof(float)), *after = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
  OK(gt_model_get_params(m, before, n));
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = tok + 1};
  gt_step_stats st;
  OK(gt_trainer_step_batches(t, &b, 1, &st));
  OK(gt_model_get_grads(m, g, n));
  OK(gt_model_get_params(m, after, n));
  assert_true(st.grad_norm > 0.01);
  double scale = 0.5 * 0.01 / (st.grad_norm + 1e-6), worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((before[i] - after[i]) - scale * g[i]);
    if (d > worst) worst = d;
  }
  assert_true(worst < 1e-7);
  free(before);
  free(after);
  free(g);
  gt_trainer_destroy(t);
  gt_model_destroy(m);
}

static void test_metrics_file_and_steady_state_memory(void **state) {
  (void)state;
  char path[] = "/tmp/giant-metrics-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  enum { V = 19, T = 8, B = 2 };
  int32_t tok[B * T + 1];
  tokens(tok, B * T + 1, V, 1);
  run r = make_run(V, T, 16, 2, 1, B, 1, GT_OPTIM_ADAMW, 1e-3f, path);
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = tok + 1};
  OK(gt_trainer_step_batches(r.t, &b, 1, NULL));
  gt_arena *ar = gt_model_arena(r.m);
  size_t allocs = gt_arena_device_allocs(ar), peak = gt_arena_peak(ar);
  for (int i = 0; i < 3; i++) OK(gt_trainer_step_batches(r.t, &b, 1, NULL));
  assert_int_equal(gt_arena_device_allocs(ar), allocs); /* no allocation in the steady state */
  assert_int_equal(gt_arena_peak(ar), peak);
  assert_true(gt_arena_current(ar) >= 4 * gt_model_param_count(r.m) * sizeof(float)); /* params, grads, m, v */
  free_run(&r);
  FILE *f = fopen(path, "r");
  char line[1024];
  int lines = 0;
  while (fgets(line, sizeof line, f)) {
    assert_non_null(strstr(line, "\"step\":"));
    assert_non_null(strstr(line, "\"loss\":"));
    assert_non_null(strstr(line, "\"tokens_per_s\":"));
    assert_non_null(strstr(line, "\"mfu\":"));
    assert_true(line[0] == '{' && line[strlen(line) - 2] == '}');
    lines++;
  }
  fclose(f);
  unlink(path);
  assert_int_equal(lines, 4);
}

static void test_arena_counts_and_budget(void **state) {
  (void)state;
  gt_arena *a;
  OK(gt_arena_create(be, 1 << 20, &a));
  void *p, *q;
  OK(gt_arena_alloc(a, 1000, &p));
  assert_int_equal(gt_arena_current(a), 1024);
  OK(gt_arena_alloc(a, 300000, &q));
  size_t peak = gt_arena_peak(a);
  gt_arena_free(a, q);
  assert_int_equal(gt_arena_current(a), 1024);
  assert_int_equal(gt_arena_peak(a), peak);
  OK(gt_arena_alloc(a, 299000, &q)); /* same class: served from the cache */
  assert_int_equal(gt_arena_device_allocs(a), 2);
  void *r;
  assert_int_equal(gt_arena_alloc(a, 900000, &r), GT_ENOMEM);
  assert_non_null(strstr(gt_last_error(), "budget"));
  gt_arena_free(a, q);
  gt_arena_free(a, p);
  assert_int_equal(gt_arena_current(a), 0);
  gt_arena_destroy(a);
}

static void test_bad_trainer_config(void **state) {
  (void)state;
  gt_model *m;
  gt_model_config mc = {.B_max = 1, .T_max = 4, .seed = 1};
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = 5, .T_max = 4, .C = 4, .NH = 1, .L = 1, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  gt_trainer *t;
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW), .grad_accum = -1};
  assert_int_equal(gt_trainer_create(m, &tc, &t), GT_EINVAL);
  tc.grad_accum = 65;
  assert_int_equal(gt_trainer_create(m, &tc, &t), GT_EINVAL);
  tc.grad_accum = 1;
  tc.optim.beta2 = 1.0f;
  assert_int_equal(gt_trainer_create(m, &tc, &t), GT_EINVAL);
  gt_optim_kind k;
  assert_int_equal(gt_optim_parse("adam", &k), GT_EINVAL);
  gt_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_seed_gives_bit_identical_losses),
      cmocka_unit_test(test_tiny_model_overfits_one_batch_adamw),
      cmocka_unit_test(test_tiny_model_overfits_one_batch_sgd),
      cmocka_unit_test(test_gradient_accumulation_equals_the_larger_batch),
      cmocka_unit_test(test_schedule_and_clipping),
      cmocka_unit_test(test_clipping_scales_the_update),
      cmocka_unit_test(test_metrics_file_and_steady_state_memory),
      cmocka_unit_test(test_arena_counts_and_budget),
      cmocka_unit_test(test_bad_trainer_config),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
