/* Under bf16 an offloaded window holds the weights in the compute
 * precision.
 *
 * A GPT's matrix weights (gt_param_spec.matmul_only: the blocks' four
 * matrices, the LM head tied to the embedding table) go to the device in
 * bf16 alone, from the host's bf16 twin; the other parameters in fp32.
 * Checked here, in one process:
 *  - the window's bytes and a step's transfers are what the parameters
 *    add up to in each precision, counted from their shapes, and about half
 *    of fp32's (the slots shrink, the estimate follows, the device peak
 *    drops);
 *  - a matmul-only weight has no fp32 copy in its slot (gt_layer_param is
 *    NULL) and a norm's has both;
 *  - the parameters and the gradient norms after training are
 *    bit-identical to the same training without offloading, with AdamW
 *    (which writes the twin in the same pass) and with SGD (whose twin is
 *    converted before each fetch);
 *  - switching the precision lays the slots out again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/trainer.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

enum { V = 64, T = 8, C = 32, NH = 4, L = 6, ROWS = 2, STEPS = 4, ALL = 64 };

typedef struct run_out {
  float *params;
  double norms[STEPS]; /* the steps' gradient norms */
  size_t nfloats;
  gt_offload_stats os;
  size_t expect_weight_bytes; /* what the parameters add up to, as the window holds them */
  size_t tied_grad_bytes;     /* fp32 gradients of the tied parameters' second users */
  size_t grad_bytes;          /* fp32 gradients of every layer's parameters, tied users included */
  int fetched_layers;         /* layers with weights to fetch */
  size_t estimate_slots, peak;
} run_out;

/* Weight bytes of every layer as fetched under `prec`, from the shapes. */
static size_t weight_bytes_of(const gt_model *m, gt_precision prec, int *layers) {
  size_t bytes = 0;
  *layers = 0;
  for (int i = 0; i < gt_model_num_layers(m); i++) {
    const gt_layer *l = gt_model_layer(m, i);
    *layers += l->nparams > 0;
    for (int p = 0; p < l->nparams; p++) {
      const gt_param *pi = gt_layer_param_info(l, p);
      bool half = prec == GT_PRECISION_BF16 && pi->matmul_only;
      bytes += pi->numel * (half ? sizeof(uint16_t) : sizeof(float));
    }
  }
  return bytes;
}

/* Gradient bytes of every layer's parameters, or of the tied users' alone:
 * what a step brings back in with one micro-batch, since a tied
 * parameter's second user (the embedding, after the LM head) adds to what
 * the first one sent to the host. */
static size_t grad_bytes_of(const gt_model *m, bool tied_only) {
  size_t bytes = 0;
  for (int i = 0; i < gt_model_num_layers(m); i++) {
    const gt_layer *l = gt_model_layer(m, i);
    for (int p = 0; p < l->nparams; p++)
      if (!tied_only || gt_layer_param_info(l, p)->tied_to >= 0)
        bytes += gt_layer_param_info(l, p)->numel * sizeof(float);
  }
  return bytes;
}

static void run(gt_optim_kind optim, gt_precision prec, int window, run_out *out) {
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 42, .offload_window = window}, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(optim),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .precision = prec,
                          .schedule = (gt_lr_schedule){3e-3f, 3e-4f, 1, STEPS}};
  gt_trainer *tr;
  OK(gt_trainer_create(m, &tc, &tr));
  int32_t in[ROWS * T], tg[ROWS * T];
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < ROWS * T; i++) {
      in[i] = (i * 7 + s * 3) % V;
      tg[i] = (i * 5 + s + 1) % V;
    }
    gt_batch b = {.B = ROWS, .T = T, .inputs = in, .targets = tg};
    gt_step_stats st;
    OK(gt_trainer_step_batches(tr, &b, 1, &st));
    out->norms[s] = st.grad_norm;
  }
  if (window > 0) {
    out->os = gt_model_offload_stats(m);
    out->expect_weight_bytes = weight_bytes_of(m, prec, &out->fetched_layers);
    out->tied_grad_bytes = grad_bytes_of(m, true);
    out->grad_bytes = grad_bytes_of(m, false);
    gt_device_estimate e;
    OK(gt_model_device_estimate(m, 2, &e));
    out->estimate_slots = e.slots;
  }
  if (window == ALL) {
    /* Block 0 (layer 1) is in the window: its matrices in bf16 alone
     * under bf16, its norms always in fp32 with a bf16 copy beside. */
    const gt_layer *b0 = gt_model_layer(m, 1);
    int qkv = 2, ln1 = 0;
    assert_true(gt_layer_param_info(b0, qkv)->matmul_only && !gt_layer_param_info(b0, ln1)->matmul_only);
    assert_non_null(gt_layer_param(b0, ln1));
    if (prec == GT_PRECISION_BF16) {
      assert_null(gt_layer_param(b0, qkv));
      assert_non_null(gt_layer_param_bf16(b0, qkv));
      assert_non_null(gt_layer_param_bf16(b0, ln1));
    } else {
      assert_non_null(gt_layer_param(b0, qkv));
      assert_null(gt_layer_param_bf16(b0, qkv));
    }
  }
  if (window > 0) {
    /* Outside backward a block's word that its gradients are final sends
     * nothing; a range beyond its parameters is refused. */
    const gt_layer *b0 = gt_model_layer(m, 1);
    OK(gt_layer_grads_final(b0, 0, b0->nparams));
    assert_int_equal(gt_model_offload_stats(m).bytes_out, out->os.bytes_out);
    assert_int_equal(gt_layer_grads_final(b0, 2, b0->nparams - 1), GT_EINVAL);
    assert_int_equal(gt_layer_grads_final(b0, -1, 1), GT_EINVAL);
  }
  out->peak = gt_backend_mem(be).peak;
  out->nfloats = gt_model_buffer_floats(m);
  out->params = malloc(out->nfloats * sizeof(float));
  assert_non_null(out->params);
  OK(gt_model_get_params(m, out->params, out->nfloats));
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

static void test_window_in_compute_precision(void **state) {
  (void)state;
  run_out f32 = {0}, b16 = {0};
  run(GT_OPTIM_ADAMW, GT_PRECISION_FP32, ALL, &f32);
  run(GT_OPTIM_ADAMW, GT_PRECISION_BF16, ALL, &b16);
  print_message(
      "window of every layer: weights %zu bytes fp32, %zu bf16 (%.3f); slot %zu / %zu; "
      "fetched %llu / %llu bytes; device peak %zu / %zu\n",
      f32.os.weight_bytes, b16.os.weight_bytes, (double)b16.os.weight_bytes / (double)f32.os.weight_bytes,
      f32.os.slot_bytes, b16.os.slot_bytes, (unsigned long long)f32.os.bytes_in, (unsigned long long)b16.os.bytes_in,
      f32.peak, b16.peak);
  run_out *r[2] = {&f32, &b16};
  for (int k = 0; k < 2; k++) {
    /* A window of every layer fetches each layer once a step (after the
     * update, the first `window` of them at once); with one micro-batch a
     * step the only gradient that comes back in is the tied table's. */
    assert_int_equal(r[k]->os.weight_bytes, r[k]->expect_weight_bytes);
    assert_int_equal(r[k]->os.fetches % (uint64_t)r[k]->fetched_layers, 0);
    assert_true(r[k]->tied_grad_bytes > 0);
    assert_int_equal(r[k]->os.bytes_in, r[k]->os.fetches / (uint64_t)r[k]->fetched_layers * r[k]->os.weight_bytes +
                                            (uint64_t)STEPS * r[k]->tied_grad_bytes);
    assert_true(r[k]->os.fetches >= (uint64_t)STEPS * (uint64_t)r[k]->fetched_layers);
    /* Every layer's gradients go back once a backward, whether a block
     * sends part of them before its backward ends or not. */
    assert_int_equal(r[k]->os.bytes_out, (uint64_t)STEPS * r[k]->grad_bytes);
  }
  /* The blocks' matrices are most of this GPT: about half the bytes. */
  assert_true(b16.os.weight_bytes < 0.6 * (double)f32.os.weight_bytes);
  assert_true(b16.os.slot_bytes < 0.6 * (double)f32.os.slot_bytes);
  assert_true(b16.estimate_slots < f32.estimate_slots);
  assert_true(b16.peak < f32.peak);
  free(f32.params);
  free(b16.params);
}

/* The bf16 bits the window holds are the fp32 master's, whoever made
 * them: AdamW in its update pass, or a conversion before the fetch. */
static void test_same_bits_as_without(void **state) {
  (void)state;
  static const gt_optim_kind optims[] = {GT_OPTIM_ADAMW, GT_OPTIM_SGD};
  static const int windows[] = {1, 2, ALL};
  for (int o = 0; o < 2; o++) {
    run_out ref = {0};
    run(optims[o], GT_PRECISION_BF16, 0, &ref);
    for (int w = 0; w < 3; w++) {
      run_out r = {0};
      run(optims[o], GT_PRECISION_BF16, windows[w], &r);
      assert_int_equal(r.nfloats, ref.nfloats);
      /* The norm too: offloaded, it is summed as the gradients come back. */
      assert_memory_equal(r.norms, ref.norms, sizeof r.norms);
      if (memcmp(r.params, ref.params, ref.nfloats * sizeof(float)))
        fail_msg("%s, window %d: parameters differ from the run without offloading",
                 optims[o] == GT_OPTIM_ADAMW ? "AdamW" : "SGD", windows[w]);
      free(r.params);
    }
    free(ref.params);
  }
}

/* Switching the precision of a built offloaded model lays its slots out
 * again, both ways. */
static void test_precision_switch(void **state) {
  (void)state;
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 42, .offload_window = 2}, &m));
  gpt_config gc = {.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true};
  OK(gpt_add_layers(m, &gc));
  OK(gt_model_build(m));
  int layers;
  gt_offload_stats a = gt_model_offload_stats(m);
  assert_int_equal(a.weight_bytes, weight_bytes_of(m, GT_PRECISION_FP32, &layers));
  gt_device_estimate ea, eb, ec;
  OK(gt_model_device_estimate(m, 2, &ea));
  OK(gt_model_set_precision(m, GT_PRECISION_BF16));
  OK(gt_model_device_estimate(m, 2, &eb));
  gt_offload_stats b = gt_model_offload_stats(m);
  assert_int_equal(b.weight_bytes, weight_bytes_of(m, GT_PRECISION_BF16, &layers));
  assert_true(b.slot_bytes < a.slot_bytes);
  assert_true(eb.slots < ea.slots);
  OK(gt_model_set_precision(m, GT_PRECISION_FP32));
  OK(gt_model_device_estimate(m, 2, &ec));
  gt_offload_stats c = gt_model_offload_stats(m);
  assert_int_equal(c.slot_bytes, a.slot_bytes);
  assert_int_equal(c.weight_bytes, a.weight_bytes);
  assert_int_equal(ec.slots, ea.slots);
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_in_compute_precision),
      cmocka_unit_test(test_same_bits_as_without),
      cmocka_unit_test(test_precision_switch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
