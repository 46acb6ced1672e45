/* The ZeRO stage from the command line: --zero takes 0..3, --zero1 is
 * --zero 1 and refuses another stage beside it, --print-plan says the
 * stage (3 included), where it came from, and what dp = 1 leaves to
 * shard (nothing), and each combination not supported is refused at
 * start, naming it and what to use instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char gpt[512], tmpdir[64], text[128], data[128];

/* Each refusal comes before training (the slowest here plans a model of
 * one layer): the bound is many times what it takes on a busy machine. */
#define TIMEOUT_S 120

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  strcpy(tmpdir, "/tmp/giant-zero-XXXXXX");
  if (access(gpt, X_OK) != 0 || !mkdtemp(tmpdir)) return -1;
  /* A corpus of its own, tokenized by the first run that plans. */
  snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
  snprintf(data, sizeof data, "%s/corpus.tok", tmpdir);
  FILE *f = fopen(text, "w");
  if (!f) return -1;
  for (int i = 0; i < 100; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d\n%%\n", i % 10);
  return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void refused(char *const argv[], int code, const char *says) {
  run_result r;
  run_cmd(argv, NULL, TIMEOUT_S, &r);
  if (r.exit_code != code || !strstr(r.output, says))
    run_fail(&r, "exit %d (want %d), and the output above should say '%s'", r.exit_code, code, says);
}

static void test_bad_flags(void **state) {
  (void)state;
  refused((char *[]){gpt, "--zero", "4", NULL}, 2, "--zero: '4' is outside [0, 3]");
  refused((char *[]){gpt, "--zero", "two", NULL}, 2, "--zero wants an integer");
  refused((char *[]){gpt, "--zero1", "--zero", "2", NULL}, 2, "--zero1 is --zero 1, and --zero 2 was given too");
  refused((char *[]){gpt, "--zero", "2", "--offload", "1", "--delayed-update", NULL}, 2,
          "--zero 2 with --delayed-update is not supported");
  refused((char *[]){gpt, "--zero", "3", "--update-per-layer", NULL}, 2,
          "--zero 3 with --update-per-layer is not supported");
  refused((char *[]){gpt, "--zero", "3", "--reshape", NULL}, 2, "--zero 3 with --reshape is not supported");
}

static void test_unsupported_at_start(void **state) {
  (void)state;
  char *small[] = {"--print-plan", "--layers", "1",        "--channels", "32",     "--seq", "32",
                   "--threads",    "1",        "--corpus", text,         "--data", data};
  char *zero3[20] = {gpt, "--zero", "3", "--offload", "1"}, *offload[20] = {gpt, "--zero", "2", "--offload", "1"};
  memcpy(zero3 + 5, small, sizeof small);
  memcpy(offload + 5, small, sizeof small);
  refused(zero3, 2, "ZeRO-3 with offloading (a window of 1 layers, from flag) is not supported");
  refused(offload, 2, "ZeRO-2 with offloading (a window of 1 layers, from flag) is not supported");
}

static void test_print_plan_at_dp1(void **state) {
  (void)state;
  for (int stage = 2; stage <= 3; stage++) {
    run_result r;
    char arg[4], says[64];
    snprintf(arg, sizeof arg, "%d", stage);
    snprintf(says, sizeof says, "decide zero=%d from flag (dp=1: nothing to shard)", stage);
    run_cmd((char *[]){gpt, "--zero", arg, "--print-plan", "--layers", "1", "--channels", "32", "--seq", "32",
                       "--threads", "1", "--corpus", text, "--data", data, NULL},
            NULL, TIMEOUT_S, &r);
    if (r.exit_code != 0 || !strstr(r.output, says))
      run_fail(&r, "exit %d; the plan above should say zero=%d with nothing to shard", r.exit_code, stage);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_flags),
      cmocka_unit_test(test_unsupported_at_start),
      cmocka_unit_test(test_print_plan_at_dp1),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
