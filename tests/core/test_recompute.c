/* Activation recomputation in one process: training with the attention
 * core or whole layers computed again in backward gives the losses, the
 * gradients of every step and the final parameters of training that keeps
 * every activation, bit for bit (AdamW, fp32 and bf16, offloaded, modes
 * mixed by scopes); the activations of a micro-batch shrink by exactly the
 * saved tensors of the layers recomputed, with the model's one shared area
 * counted once; and unknown modes, in the flag, the config or a scope, fail
 * with a message that names the modes there are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "giant/giant.h"
#include "core/arena.h"
#include "core/model/model_internal.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"
#include "giant/run.h"

enum { V = 61, T = 16, B = 4, C = 32, NH = 4, L = 3, M = 2, STEPS = 4 };

static gt_backend *be;

static int setup(void **state) {
  (void)state;
  gt_backend_config c = {.kind = GT_DEVICE_CPU, .num_threads = 2};
  if (gt_backend_create(&c, &be) != GT_OK) return -1;
  gt_backend_set_peak_flops(be, 1e9); /* MFU is not under test */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gt_backend_destroy(be);
  return 0;
}

/* How a run recomputes: the model's default, and optionally a scope with
 * its own mode around the blocks from `lo` to `hi`. */
typedef struct how {
  gt_recompute mode;
  int scope_lo, scope_hi; /* block indices; scope_hi < scope_lo: no scope */
  gt_recompute scope_mode;
  int offload;
  gt_precision precision;
} how;

static gt_status add_layers(gt_model *m, const how *h, int nblocks) {
  gt_embedding_config emb = {.vocab_size = V, .C = C, .T_max = T, .positional = true};
  GT_TRY(gt_model_add(m, &gt_embedding_layer, "embed", &emb, NULL));
  for (int i = 0; i < nblocks; i++) {
    char name[16];
    snprintf(name, sizeof name, "h%d", i);
    if (i == h->scope_lo && h->scope_hi >= h->scope_lo)
      GT_TRY(gt_model_scope_begin(m, GT_SCOPE_RECOMPUTE, (int)h->scope_mode));
    gt_block_config blk = {.C = C, .NH = NH, .n_layers_total = nblocks};
    GT_TRY(gt_model_add(m, &gt_block_layer, name, &blk, NULL));
    if (i == h->scope_hi && h->scope_hi >= h->scope_lo) GT_TRY(gt_model_scope_end(m));
  }
  gt_layernorm_config lnf = {.C = C};
  GT_TRY(gt_model_add(m, &gt_layernorm_layer, "ln_f", &lnf, NULL));
  gt_lm_head_config head = {.C = C, .vocab_size = V, .tie_to = "embed"};
  return gt_model_add(m, &gt_lm_head_layer, "lm_head", &head, NULL);
}

static gt_model *make_model(const how *h, int nblocks) {
  gt_model *m;
  gt_model_config mc = {
      .B_max = B, .T_max = T, .seed = 77, .offload_window = h->offload ? h->offload : -1, .recompute = h->mode};
  OK(gt_model_create(be, &mc, &m));
  OK(add_layers(m, h, nblocks));
  OK(gt_model_build(m));
  return m;
}

static gt_trainer *make_trainer(gt_model *m, gt_precision p) {
  gt_trainer *t;
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = M,
                          .precision = p,
                          .schedule = {.lr_max = 3e-3f, .lr_min = 3e-4f, .warmup = 1, .total = STEPS}};
  OK(gt_trainer_create(m, &tc, &t));
  return t;
}

static int32_t tok[M * B * T + 64];

static void make_tokens(void) {
  uint64_t s = 9;
  for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((s >> 33) % V);
  }
}

/* Micro-batch k of step s: windows of the same token stream. */
static gt_batch batch(int s, int k) {
  int32_t *p = tok + ((s * 7 + k * B * T) % 48);
  return (gt_batch){.B = B, .T = T, .inputs = p, .targets = p + 1};
}

static float *get(gt_model *m, bool grads) {
  size_t n = gt_model_buffer_floats(m);
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  OK(grads ? gt_model_get_grads(m, x, n) : gt_model_get_params(m, x, n));
  return x;
}

static void same_bits(gt_model *ref, gt_model *m, bool grads, const char *what, int step) {
  size_t n = gt_model_buffer_floats(ref);
  assert_int_equal(n, gt_model_buffer_floats(m));
  float *a = get(ref, grads), *b = get(m, grads);
  if (memcmp(a, b, n * sizeof *a)) {
    size_t i = 0;
    while (a[i] == b[i]) i++;
    fail_msg("%s, step %d: %s differ first at float %zu (%.9g vs %.9g)", what, step, grads ? "gradients" : "parameters",
             i, a[i], b[i]);
  }
  free(a);
  free(b);
}

/* Trains the reference (no recomputation, the same offloading and
 * precision) and the run side by side: every step's loss and gradient
 * norm, the gradients after every step and the final parameters agree bit
 * for bit. */
static void same_training(const how *h, const char *what) {
  how none = {.mode = GT_RECOMPUTE_NONE, .scope_hi = -1, .offload = h->offload, .precision = h->precision};
  gt_model *ref = make_model(&none, L), *m = make_model(h, L);
  gt_trainer *tr = make_trainer(ref, h->precision), *tm = make_trainer(m, h->precision);
  float first = 0, last = 0;
  for (int s = 0; s < STEPS; s++) {
    gt_batch b[M];
    for (int k = 0; k < M; k++) b[k] = batch(s, k);
    gt_step_stats sr, sm;
    OK(gt_trainer_step_batches(tr, b, M, &sr));
    OK(gt_trainer_step_batches(tm, b, M, &sm));
    if (memcmp(&sr.loss, &sm.loss, sizeof sr.loss) || memcmp(&sr.grad_norm, &sm.grad_norm, sizeof sr.grad_norm))
      fail_msg("%s, step %d: loss %.9g norm %.9g, want %.9g and %.9g", what, s, sm.loss, sm.grad_norm, sr.loss,
               sr.grad_norm);
    same_bits(ref, m, true, what, s);
    if (s == 0) first = sm.loss;
    last = sm.loss;
  }
  same_bits(ref, m, false, what, STEPS);
  print_message("%-24s loss %.4f -> %.4f, bit-identical\n", what, first, last);
  gt_trainer_destroy(tm);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_model_destroy(ref);
}

static void test_fp32(void **state) {
  (void)state;
  same_training(&(how){.mode = GT_RECOMPUTE_NONE, .scope_hi = -1}, "none");
  same_training(&(how){.mode = GT_RECOMPUTE_ATTENTION, .scope_hi = -1}, "attention");
  same_training(&(how){.mode = GT_RECOMPUTE_BLOCK, .scope_hi = -1}, "block");
}

static void test_bf16(void **state) {
  (void)state;
  same_training(&(how){.mode = GT_RECOMPUTE_ATTENTION, .scope_hi = -1, .precision = GT_PRECISION_BF16},
                "bf16 attention");
  same_training(&(how){.mode = GT_RECOMPUTE_BLOCK, .scope_hi = -1, .precision = GT_PRECISION_BF16}, "bf16 block");
}

/* Offloaded with a window of 2 of the 6 layers, backward refetches the
 * layers it recomputes; and with bf16, the window holds bf16 matrices. */
static void test_offload(void **state) {
  (void)state;
  same_training(&(how){.mode = GT_RECOMPUTE_BLOCK, .scope_hi = -1, .offload = 2}, "offload block");
  same_training(&(how){.mode = GT_RECOMPUTE_ATTENTION, .scope_hi = -1, .offload = 2}, "offload attention");
  same_training(&(how){.mode = GT_RECOMPUTE_BLOCK, .scope_hi = -1, .offload = 2, .precision = GT_PRECISION_BF16},
                "offload bf16 block");
}

/* Scopes: the innermost mode wins over the model's default, layer by
 * layer, and the mix trains alike. */
static void test_scopes(void **state) {
  (void)state;
  how h = {.mode = GT_RECOMPUTE_BLOCK, .scope_lo = 1, .scope_hi = 1, .scope_mode = GT_RECOMPUTE_ATTENTION};
  gt_model *m = make_model(&h, L);
  const gt_recompute want[] = {GT_RECOMPUTE_BLOCK, GT_RECOMPUTE_BLOCK, GT_RECOMPUTE_ATTENTION,
                               GT_RECOMPUTE_BLOCK, GT_RECOMPUTE_BLOCK, GT_RECOMPUTE_BLOCK};
  for (int i = 0; i < gt_model_num_layers(m); i++) assert_int_equal(gt_layer_recompute(gt_model_layer(m, i)), want[i]);
  /* Whole: the blocks other than h1 and the final LayerNorm; the
   * embedding saves nothing and the loss layer keeps its own. */
  const bool whole[] = {false, true, false, true, true, false};
  for (int i = 0; i < gt_model_num_layers(m); i++) assert_int_equal(gt_model_recomputes(m, i), whole[i]);
  gt_model_destroy(m);
  same_training(&h, "block, h1 attention");
  same_training(&(how){.mode = GT_RECOMPUTE_NONE, .scope_lo = 0, .scope_hi = 1, .scope_mode = GT_RECOMPUTE_BLOCK},
                "none, h0..h1 block");
}

static size_t block_bytes(size_t floats) { return gt_arena_block_size(floats * sizeof(float)); }

/* A micro-batch's activation bytes, the attention part with them. */
static size_t acts_bytes(const gt_model *m) {
  size_t acts = 0, attn = 0;
  gt_acts_device_bytes(m, &acts, &attn);
  return acts + attn;
}

/* A 12-block model: block recomputation keeps of a micro-batch exactly
 * what keeping everything does less the saved tensors of the layers it
 * recomputes, under a third of it, and the shared area, counted once in
 * the estimate, holds the largest of them and its output. */
static void test_activation_bytes(void **state) {
  (void)state;
  enum { BLOCKS = 12 };
  gt_model *none = make_model(&(how){.mode = GT_RECOMPUTE_NONE, .scope_hi = -1}, BLOCKS);
  gt_model *blk = make_model(&(how){.mode = GT_RECOMPUTE_BLOCK, .scope_hi = -1}, BLOCKS);
  gt_model *att = make_model(&(how){.mode = GT_RECOMPUTE_ATTENTION, .scope_hi = -1}, BLOCKS);
  size_t all = acts_bytes(none), dropped = 0, largest = 0, widest = 0, att_saved = 0;
  for (int i = 0; i < gt_model_num_layers(none); i++) {
    const gt_layer *l = gt_model_layer(none, i), *la = gt_model_layer(att, i);
    size_t n = l->type->acts_floats(l, B, T);
    if (gt_model_recomputes(blk, i)) {
      dropped += block_bytes(n);
      largest = n > largest ? n : largest;
      widest = (size_t)l->out_dim > widest ? (size_t)l->out_dim : widest;
    }
    size_t na = la->type->acts_floats(la, B, T);
    if (!strcmp(l->type->name, "block")) {
      assert_true(na < n); /* the attention core is not saved */
      att_saved += block_bytes(n) - block_bytes(na);
    } else {
      assert_int_equal(na, n); /* other layers keep everything */
    }
  }
  assert_true(dropped > 0);
  size_t rc = acts_bytes(blk);
  print_message("activations of a micro-batch: none %zu bytes, attention %zu, block %zu (+ %zu shared once)\n", all,
                acts_bytes(att), rc, gt_model_recompute_bytes(blk));
  assert_int_equal(rc, all - dropped);
  assert_true(3 * rc < all);
  assert_int_equal(acts_bytes(att), all - att_saved);
  assert_int_equal(gt_model_recompute_bytes(none), 0);
  assert_int_equal(gt_model_recompute_bytes(blk), block_bytes(largest) + block_bytes(widest * B * T));
  gt_device_estimate en, eb;
  OK(gt_model_device_estimate(none, 2, &en));
  OK(gt_model_device_estimate(blk, 2, &eb));
  assert_int_equal(eb.activations, rc);
  assert_int_equal(eb.recompute, gt_model_recompute_bytes(blk));
  assert_int_equal(en.recompute, 0);
  assert_int_equal(en.total - eb.total, dropped - eb.recompute);
  /* What the arena holds with one micro-batch's activations agrees. */
  gt_arena *ar = gt_model_arena(blk);
  size_t before = gt_arena_current(ar);
  gt_acts *a;
  OK(gt_acts_create(blk, &a));
  assert_int_equal(gt_arena_current(ar) - before, rc);
  gt_acts_destroy(a);
  gt_model_destroy(att);
  gt_model_destroy(blk);
  gt_model_destroy(none);
}

static void test_unknown_modes(void **state) {
  (void)state;
  gt_recompute r;
  expect_error(gt_recompute_parse("full", &r), GT_EINVAL, "'full': use none");
  OK(gt_recompute_parse("attention", &r));
  assert_int_equal(r, GT_RECOMPUTE_ATTENTION);
  assert_string_equal(gt_recompute_name(GT_RECOMPUTE_BLOCK), "block");
  gt_model *m;
  expect_error(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = T, .recompute = 3}, &m), GT_EINVAL,
               "unknown recomputation mode 3");
  OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = T}, &m));
  gt_embedding_config emb = {.vocab_size = V, .C = C, .T_max = T, .positional = true};
  OK(gt_model_add(m, &gt_embedding_layer, "embed", &emb, NULL));
  expect_error(gt_model_scope_begin(m, GT_SCOPE_RECOMPUTE, 3), GT_EINVAL,
               "recompute(3) after layer 'embed': unknown recomputation mode");
  gt_model_destroy(m);
  /* The run's flag: usage status, and the message names the flag. */
  char *argv[] = {"test_recompute", "--recompute", "full", NULL};
  gt_run_options o;
  gt_run_options_init(&o);
  assert_int_equal(gt_run_parse(3, argv, NULL, NULL, 0, &o), GT_RUN_EXIT_USAGE);
  assert_non_null(strstr(gt_last_error(), "--recompute: unknown recomputation mode 'full'"));
  char *good[] = {"test_recompute", "--recompute", "block", NULL};
  gt_run_options_init(&o);
  assert_int_equal(gt_run_parse(3, good, NULL, NULL, 0, &o), -1);
  assert_string_equal(o.recompute, "block");
}

int main(void) {
  make_tokens();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp32),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_offload),
      cmocka_unit_test(test_scopes),
      cmocka_unit_test(test_activation_bytes),
      cmocka_unit_test(test_unknown_modes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
