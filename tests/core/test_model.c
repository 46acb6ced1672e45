/* Models end to end: the layers' wiring checked against finite differences
 * of the model's loss, shape errors, weight tying and bad batches. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/custom_layer/residual_mlp.h"
#include "examples/gpt/gpt.h"
#include "giant/giant.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

static gt_backend *be;

static int setup(void **state) {
  (void)state;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  return gt_backend_create(&c, &be) == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

static gt_model *tiny_gpt(int V, int T, int C, int NH, int L, int B, bool tie) {
  gt_model *m = NULL;
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 7};
  OK(gt_model_create(be, &mc, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = tie};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  return m;
}

static void random_tokens(int32_t *t, size_t n, int V, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = (int32_t)((seed >> 33) % (uint64_t)V);
  }
}

static double loss_of(gt_model *m, gt_acts *a, const gt_batch *b) {
  float loss;
  OK(gt_model_forward(m, a, b, &loss));
  return loss;
}

/* Every parameter's gradient, sampled, against central differences of the
 * whole model's mean loss. fp32 forward passes limit the precision, so the
 * tolerance is loose; the kernels are checked tightly in test_kernels. */
static void check_model_gradients(gt_model *m, const gt_batch *b, int valid) {
  gt_acts *a;
  OK(gt_acts_create(m, &a));
  size_t n = gt_model_buffer_floats(m);
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
  OK(gt_model_zero_grads(m));
  float loss;
  OK(gt_model_forward(m, a, b, &loss));
  OK(gt_model_backward(m, a, 1.0f / (float)valid));
  OK(gt_model_get_grads(m, g, n));
  OK(gt_model_get_params(m, p, n));
  int checked = 0, bad = 0;
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *pi = gt_model_param(m, i);
    if (pi->tied_to >= 0) continue;
    size_t step = pi->numel / 7 + 1;
    for (size_t j = 0; j < pi->numel; j += step) {
      size_t k = pi->offset + j;
      float orig = p[k], eps = 1e-3f;
      p[k] = orig + eps;
      OK(gt_model_set_params(m, p, n));
      double lp = loss_of(m, a, b);
      p[k] = orig - eps;
      OK(gt_model_set_params(m, p, n));
      double lm = loss_of(m, a, b);
      p[k] = orig;
      double fd = (lp - lm) / (2.0 * eps);
      if (fabs(fd - g[k]) > 2e-3 + 2e-2 * fabs(fd)) {
        bad++;
        print_message("%s[%zu]: backward %.6g, finite difference %.6g\n", pi->name, j, g[k], fd);
      }
      checked++;
    }
  }
  OK(gt_model_set_params(m, p, n));
  assert_true(checked > 40);
  assert_int_equal(bad, 0);
  free(p);
  free(g);
  gt_acts_destroy(a);
}

static void test_model_gradients_match_finite_differences(void **state) {
  (void)state;
  const int V = 13, T = 5, C = 12, NH = 3, L = 2, B = 2;
  gt_model *m = tiny_gpt(V, T, C, NH, L, B, true);
  int32_t tok[B * T + 1], targets[B * T];
  random_tokens(tok, B * T + 1, V, 3);
  memcpy(targets, tok + 1, sizeof targets);
  targets[4] = -1; /* one ignored target covers the mask */
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = targets};
  check_model_gradients(m, &b, B * T - 1);
  gt_model_destroy(m);
}

/* A layer type defined outside the library (examples/custom_layer) trains
 * through the same interface, gradients included. */
static void test_custom_layer_gradients_match_finite_differences(void **state) {
  (void)state;
  const int V = 10, T = 4, C = 6, B = 2;
  gt_model *m;
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 5};
  OK(gt_model_create(be, &mc, &m));
  OK(gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){V, C, T, true}, NULL));
  OK(gt_model_add(m, &residual_mlp_layer, "mlp", &(residual_mlp_config){C, 10}, NULL));
  OK(gt_model_add(m, &gt_linear_layer, "proj", &(gt_linear_config){C, C, true}, NULL));
  OK(gt_model_add(m, &gt_layernorm_layer, "ln", &(gt_layernorm_config){C}, NULL));
  OK(gt_model_add(m, &gt_lm_head_layer, "head", &(gt_lm_head_config){C, V, NULL}, NULL));
  OK(gt_model_build(m));
  int32_t tok[B * T + 1];
  random_tokens(tok, B * T + 1, V, 8);
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = tok + 1};
  check_model_gradients(m, &b, B * T);
  gt_model_destroy(m);
}

static void test_weight_tying_shares_storage_and_gradient(void **state) {
  (void)state;
  gt_model *tied = tiny_gpt(17, 4, 8, 2, 1, 1, true), *untied = tiny_gpt(17, 4, 8, 2, 1, 1, false);
  assert_int_equal(gt_model_param_count(untied) - gt_model_param_count(tied), 17 * 8);
  int head = -1, wte = -1;
  for (int i = 0; i < gt_model_num_params(tied); i++) {
    if (!strcmp(gt_model_param(tied, i)->name, "lm_head.w")) head = i;
    if (!strcmp(gt_model_param(tied, i)->name, "embed.wte")) wte = i;
  }
  assert_true(head >= 0 && wte >= 0);
  assert_int_equal(gt_model_param(tied, head)->tied_to, wte);
  assert_int_equal(gt_model_param(tied, head)->offset, gt_model_param(tied, wte)->offset);
  gt_model_destroy(tied);
  gt_model_destroy(untied);
}

static void test_shape_mismatch_between_layers_is_rejected(void **state) {
  (void)state;
  gt_model *m;
  gt_model_config mc = {.B_max = 1, .T_max = 4, .seed = 1};
  OK(gt_model_create(be, &mc, &m));
  gt_embedding_config e = {.vocab_size = 10, .C = 16, .T_max = 4, .positional = true};
  OK(gt_model_add(m, &gt_embedding_layer, "embed", &e, NULL));
  gt_linear_config lin = {.in = 16, .out = 8, .bias = true};
  OK(gt_model_add(m, &gt_linear_layer, "down", &lin, NULL));
  gt_layernorm_config ln = {.C = 16};
  assert_int_equal(gt_model_add(m, &gt_layernorm_layer, "ln", &ln, NULL), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "shape mismatch"));
  assert_non_null(strstr(gt_last_error(), "'down'"));
  /* A duplicate name, a bad head count, a model without a loss layer. */
  assert_int_equal(gt_model_add(m, &gt_linear_layer, "down", &lin, NULL), GT_EEXIST);
  gt_block_config blk = {.C = 8, .NH = 3};
  assert_int_equal(gt_model_add(m, &gt_block_layer, "h0", &blk, NULL), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "divisible"));
  assert_int_equal(gt_model_build(m), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "loss layer"));
  /* Tying to a layer that does not exist. */
  gt_lm_head_config h = {.C = 8, .vocab_size = 10, .tie_to = "nope"};
  assert_int_equal(gt_model_add(m, &gt_lm_head_layer, "head", &h, NULL), GT_ENOTFOUND);
  h.tie_to = NULL;
  OK(gt_model_add(m, &gt_lm_head_layer, "head", &h, NULL));
  assert_int_equal(gt_model_add(m, &gt_layernorm_layer, "after", &(gt_layernorm_config){.C = 1}, NULL), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "after the loss layer"));
  OK(gt_model_build(m));
  gt_model_destroy(m);
}

static void test_bad_batches_are_rejected(void **state) {
  (void)state;
  gt_model *m = tiny_gpt(11, 6, 8, 2, 1, 2, true);
  gt_acts *a;
  OK(gt_acts_create(m, &a));
  int32_t tok[2 * 8 + 1] = {0};
  gt_batch b = {.B = 2, .T = 8, .inputs = tok, .targets = tok + 1};
  assert_int_equal(gt_model_forward(m, a, &b, NULL), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "longer than"));
  b.T = 6;
  b.B = 3;
  assert_int_equal(gt_model_forward(m, a, &b, NULL), GT_EINVAL);
  b.B = 2;
  tok[5] = 11;
  assert_int_equal(gt_model_forward(m, a, &b, NULL), GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "id 11"));
  tok[5] = 0;
  tok[9] = -2;
  assert_int_equal(gt_model_forward(m, a, &b, NULL), GT_ERANGE);
  tok[9] = 0;
  /* Backward with no forward. */
  assert_int_equal(gt_model_backward(m, a, 1.0f), GT_ESTATE);
  /* The reported loss is the mean of -log p(target) over valid targets. */
  float loss, probs[11];
  int32_t tg[12];
  for (int i = 0; i < 12; i++) tg[i] = (i * 7 + 3) % 11;
  tg[3] = -1; /* ignored */
  b.targets = tg;
  OK(gt_model_forward(m, a, &b, &loss));
  double sum = 0;
  int valid = 0;
  for (int r = 0; r < 2; r++)
    for (int t = 0; t < 6; t++) {
      int target = tg[r * 6 + t];
      if (target < 0) continue;
      OK(gt_model_probs(m, a, r, t, probs));
      sum -= log(probs[target]);
      valid++;
    }
  assert_int_equal(valid, 11);
  assert_true(fabs(loss - sum / valid) < 1e-5);
  gt_acts_destroy(a);
  gt_model_destroy(m);
}

/* A forward with T shorter than T_max equals the first T positions of a full
 * forward: attention is causal, so later tokens cannot change earlier ones. */
static void test_short_sequences_match_prefix_of_long(void **state) {
  (void)state;
  const int V = 9, T = 7;
  gt_model *m = tiny_gpt(V, T, 8, 2, 2, 1, true);
  gt_acts *a;
  OK(gt_acts_create(m, &a));
  int32_t tok[T];
  random_tokens(tok, T, V, 11);
  float full[V], part[V];
  gt_batch b = {.B = 1, .T = T, .inputs = tok};
  OK(gt_model_forward(m, a, &b, NULL));
  OK(gt_model_probs(m, a, 0, 2, full));
  b.T = 3;
  OK(gt_model_forward(m, a, &b, NULL));
  OK(gt_model_probs(m, a, 0, 2, part));
  double sum = 0;
  for (int i = 0; i < V; i++) {
    assert_true(fabsf(full[i] - part[i]) <= 1e-6f);
    sum += part[i];
  }
  assert_true(fabs(sum - 1.0) < 1e-5);
  gt_acts_destroy(a);
  gt_model_destroy(m);
}

static void test_init_is_a_function_of_seed_name_and_index(void **state) {
  (void)state;
  float a = gt_init_value(1, "h0.qkv.w", 5, GT_INIT_NORMAL, 0.02f);
  assert_true(a == gt_init_value(1, "h0.qkv.w", 5, GT_INIT_NORMAL, 0.02f));
  assert_true(a != gt_init_value(2, "h0.qkv.w", 5, GT_INIT_NORMAL, 0.02f));
  assert_true(a != gt_init_value(1, "h1.qkv.w", 5, GT_INIT_NORMAL, 0.02f));
  /* Moments of the normal initialiser. */
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; i++) {
    double v = gt_init_value(9, "w", (size_t)i, GT_INIT_NORMAL, 0.5f);
    s += v;
    s2 += v * v;
  }
  assert_true(fabs(s / n) < 0.005);
  assert_true(fabs(sqrt(s2 / n) - 0.5) < 0.005);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_gradients_match_finite_differences),
      cmocka_unit_test(test_custom_layer_gradients_match_finite_differences),
      cmocka_unit_test(test_weight_tying_shares_storage_and_gradient),
      cmocka_unit_test(test_shape_mismatch_between_layers_is_rejected),
      cmocka_unit_test(test_bad_batches_are_rejected),
      cmocka_unit_test(test_short_sequences_match_prefix_of_long),
      cmocka_unit_test(test_init_is_a_function_of_seed_name_and_index),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
