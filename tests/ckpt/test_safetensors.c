/* safetensors: what the writer writes reads back bit for bit; F16 and
 * BF16 widen to the same floats as IEEE's; and every malformed file is
 * refused at open with a message naming what is wrong (a header that lies
 * about its length, a dtype not taken, ranges that overlap, leave a gap,
 * run past the end or disagree with the shape, a name twice). Importing
 * into a model refuses a missing tensor, a shape of another configuration
 * and a config.json of another GELU. A checkpoint exported under both
 * namings imports back bit for bit. */
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
#include "ckpt/safetensors.h"
#include "examples/gpt/gpt.h"
#include "giant/ckpt.h"
#include "giant/engine/model.h"

static char dir[] = "/tmp/giant-st-XXXXXX";
static char path[256];

/* A file of header `json` and `data_len` bytes of data (from `data`, else zeros). */
static void write_file(const char *json, const void *data, size_t data_len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char len8[8];
  uint64_t n = strlen(json);
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
  assert_int_equal(fwrite(len8, 1, 8, f), 8);
  assert_int_equal(fwrite(json, 1, n, f), n);
  for (size_t i = 0; i < data_len; i++) fputc(data ? ((const unsigned char *)data)[i] : 0, f);
  assert_int_equal(fclose(f), 0);
}

/* Opening fails with `want` and a message holding `msg`. */
static void refused(gt_status want, const char *msg) {
  ck_st *st = NULL;
  gt_status s = ck_st_open(path, &st);
  if (s != want || !strstr(gt_last_error(), msg))
    fail_msg("wanted %s and '%s'; got %s: %s", gt_status_name(want), msg, gt_status_name(s), gt_last_error());
  assert_null(st);
}

static void test_roundtrip(void **state) {
  (void)state;
  float a[6] = {1, -2, 3.5f, 1e-30f, 7, 8}, b[3] = {0.25f, -0.5f, 9};
  ck_st_out t[2] = {{.name = "x.\"q\"", .ndim = 2, .shape = {2, 3}, .data = a},
                    {.name = "y", .ndim = 1, .shape = {3}, .data = b}};
  assert_int_equal(ck_st_write(dir, "w.safetensors", t, 2), GT_OK);
  char p[300];
  snprintf(p, sizeof p, "%s/w.safetensors", dir);
  ck_st *st;
  assert_int_equal(ck_st_open(p, &st), GT_OK);
  assert_int_equal(ck_st_count(st), 2);
  const ck_st_tensor *x = ck_st_find(st, "x.\"q\""), *y = ck_st_find(st, "y");
  assert_non_null(x);
  assert_non_null(y);
  assert_null(ck_st_find(st, "z"));
  assert_int_equal(x->ndim, 2);
  assert_int_equal(x->shape[1], 3);
  float got[6];
  assert_int_equal(ck_st_read(st, x, got), GT_OK);
  assert_memory_equal(got, a, sizeof a);
  assert_int_equal(ck_st_read(st, y, got), GT_OK);
  assert_memory_equal(got, b, sizeof b);
  ck_st_close(st);
}

static void test_half_widths(void **state) {
  (void)state;
  /* F16: 1, -2, 0.5, 65504, 2^-24 (the least subnormal), -inf; BF16: 1, -3, 2^-126. */
  uint16_t h[9] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0xFC00, 0x3F80, 0xC040, 0x0080};
  write_file(
      "{\"h\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3,1],\"data_offsets\":[12,18]}}",
      h, sizeof h);
  ck_st *st;
  assert_int_equal(ck_st_open(path, &st), GT_OK);
  float f[6];
  assert_int_equal(ck_st_read(st, ck_st_find(st, "h"), f), GT_OK);
  float want[6] = {1, -2, 0.5f, 65504, 0x1p-24f, -__builtin_inff()};
  assert_memory_equal(f, want, sizeof want);
  assert_int_equal(ck_st_read(st, ck_st_find(st, "b"), f), GT_OK);
  float wb[3] = {1, -3, 0x1p-126f};
  assert_memory_equal(f, wb, sizeof wb);
  ck_st_close(st);
}

static void test_malformed(void **state) {
  (void)state;
  FILE *f = fopen(path, "wb");
  fputs("abc", f);
  fclose(f);
  refused(GT_EFORMAT, "too short for a safetensors file");
  write_file("{}", NULL, 0);
  ck_st *st;
  assert_int_equal(ck_st_open(path, &st), GT_OK); /* no tensors is a file */
  ck_st_close(st);
  /* The length says more than the file holds. */
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 4);
  f = fopen(path, "r+b");
  fputc(0xff, f);
  fputc(0x7f, f);
  fclose(f);
  refused(GT_EFORMAT, "the header claims");
  write_file("[1, 2]", NULL, 0);
  refused(GT_EFORMAT, "the header is no JSON object");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", NULL, 4);
  refused(GT_EFORMAT, "not closed");
  write_file("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", NULL, 8);
  refused(GT_EUNSUPPORTED, "tensor a is of dtype I64, which Giant does not read");
  write_file("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 4);
  refused(GT_EFORMAT, "unknown dtype 'F33'");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", NULL, 8);
  refused(GT_EFORMAT, "hold 8 bytes where its dtype and shape need 12");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", NULL, 4);
  refused(GT_EFORMAT, "shape[0] is no size");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", NULL, 4);
  refused(GT_EFORMAT, "shape[0] is no size");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", NULL, 4);
  refused(GT_EFORMAT, "its shape is too large");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", NULL, 4);
  refused(GT_EFORMAT, "needs data_offsets");
  write_file(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
      NULL, 12);
  refused(GT_EFORMAT, "tensor b (bytes 4..12) overlaps tensor a");
  write_file(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
      NULL, 12);
  refused(GT_EFORMAT, "bytes 4..8 of the data belong to no tensor");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", NULL, 12);
  refused(GT_EFORMAT, "tensor a ends at byte 16 of the data, and the file holds 12");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 8);
  refused(GT_EFORMAT, "the tensors end at byte 4 of the data and the file goes on to 8");
  write_file(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
      NULL, 8);
  refused(GT_EFORMAT, "tensor a is named twice");
  write_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", NULL, 4);
  refused(GT_EFORMAT, "unknown field 'extra'");
  write_file("{\"__metadata__\":{\"n\":1}}", NULL, 0);
  refused(GT_EFORMAT, "__metadata__'s n is no string");
  snprintf(path + strlen(path), sizeof path - strlen(path), ".absent");
  refused(GT_ENOTFOUND, "cannot open");
  snprintf(path, sizeof path, "%s/f.safetensors", dir);
}

/* Importing: a tensor missing, one of another shape, a config of another GELU. */
static void test_import_refusals(void **state) {
  (void)state;
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  gt_model *m;
  assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 8, .seed = 1}, &m), GT_OK);
  gpt_config gc = {.vocab_size = 16, .T_max = 8, .C = 8, .NH = 2, .L = 1, .tie_weights = true};
  assert_int_equal(gpt_add_layers(m, &gc), GT_OK);
  assert_int_equal(gt_model_build(m), GT_OK);
  static float z[16 * 8];
  ck_st_out t[2] = {{.name = "transformer.wte.weight", .ndim = 2, .shape = {16, 8}, .data = z},
                    {.name = "transformer.wpe.weight", .ndim = 2, .shape = {4, 8}, .data = z}};
  assert_int_equal(ck_st_write(dir, "model.safetensors", t, 1), GT_OK);
  assert_int_equal(ck_hf_import(m, dir, "hf-gpt2"), GT_ENOTFOUND);
  assert_non_null(strstr(gt_last_error(), "has no tensor transformer.wpe.weight for the model's parameter embed.wpe"));
  assert_int_equal(ck_st_write(dir, "model.safetensors", t, 2), GT_OK);
  assert_int_equal(ck_hf_import(m, dir, "hf-gpt2"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "tensor transformer.wpe.weight is 4x8 and the model's embed.wpe needs 8x8"));
  char cfg[300];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  FILE *f = fopen(cfg, "w");
  fputs("{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}", f);
  fclose(f);
  assert_int_equal(ck_hf_import(m, dir, "hf-gpt2"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "activation_function relu is not Giant's GELU"));
  assert_int_equal(ck_hf_import(m, dir, "hf-llama"), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "model_type is gpt2; hf-llama reads llama"));
  assert_int_equal(ck_hf_import(m, dir, "hf-bert"), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "unknown tensor names 'hf-bert'"));
  unlink(cfg);
  snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
  unlink(cfg);
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

/* A checkpoint exported under both namings and imported back gives its
 * weights bit for bit; hf-gpt2's file holds GPT-2's names and layouts (no
 * python here: test_interop checks them against transformers). */
static void test_export_import(void **state) {
  (void)state;
  char *data = cr_make_data(), ck[4200], step[4300], out[4300];
  snprintf(ck, sizeof ck, "%s.ck", data);
  cr_cfg c = {.data = data, .dir = ck, .s1 = 2, .save_at = 2, .saved = cr_state_new(NULL)};
  cr_run(1, &c);
  snprintf(step, sizeof step, "%s/step-%08d", ck, 2);
  snprintf(out, sizeof out, "%s.hf", data);
  assert_int_equal(gt_ckpt_export_safetensors(step, "hf-gpt2", 0, out), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "needs the model's head count"));
  assert_int_equal(gt_ckpt_export_safetensors(step, "hf-gpt3", 4, out), GT_EINVAL);
  assert_int_equal(gt_ckpt_export_safetensors(step, "hf-llama", 0, out), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "hf-llama's config.json needs the model's head count"));
  /* A GPT-2 checkpoint has no name under Llama's naming. */
  assert_int_equal(gt_ckpt_export_safetensors(step, "hf-llama", CR_NH, out), GT_ENOTFOUND);
  assert_non_null(strstr(gt_last_error(), "for a Llama model built as examples/llama builds it"));
  gt_backend *be;
  assert_int_equal(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &be), GT_OK);
  const train_result *saved = c.saved.p;
  static const char *const names[] = {"hf-gpt2", "giant"};
  for (int k = 0; k < 2; k++) {
    snprintf(out, sizeof out, "%s.%s", data, names[k]);
    assert_int_equal(gt_ckpt_export_safetensors(step, names[k], CR_NH, out), GT_OK);
    gt_model *m;
    assert_int_equal(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = CR_T, .seed = 5}, &m), GT_OK);
    gpt_config gc = {.vocab_size = CR_V, .T_max = CR_T, .C = CR_C, .NH = CR_NH, .L = CR_L, .tie_weights = true};
    assert_int_equal(gpt_add_layers(m, &gc), GT_OK);
    assert_int_equal(gt_model_build(m), GT_OK);
    gt_status s = ck_hf_import(m, out, names[k]);
    if (s != GT_OK) fail_msg("%s: %s", names[k], gt_last_error());
    float *p = malloc(saved->nparams * sizeof *p);
    assert_int_equal(gt_model_get_params(m, p, saved->nparams), GT_OK);
    assert_memory_equal(p, saved->params, saved->nparams * sizeof *p);
    if (k == 0) { /* c_attn is qkv.w (3C, C) transposed: [C, 3C] */
      char f[4400];
      snprintf(f, sizeof f, "%s/model.safetensors", out);
      ck_st *st;
      assert_int_equal(ck_st_open(f, &st), GT_OK);
      assert_null(ck_st_find(st, "lm_head.weight")); /* tied */
      const ck_st_tensor *t = ck_st_find(st, "transformer.h.1.attn.c_attn.weight");
      assert_non_null(t);
      assert_int_equal(t->ndim, 2);
      assert_int_equal(t->shape[0], CR_C);
      assert_int_equal(t->shape[1], 3 * CR_C);
      float *w = malloc(t->numel * sizeof *w);
      assert_int_equal(ck_st_read(st, t, w), GT_OK);
      const gt_param *q = NULL;
      for (int i = 0; i < gt_model_num_params(m); i++)
        if (!strcmp(gt_model_param(m, i)->name, "h1.qkv.w")) q = gt_model_param(m, i);
      assert_non_null(q);
      for (int r = 0; r < 3 * CR_C; r++)
        for (int col = 0; col < CR_C; col++)
          assert_true(w[col * 3 * CR_C + r] == p[q->offset + (size_t)r * CR_C + col]);
      free(w);
      ck_st_close(st);
      snprintf(f, sizeof f, "%s/config.json", out);
      assert_int_equal(access(f, R_OK), 0);
    }
    free(p);
    gt_model_destroy(m);
    cr_rmtree(out);
  }
  gt_backend_destroy(be);
  cr_rmtree(ck);
  cr_free_data(data);
}

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(dir)) return -1;
  snprintf(path, sizeof path, "%s/f.safetensors", dir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cr_rmtree(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),       cmocka_unit_test(test_half_widths),   cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_import_refusals), cmocka_unit_test(test_export_import),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
