/* The run API with the program's own rows (gt_run_set_source) against the
 * same rows in a token file: one process trains a small model 30 steps on
 * each, and every step's loss agrees bit for bit (the rows, their order
 * and shuffling are the loader's either way). A row holding an id past
 * the vocabulary fails the run as bad input (exit status 65), naming the
 * row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "giant/giant.h"

enum { T = 16, ROWS = 400, V = 256, STEPS = 30 };

static uint32_t tokens[ROWS * T + 1];
static char dir[64], tok_path[128];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/giant-runsrc-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  uint64_t x = 42;
  for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tokens[i] = (uint32_t)((x >> 33) % 64) + (i % 3 ? 0 : 96); /* some structure to learn */
  }
  snprintf(tok_path, sizeof tok_path, "%s/rows.tok", dir);
  return gt_tokfile_write(tok_path, tokens, ROWS * T + 1, V, GT_TOKFILE_NO_SEP) == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static gt_status add_layers(gt_model *m, void *user) {
  (void)user;
  GT_TRY(gt_model_add(m, &gt_embedding_layer, "embed",
                      &(gt_embedding_config){.vocab_size = V, .C = 32, .T_max = T, .positional = true}, NULL));
  GT_TRY(gt_model_add(m, &gt_block_layer, "h0", &(gt_block_config){.C = 32, .NH = 2, .n_layers_total = 1}, NULL));
  GT_TRY(gt_model_add(m, &gt_layernorm_layer, "ln_f", &(gt_layernorm_config){.C = 32}, NULL));
  return gt_model_add(m, &gt_lm_head_layer, "lm_head",
                      &(gt_lm_head_config){.C = 32, .vocab_size = V, .tie_to = "embed"}, NULL);
}

/* Row i: the file's FIXED row i, T + 1 tokens from i * T; `bad`: the row
 * whose third token is made an id past the vocabulary (-1: none). */
typedef struct rows {
  long bad;
} rows;

static gt_status read_row(void *user, uint64_t index, int32_t *out, int n) {
  const rows *r = user;
  if (index >= ROWS || n != T + 1) return gt_errorf(GT_EINVAL, "row %llu of %d tokens", (unsigned long long)index, n);
  for (int t = 0; t < n; t++) out[t] = (int32_t)tokens[index * T + (uint64_t)t];
  if ((long)index == r->bad) out[2] = V + 5;
  return GT_OK;
}

/* Trains; the metrics file's losses into loss[], their count returned. */
static char last_error[1024];

static int train(const char *metrics, const gt_loader_source *src, int *exit_status, float *loss) {
  char steps[16];
  snprintf(steps, sizeof steps, "%d", STEPS);
  char *argv[] = {"test_run_source", "--data", tok_path,    "--steps",       steps,      "--seq", "16", "--batch", "4",
                  "--print-every",   "0",      "--metrics", (char *)metrics, "--warmup", "5",     NULL};
  gt_run_options o;
  gt_run_options_init(&o);
  assert_int_equal(gt_run_parse(sizeof argv / sizeof *argv - 1, argv, NULL, NULL, 0, &o), -1);
  gt_run *run = NULL;
  gt_run_model model = {.add_layers = add_layers};
  gt_status s = gt_run_open(&o, &run);
  if (s == GT_OK && src) s = gt_run_set_source(run, src);
  if (s == GT_OK) s = gt_run_start(run, &model);
  if (s == GT_OK) s = gt_run_train(run);
  *exit_status = gt_run_exit_status(run, s);
  snprintf(last_error, sizeof last_error, "%s", s != GT_OK ? gt_last_error() : "");
  gt_run_destroy(run);
  FILE *f = fopen(metrics, "r");
  int n = 0;
  char line[4096];
  while (f && fgets(line, sizeof line, f) && n < STEPS) {
    const char *p = strstr(line, "\"loss\":");
    if (!strncmp(line, "{\"step\":", 8) && p) loss[n++] = strtof(p + 7, NULL);
  }
  if (f) fclose(f);
  return n;
}

static void test_source_matches_file(void **state) {
  (void)state;
  char ma[160], mb[160];
  snprintf(ma, sizeof ma, "%s/file.jsonl", dir);
  snprintf(mb, sizeof mb, "%s/source.jsonl", dir);
  float a[STEPS], b[STEPS];
  int ca = -1, cb = -1;
  rows good = {.bad = -1};
  gt_loader_source src = {.rows = ROWS, .vocab_size = V, .read = read_row, .user = &good, .name = "test rows"};
  assert_int_equal(train(ma, NULL, &ca, a), STEPS);
  assert_int_equal(train(mb, &src, &cb, b), STEPS);
  assert_int_equal(ca, 0);
  assert_int_equal(cb, 0);
  for (int i = 0; i < STEPS; i++) {
    if (a[i] != b[i]) fail_msg("step %d: loss %.9g from the file, %.9g from the source", i, a[i], b[i]);
  }
  assert_true(b[STEPS - 1] < b[0] - 0.1f); /* and it learnt (5.53 -> 5.32) */
}

static void test_bad_row_is_bad_input(void **state) {
  (void)state;
  char m[160];
  snprintf(m, sizeof m, "%s/bad.jsonl", dir);
  rows bad = {.bad = 3}; /* sequential order (no shuffle): in the first batch */
  gt_loader_source src = {.rows = ROWS, .vocab_size = V, .read = read_row, .user = &bad, .name = "test rows"};
  float loss[STEPS];
  int code = -1;
  train(m, &src, &code, loss);
  assert_int_equal(code, GT_RUN_EXIT_INPUT);
  if (!strstr(last_error, "test rows: row 3")) fail_msg("the error does not name the row: %s", last_error);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_source_matches_file),
      cmocka_unit_test(test_bad_row_is_bad_input),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
