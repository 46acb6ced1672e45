/* The example trainer as a user meets it: nonsense flags, missing and
 * damaged data, and a short real run whose loss falls. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char gpt[512], tmpdir[64];

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  strcpy(tmpdir, "/tmp/giant-cli-XXXXXX");
  return access(gpt, X_OK) == 0 && mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void expect(char *const argv[], int code, const char *words) {
  run_result r;
  run_cmd(argv, NULL, 60, &r); /* a usage error: milliseconds */
  if (r.exit_code != code || !strstr(r.output, words))
    run_fail(&r, "exit %d (wanted %d), output lacks '%s', its output above", r.exit_code, code, words);
}

static void test_nonsense_flags(void **state) {
  (void)state;
  expect((char *[]){gpt, "--bogus", NULL}, 2, "unknown flag '--bogus'");
  expect((char *[]){gpt, "--steps", "ten", NULL}, 2, "--steps wants an integer");
  expect((char *[]){gpt, "--steps", "0", NULL}, 2, "outside");
  expect((char *[]){gpt, "--lr", "nan", NULL}, 2, "--lr wants a number");
  expect((char *[]){gpt, "--batch", NULL}, 2, "--batch needs a value");
  expect((char *[]){gpt, "--optimizer", "adam", NULL}, 2, "unknown optimizer 'adam'");
  expect((char *[]){gpt, "--device", "tpu", NULL}, 2, "unknown device 'tpu'");
  expect((char *[]){gpt, "--precision", "fp16", NULL}, 2, "unknown precision 'fp16': use fp32 or bf16");
  expect((char *[]){gpt, "stray", NULL}, 2, "unexpected argument");
  expect((char *[]){gpt, "--rebalance-local", NULL}, 2, "give --rebalance too");
  expect((char *[]){gpt, "--help", NULL}, 0, "usage: gpt");
}

static void test_missing_and_damaged_data(void **state) {
  (void)state;
  char data[128], corpus[128];
  snprintf(data, sizeof data, "%s/none.tok", tmpdir);
  snprintf(corpus, sizeof corpus, "%s/no-such-corpus", tmpdir);
  /* Bad input data exits 65 (GT_RUN_EXIT_INPUT), which giantrun never retries. */
  expect((char *[]){gpt, "--data", data, "--corpus", corpus, NULL}, 65, "no-such-corpus");
  assert_int_equal(access(data, F_OK), -1); /* nothing half-written left behind */
  /* A token file cut short in its header, then one with a wrong magic. */
  snprintf(data, sizeof data, "%s/short.tok", tmpdir);
  FILE *f = fopen(data, "wb");
  fwrite("GIANTTOK\1\0\0\0", 1, 12, f);
  fclose(f);
  expect((char *[]){gpt, "--data", data, NULL}, 65, "truncated");
  f = fopen(data, "wb");
  unsigned char hdr[80] = "NOTATOKN";
  fwrite(hdr, 1, sizeof hdr, f);
  fclose(f);
  expect((char *[]){gpt, "--data", data, NULL}, 65, "magic");
}

static void test_short_run_learns(void **state) {
  (void)state;
  char text[128], data[128], metrics[128];
  snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
  snprintf(data, sizeof data, "%s/corpus.tok", tmpdir);
  snprintf(metrics, sizeof metrics, "%s/m.jsonl", tmpdir);
  FILE *f = fopen(text, "w");
  for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d\n%%\n", i % 10);
  fclose(f);
  run_result r;
  run_cmd((char *[]){gpt, "--corpus",   text, "--data",    data,    "--steps", "40",   "--layers",
                     "1", "--channels", "32", "--seq",     "32",    "--lr",    "3e-3", "--warmup",
                     "5", "--sample",   "40", "--metrics", metrics, NULL},
          NULL, 120, &r); /* 40 small steps: 1-2 s on busy cores */
  if (r.exit_code != 0) run_fail(&r, "exit %d, its output above", r.exit_code);
  float first, last;
  const char *p = strstr(r.output, "\nloss ");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "\nloss %f -> %f", &first, &last), 2);
  assert_true(last < first - 1.0f);
  assert_non_null(strstr(r.output, "---- sample"));
  /* The same data with a width the head count does not divide. */
  /* A model that cannot be built as asked is a usage error (2): a restart would fail alike. */
  expect((char *[]){gpt, "--data", data, "--heads", "3", "--channels", "64", "--seq", "32", NULL}, 2, "divisible");
  f = fopen(metrics, "r");
  assert_non_null(f);
  int lines = 0;
  char line[512];
  while (fgets(line, sizeof line, f)) lines++;
  fclose(f);
  assert_int_equal(lines, 40);
}

/* Mixed precision from the command line: the same run learns as much. */
static void test_bf16_run_learns(void **state) {
  (void)state;
  char text[128], data[128];
  snprintf(text, sizeof text, "%s/corpus16.txt", tmpdir);
  snprintf(data, sizeof data, "%s/corpus16.tok", tmpdir);
  FILE *f = fopen(text, "w");
  for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d\n%%\n", i % 10);
  fclose(f);
  float loss[2][2];
  for (int k = 0; k < 2; k++) {
    run_result r;
    run_cmd((char *[]){gpt,        "--corpus", text,         "--data",   data,    "--steps",     "30",
                       "--layers", "1",        "--channels", "32",       "--seq", "32",          "--lr",
                       "3e-3",     "--warmup", "5",          "--sample", "0",     "--precision", k ? "bf16" : "fp32",
                       NULL},
            NULL, 120, &r); /* 30 small steps: 1-2 s on busy cores */
    if (r.exit_code != 0) run_fail(&r, "exit %d, its output above", r.exit_code);
    assert_non_null(strstr(r.output, k ? ", bf16," : ", fp32,"));
    const char *p = strstr(r.output, "\nloss ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "\nloss %f -> %f", &loss[k][0], &loss[k][1]), 2);
  }
  assert_true(loss[1][1] < loss[1][0] - 1.0f);
  assert_true(fabsf(loss[1][1] - loss[0][1]) < 0.02f * loss[0][1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nonsense_flags),
      cmocka_unit_test(test_missing_and_damaged_data),
      cmocka_unit_test(test_short_run_learns),
      cmocka_unit_test(test_bf16_run_learns),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
