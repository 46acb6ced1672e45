/* The Llama model (examples/llama) end to end on one process: every
 * parameter's gradient against central differences of the model's loss,
 * with grouped-query attention and multi-head attention, and the
 * configurations the block refuses. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/llama/llama.h"
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
 * whole model's mean loss (fp32 forwards: a loose tolerance, as in
 * test_model; the kernels are checked tightly in the kernel suite). */
static void check_gradients(gt_model *m, const gt_batch *b, int valid) {
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
  assert_true(checked > 60);
  assert_int_equal(bad, 0);
  free(p);
  free(g);
  gt_acts_destroy(a);
}

static void gradients_case(int NKV, float theta, float scale) {
  const int V = 13, T = 6, C = 16, NH = 4, L = 2, B = 2;
  gt_model *m = NULL;
  OK(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = T, .seed = 11}, &m));
  /* A larger init than Llama's 0.02, so attention and the MLP are far from
   * linear and every path's gradient matters. */
  llama_config lc = {.vocab_size = V,
                     .T_max = T,
                     .C = C,
                     .NH = NH,
                     .n_kv_heads = NKV,
                     .L = L,
                     .mlp_hidden = 24,
                     .rope_theta = theta,
                     .rope_scale = scale,
                     .init_std = 0.3f};
  OK(llama_add_layers(m, &lc));
  OK(gt_model_build(m));
  int32_t tok[B * T + 1], targets[B * T];
  random_tokens(tok, B * T + 1, V, 5);
  memcpy(targets, tok + 1, sizeof targets);
  targets[3] = -1;
  gt_batch b = {.B = B, .T = T, .inputs = tok, .targets = targets};
  check_gradients(m, &b, B * T - 1);
  gt_model_destroy(m);
}

static void test_llama_gradients_gqa(void **state) {
  (void)state;
  gradients_case(2, 0, 0); /* two query heads per key/value head, Llama 2's rotary base */
}

static void test_llama_gradients_mha_scaled_rope(void **state) {
  (void)state;
  gradients_case(0, 500000.0f, 4.0f); /* multi-head, Llama 3's base, linear scaling */
}

/* The names map onto Hugging Face LlamaForCausalLM's state dict. */
static void test_llama_parameter_names(void **state) {
  (void)state;
  gt_model *m = NULL;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 4, .seed = 1}, &m));
  llama_config lc = {.vocab_size = 10, .T_max = 4, .C = 8, .NH = 2, .n_kv_heads = 1, .L = 2, .mlp_hidden = 12};
  OK(llama_add_layers(m, &lc));
  OK(gt_model_build(m));
  static const char *const want[] = {
      "model.embed_tokens.wte",
      "model.layers.0.input_layernorm.weight",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight",
      "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.post_attention_layernorm.weight",
      "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight",
      "model.layers.0.mlp.down_proj.weight",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) assert_string_equal(gt_model_param(m, (int)i)->name, want[i]);
  int n = gt_model_num_params(m);
  assert_int_equal(n, 1 + 2 * 9 + 2);
  assert_string_equal(gt_model_param(m, n - 2)->name, "model.norm.weight");
  assert_string_equal(gt_model_param(m, n - 1)->name, "lm_head.w");
  const gt_param *k = gt_model_param(m, 3);
  assert_int_equal(k->global_shape[0], 4); /* n_kv_heads * head size */
  assert_int_equal(k->global_shape[1], 8);
  gt_model_destroy(m);
}

static void expect_refused(const gt_llama_block_config *bc, const char *what) {
  gt_model *m = NULL;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 4, .seed = 1}, &m));
  gt_status s = gt_model_add(m, &gt_llama_block_layer, "b", bc, NULL);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) fail_msg("%s: accepted", what);
  assert_int_equal(s, GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "llama block"));
  gt_model_destroy(m);
}

static void test_llama_block_refuses_bad_configs(void **state) {
  (void)state;
  expect_refused(&(gt_llama_block_config){.C = 8, .NH = 2, .n_kv_heads = 3, .mlp_hidden = 4}, "3 kv heads of 2");
  expect_refused(&(gt_llama_block_config){.C = 6, .NH = 2, .mlp_hidden = 4}, "odd head size");
  expect_refused(&(gt_llama_block_config){.C = 8, .NH = 3, .mlp_hidden = 4}, "C not divisible by NH");
  expect_refused(&(gt_llama_block_config){.C = 8, .NH = 2, .mlp_hidden = 0}, "no MLP width");
  expect_refused(&(gt_llama_block_config){.C = 8, .NH = 2, .mlp_hidden = 4, .rope_theta = 0.5f}, "theta below 1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_gradients_gqa),
      cmocka_unit_test(test_llama_gradients_mha_scaled_rope),
      cmocka_unit_test(test_llama_parameter_names),
      cmocka_unit_test(test_llama_block_refuses_bad_configs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
