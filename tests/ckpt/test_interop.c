/* Hugging Face's GPT2LMHeadModel and LlamaForCausalLM (transformers, on
 * PyTorch) against Giant, through safetensors files, with
 * hf_gpt2_reference.py and hf_llama_reference.py as the independent
 * references:
 *   - a random model made there and imported here gives the same
 *     log-probabilities (within 1e-5) and loss, tied and untied (and a
 *     tied model refuses the untied file);
 *   - imported at tp=2 and at pp=2, every rank holds its exact slice of the
 *     same weights, and the first step's loss is the one process's;
 *   - a model trained 20 steps here, exported with giant-ckpt, loads there
 *     and gives the same log-probabilities and loss;
 *   - the same for examples/llama's model with grouped-query attention
 *     (hf-llama): imported, with a configuration of other heads or another
 *     rotary base refused, and trained by examples/llama then exported.
 * Skipped (77) without a python3 that has torch, transformers and
 * safetensors (tools/deps.sh giant_install_py_deps). Nothing is downloaded. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "ckpt/hf.h"
#include "common/gt_skip.h"
#include "common/run_cmd.h"
#include "examples/gpt/gpt.h"
#include "examples/llama/llama.h"
#include "giant/engine/model.h"

enum { B = 2 };
#define TOL 1e-5

static const char *python; /* the first with the packages, or NULL */
static char script[4200], lscript[4200], tool[512], llama_bin[512], giantrun[512];

static void find_python(void) {
  static const char *const candidates[] = {GT_PYTHON3, "/usr/bin/python3"};
  snprintf(script, sizeof script, "%s/tests/ckpt/hf_gpt2_reference.py", GT_SOURCE_DIR);
  snprintf(lscript, sizeof lscript, "%s/tests/ckpt/hf_llama_reference.py", GT_SOURCE_DIR);
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    if (!candidates[i][0] || access(candidates[i], X_OK) != 0) continue;
    char *argv[] = {(char *)candidates[i], "-c", "import torch, transformers, safetensors", NULL};
    static run_result r;
    run_cmd(argv, NULL, 300, &r);
    if (r.exit_code == 0) {
      python = candidates[i];
      return;
    }
  }
}

static void py_with(const char *scr, char *const args[], int n) {
  char *argv[16] = {(char *)python, (char *)scr};
  for (int i = 0; i < n; i++) argv[2 + i] = args[i];
  argv[2 + n] = NULL;
  static run_result r;
  run_cmd(argv, NULL, 600, &r); /* importing torch takes seconds; 600 s for a loaded machine */
  if (r.exit_code != 0) run_fail(&r, "%s %s: exit %d", scr, args[0], r.exit_code);
}

static void py(char *const args[], int n) { py_with(script, args, n); }

/* A fixed batch: inputs and their next tokens as targets. */
static void batch(int32_t *in, int32_t *tg) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < CR_T; t++) {
      in[b * CR_T + t] = (7 * b + 5 * t * t + 3) % CR_V;
      tg[b * CR_T + t] = (7 * b + 5 * (t + 1) * (t + 1) + 3) % CR_V;
    }
}

static void write_batch(const char *path, const int32_t *in, const int32_t *tg) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  int32_t hdr[2] = {B, CR_T};
  assert_int_equal(fwrite(hdr, sizeof hdr, 1, f), 1);
  assert_int_equal(fwrite(in, sizeof(int32_t), B * CR_T, f), B * CR_T);
  assert_int_equal(fwrite(tg, sizeof(int32_t), B * CR_T, f), B * CR_T);
  assert_int_equal(fclose(f), 0);
}

/* Transformers' log-probabilities of the batch for the model in dir, and its loss. */
static float *hf_logp_with(const char *scr, const char *dir, const char *tag, float *loss) {
  char bpath[4300], opath[4300];
  int32_t in[B * CR_T], tg[B * CR_T];
  batch(in, tg);
  snprintf(bpath, sizeof bpath, "%s.%s.batch", cr_fx.data, tag);
  snprintf(opath, sizeof opath, "%s.%s.logp", cr_fx.data, tag);
  write_batch(bpath, in, tg);
  py_with(scr, (char *[]){"run", (char *)dir, bpath, opath}, 4);
  size_t n = (size_t)B * CR_T * CR_V;
  float *logp = malloc((n + 1) * sizeof *logp);
  FILE *f = fopen(opath, "rb");
  assert_non_null(f);
  assert_int_equal(fread(logp, sizeof(float), n + 1, f), n + 1);
  fclose(f);
  *loss = logp[n];
  unlink(bpath);
  unlink(opath);
  return logp;
}

static float *hf_logp(const char *dir, const char *tag, float *loss) { return hf_logp_with(script, dir, tag, loss); }

static gt_model *new_model(gt_backend *be, bool tied) {
  gt_model *m;
  assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = CR_T, .seed = 9}, &m), GT_OK);
  gpt_config gc = {.vocab_size = CR_V, .T_max = CR_T, .C = CR_C, .NH = CR_NH, .L = CR_L, .tie_weights = tied};
  assert_int_equal(gpt_add_layers(m, &gc), GT_OK);
  assert_int_equal(gt_model_build(m), GT_OK);
  return m;
}

/* Giant's log-probabilities of the batch against the reference's. */
static void compare(gt_model *m, const float *ref, float ref_loss, const char *what) {
  int32_t in[B * CR_T], tg[B * CR_T];
  batch(in, tg);
  gt_acts *a;
  assert_int_equal(gt_acts_create(m, &a), GT_OK);
  gt_batch b = {.B = B, .T = CR_T, .inputs = in, .targets = tg};
  float loss, probs[CR_V];
  assert_int_equal(gt_model_forward(m, a, &b, &loss), GT_OK);
  double worst = 0;
  for (int r = 0; r < B; r++)
    for (int t = 0; t < CR_T; t++) {
      assert_int_equal(gt_model_probs(m, a, r, t, probs), GT_OK);
      for (int v = 0; v < CR_V; v++) {
        double e = fabs(log((double)probs[v]) - ref[((size_t)r * CR_T + t) * CR_V + v]);
        worst = e > worst ? e : worst;
      }
    }
  gt_acts_destroy(a);
  print_message("%s: largest log-probability difference %.2e, loss %.7f (transformers %.7f)\n", what, worst, loss,
                ref_loss);
  if (worst > TOL || fabs(loss - ref_loss) > TOL)
    fail_msg("%s: log-probabilities differ by %.2e and losses by %.2e (tolerance %.0e)", what, worst,
             fabs(loss - ref_loss), TOL);
}

static char *make_hf(const char *tag, bool tied, int seed) {
  char *dir = cr_fixture_dir(tag), V[16], T[16], C[16], L[16], NH[16], tie[4], sd[16];
  snprintf(V, sizeof V, "%d", CR_V);
  snprintf(T, sizeof T, "%d", CR_T);
  snprintf(C, sizeof C, "%d", CR_C);
  snprintf(L, sizeof L, "%d", CR_L);
  snprintf(NH, sizeof NH, "%d", CR_NH);
  snprintf(tie, sizeof tie, "%d", tied);
  snprintf(sd, sizeof sd, "%d", seed);
  py((char *[]){"make", dir, V, T, C, L, NH, tie, sd}, 9);
  return dir;
}

static void import_case(bool tied) {
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  char *dir = make_hf(tied ? "hf-tied" : "hf-untied", tied, tied ? 1 : 2);
  float loss;
  float *ref = hf_logp(dir, "import", &loss);
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  gt_model *m = new_model(be, tied);
  gt_status s = ck_hf_import(m, dir, "hf-gpt2");
  if (s != GT_OK) fail_msg("importing %s: %s", dir, gt_last_error());
  compare(m, ref, loss, tied ? "imported, tied" : "imported, untied");
  /* A model of another configuration is refused, naming the tensor. */
  gt_model *wide;
  assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = CR_T, .seed = 9}, &wide), GT_OK);
  gpt_config gc = {.vocab_size = CR_V, .T_max = CR_T, .C = 2 * CR_C, .NH = CR_NH, .L = CR_L, .tie_weights = tied};
  assert_int_equal(gpt_add_layers(wide, &gc), GT_OK);
  assert_int_equal(gt_model_build(wide), GT_OK);
  assert_int_equal(ck_hf_import(wide, dir, "hf-gpt2"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "transformer.wte.weight is 64x32 and the model's embed.wte needs 64x64"));
  gt_model_destroy(wide);
  if (!tied) { /* a tied model cannot take two matrices */
    gt_model *t = new_model(be, true);
    assert_int_equal(ck_hf_import(t, dir, "hf-gpt2"), GT_EFORMAT);
    assert_non_null(strstr(gt_last_error(), "lm_head.weight apart from its embedding"));
    gt_model_destroy(t);
  }
  gt_model_destroy(m);
  gt_backend_destroy(be);
  free(ref);
  cr_rmtree(dir);
  free(dir);
}

static void test_import_tied(void **state) {
  (void)state;
  import_case(true);
}

static void test_import_untied(void **state) {
  (void)state;
  import_case(false);
}

/* The same file imported at tp=2 and pp=2: the ranks' slices put together
 * are the one process's weights exactly, and the first step's loss agrees. */
static void test_import_layouts(void **state) {
  (void)state;
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  char *dir = make_hf("hf-layouts", true, 3);
  cr_cfg one = {.data = cr_fx.data,
                .dir = "/nonexistent-unused",
                .s1 = 1,
                .init_from = dir,
                .loaded = cr_state_new(cr_fx.layout),
                .final = cr_state_new(cr_fx.layout)};
  cr_run(1, &one);
  static const char *const layouts[] = {"tp=2", "pp=2"};
  for (int i = 0; i < 2; i++) {
    cr_cfg c = {.layout = layouts[i],
                .data = cr_fx.data,
                .dir = "/nonexistent-unused",
                .s1 = 1,
                .init_from = dir,
                .loaded = cr_state_new(cr_fx.layout),
                .final = cr_state_new(cr_fx.layout)};
    cr_run(2, &c);
    size_t n = cr_fx.layout->nparams;
    for (size_t k = 0; k < n; k++)
      if (c.loaded.p->params[k] != one.loaded.p->params[k])
        fail_msg("%s: float %zu of the imported weights is %g, and %g in one process", layouts[i], k,
                 (double)c.loaded.p->params[k], (double)one.loaded.p->params[k]);
    print_message("%s: first loss %.7f, one process %.7f\n", layouts[i], c.final.p->losses[0], one.final.p->losses[0]);
    assert_true(fabs(c.final.p->losses[0] - one.final.p->losses[0]) <= TOL);
  }
  cr_rmtree(dir);
  free(dir);
}

/* Trained here, exported by giant-ckpt, read by transformers. */
static void test_export_loads_in_hf(void **state) {
  (void)state;
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  char *ck = cr_fixture_dir("trained"), *out = cr_fixture_dir("exported"), step[4300];
  cr_cfg c = {.data = cr_fx.data, .dir = ck, .s1 = CR_STEPS, .save_at = CR_STEPS, .final = cr_state_new(cr_fx.layout)};
  cr_run(1, &c);
  snprintf(step, sizeof step, "%s/step-%08d", ck, CR_STEPS);
  static run_result r;
  char heads[16];
  snprintf(heads, sizeof heads, "%d", CR_NH);
  char *argv[] = {tool, "export", "--format", "safetensors", "--names", "hf-gpt2", "--heads", heads, ck, out, NULL};
  run_cmd(argv, NULL, 120, &r);
  if (r.exit_code != 0) run_fail(&r, "giant-ckpt export: exit %d", r.exit_code);
  float loss;
  float *ref = hf_logp(out, "export", &loss);
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  gt_model *m = new_model(be, true);
  assert_int_equal(gt_model_buffer_floats(m), cr_fx.layout->nparams);
  assert_int_equal(gt_model_set_params(m, c.final.p->params, cr_fx.layout->nparams), GT_OK);
  compare(m, ref, loss, "trained 20 steps, exported");
  /* And back: the exported file imported gives the trained weights exactly. */
  gt_model *back = new_model(be, true);
  assert_int_equal(ck_hf_import(back, out, "hf-gpt2"), GT_OK);
  float *p = malloc(cr_fx.layout->nparams * sizeof *p);
  assert_int_equal(gt_model_get_params(back, p, cr_fx.layout->nparams), GT_OK);
  assert_memory_equal(p, c.final.p->params, cr_fx.layout->nparams * sizeof *p);
  free(p);
  gt_model_destroy(back);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  free(ref);
  cr_rmtree(ck);
  cr_rmtree(out);
  free(ck);
  free(out);
}

/* The Llama's: grouped-query attention, two query heads to a key/value
 * head, an MLP width of its own. */
enum { LL_NKV = CR_NH / 2, LL_H = 48 };

static gt_model *new_llama(gt_backend *be, int nkv, float theta) {
  gt_model *m;
  assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = CR_T, .seed = 9}, &m), GT_OK);
  llama_config lc = {.vocab_size = CR_V,
                     .T_max = CR_T,
                     .C = CR_C,
                     .NH = CR_NH,
                     .L = CR_L,
                     .n_kv_heads = nkv,
                     .mlp_hidden = LL_H,
                     .rope_theta = theta};
  assert_int_equal(llama_add_layers(m, &lc), GT_OK);
  assert_int_equal(gt_model_build(m), GT_OK);
  return m;
}

static void test_llama_import(void **state) {
  (void)state;
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  char *dir = cr_fixture_dir("hf-llama"), V[16], C[16], L[16], NH[16], NKV[16], H[16];
  snprintf(V, sizeof V, "%d", CR_V);
  snprintf(C, sizeof C, "%d", CR_C);
  snprintf(L, sizeof L, "%d", CR_L);
  snprintf(NH, sizeof NH, "%d", CR_NH);
  snprintf(NKV, sizeof NKV, "%d", LL_NKV);
  snprintf(H, sizeof H, "%d", LL_H);
  py_with(lscript, (char *[]){"make", dir, V, C, L, NH, NKV, H, "10000", "4"}, 10);
  float loss;
  float *ref = hf_logp_with(lscript, dir, "llama", &loss);
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  gt_model *m = new_llama(be, LL_NKV, 0);
  if (ck_hf_import(m, dir, "hf-llama") != GT_OK) fail_msg("importing %s: %s", dir, gt_last_error());
  compare(m, ref, loss, "Llama imported, grouped-query attention");
  /* Models computing another function from tensors of the same shapes are
   * refused by the configuration: other heads, another rotary base. */
  gt_model *other = new_llama(be, 0, 0);
  assert_int_equal(ck_hf_import(other, dir, "hf-llama"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "4 attention heads and 2 key/value heads, and the model has 4 and 4"));
  gt_model_destroy(other);
  other = new_llama(be, LL_NKV, 500000.0f);
  assert_int_equal(ck_hf_import(other, dir, "hf-llama"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "rope_theta 10000"));
  gt_model_destroy(other);
  /* And it is no GPT-2. */
  other = new_llama(be, LL_NKV, 0);
  assert_int_equal(ck_hf_import(other, dir, "hf-gpt2"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "model_type is llama; Giant reads gpt2"));
  gt_model_destroy(other);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  free(ref);
  cr_rmtree(dir);
  free(dir);
}

/* The first loss of examples/llama started from the file (run option
 * --init-from), in one process or through giantrun at `plan`. */
static double llama_first_loss(const char *dir, const char *plan, const char *metrics) {
  char L[16], C[16], NH[16], NKV[16], H[16], T[16], line[512];
  snprintf(L, sizeof L, "%d", CR_L);
  snprintf(C, sizeof C, "%d", CR_C);
  snprintf(NH, sizeof NH, "%d", CR_NH);
  snprintf(NKV, sizeof NKV, "%d", LL_NKV);
  snprintf(H, sizeof H, "%d", LL_H);
  snprintf(T, sizeof T, "%d", CR_T);
  char *argv[40] = {giantrun, "--standalone", "--nproc-per-node", "2", "--plan", (char *)plan};
  int n = plan ? 6 : 0;
  char *rest[] = {llama_bin,
                  "--data",
                  cr_fx.data,
                  "--steps",
                  "1",
                  "--layers",
                  L,
                  "--channels",
                  C,
                  "--heads",
                  NH,
                  "--kv-heads",
                  NKV,
                  "--mlp-hidden",
                  H,
                  "--seq",
                  T,
                  "--batch",
                  "4",
                  "--init-from",
                  (char *)dir,
                  "--init-names",
                  "hf-llama",
                  "--metrics",
                  (char *)metrics,
                  "--print-every",
                  "0"};
  for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) argv[n++] = rest[i];
  argv[n] = NULL;
  static run_result r;
  /* One small step, and a standalone etcd under giantrun: seconds on busy cores. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 240, &r);
  if (r.exit_code != 0) run_fail(&r, "llama %s: exit %d", plan ? plan : "(one process)", r.exit_code);
  FILE *f = fopen(metrics, "r");
  assert_non_null(f);
  double loss = NAN;
  assert_non_null(fgets(line, sizeof line, f));
  const char *p = strstr(line, "\"loss\":");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "\"loss\":%lf", &loss), 1);
  fclose(f);
  unlink(metrics);
  return loss;
}

/* The same file imported at tp=2, each rank its rows or columns of every
 * matrix and its share of the heads: the first step's loss is the one
 * process's. */
static void test_llama_import_tp2(void **state) {
  (void)state;
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  if (access("/usr/bin/etcd", X_OK) != 0 && system("command -v etcd >/dev/null 2>&1") != 0)
    SKIP_CASE("etcd not found (giantrun --standalone)");
  char *dir = cr_fixture_dir("hf-llama-tp"), V[16], C[16], L[16], NH[16], NKV[16], H[16], metrics[4300];
  snprintf(V, sizeof V, "%d", CR_V);
  snprintf(C, sizeof C, "%d", CR_C);
  snprintf(L, sizeof L, "%d", CR_L);
  snprintf(NH, sizeof NH, "%d", CR_NH);
  snprintf(NKV, sizeof NKV, "%d", LL_NKV);
  snprintf(H, sizeof H, "%d", LL_H);
  py_with(lscript, (char *[]){"make", dir, V, C, L, NH, NKV, H, "10000", "5"}, 10);
  snprintf(metrics, sizeof metrics, "%s.metrics", dir);
  double one = llama_first_loss(dir, NULL, metrics), tp = llama_first_loss(dir, "tp=2", metrics);
  print_message("Llama at tp=2: first loss %.6f, one process %.6f\n", tp, one);
  assert_true(fabs(tp - one) <= TOL);
  cr_rmtree(dir);
  free(dir);
}

/* Trained by examples/llama, exported by giant-ckpt under hf-llama, read by
 * transformers; imported back it is the checkpoint's weights exactly. */
static void test_llama_export(void **state) {
  (void)state;
  if (!python) SKIP_CASE("no python3 with torch, transformers and safetensors (tools/deps.sh)");
  char *ck = cr_fixture_dir("llama-trained"), *out = cr_fixture_dir("llama-exported");
  char *own = cr_fixture_dir("llama-own"), L[16], C[16], NH[16], NKV[16], H[16], T[16];
  snprintf(L, sizeof L, "%d", CR_L);
  snprintf(C, sizeof C, "%d", CR_C);
  snprintf(NH, sizeof NH, "%d", CR_NH);
  snprintf(NKV, sizeof NKV, "%d", LL_NKV);
  snprintf(H, sizeof H, "%d", LL_H);
  snprintf(T, sizeof T, "%d", CR_T);
  static run_result r;
  char *train[] = {llama_bin, "--data",  cr_fx.data, "--steps",    "20", "--layers",     L,    "--channels",
                   C,         "--heads", NH,         "--kv-heads", NKV,  "--mlp-hidden", H,    "--seq",
                   T,         "--batch", "4",        "--ckpt-dir", ck,   "--ckpt-every", "20", "--print-every",
                   "0",       NULL};
  run_cmd(train, NULL, 300, &r); /* 20 small steps: seconds, also under ASan on busy cores */
  if (r.exit_code != 0) run_fail(&r, "llama: exit %d", r.exit_code);
  char *hf[] = {tool, "export", "--format", "safetensors", "--names", "hf-llama", "--heads", NH, ck, out, NULL};
  run_cmd(hf, NULL, 120, &r);
  if (r.exit_code != 0) run_fail(&r, "giant-ckpt export --names hf-llama: exit %d", r.exit_code);
  char *mine[] = {tool, "export", "--format", "safetensors", "--names", "giant", ck, own, NULL};
  run_cmd(mine, NULL, 120, &r);
  if (r.exit_code != 0) run_fail(&r, "giant-ckpt export --names giant: exit %d", r.exit_code);
  float loss;
  float *ref = hf_logp_with(lscript, out, "lexport", &loss);
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  gt_model *m = new_llama(be, LL_NKV, 0), *ref_m = new_llama(be, LL_NKV, 0);
  if (ck_hf_import(m, out, "hf-llama") != GT_OK) fail_msg("importing %s: %s", out, gt_last_error());
  assert_int_equal(ck_hf_import(ref_m, own, "giant"), GT_OK);
  size_t n = gt_model_buffer_floats(m);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  assert_int_equal(gt_model_get_params(m, a, n), GT_OK);
  assert_int_equal(gt_model_get_params(ref_m, b, n), GT_OK);
  assert_memory_equal(a, b, n * sizeof *a);
  compare(m, ref, loss, "Llama trained 20 steps, exported");
  free(a);
  free(b);
  gt_model_destroy(ref_m);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  free(ref);
  cr_rmtree(ck);
  cr_rmtree(out);
  cr_rmtree(own);
  free(ck);
  free(out);
  free(own);
}

int main(void) {
  find_python();
  build_path("tools/giant-ckpt", tool, sizeof tool);
  build_path("examples/llama", llama_bin, sizeof llama_bin);
  build_path("launch/giantrun", giantrun, sizeof giantrun);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_import_tied),    cmocka_unit_test(test_import_untied),
      cmocka_unit_test(test_import_layouts), cmocka_unit_test(test_export_loads_in_hf),
      cmocka_unit_test(test_llama_import),   cmocka_unit_test(test_llama_import_tp2),
      cmocka_unit_test(test_llama_export),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, cr_fixture_setup, cr_fixture_teardown));
}
