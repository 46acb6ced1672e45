/* What a worker's data can do to it: a token file truncated while training
 * gives an error naming the file and the offset (not SIGBUS), and a missing
 * corpus is an input error (exit 65) that leaves nothing behind. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "giant/data.h"
#include "launch/launch_test.h"

static void test_token_file_truncated_in_use(void **state) {
  (void)state;
  char dir[256], path[300];
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-trunc"), 0);
  snprintf(path, sizeof path, "%s/data.tok", dir);
  enum { N = 40000 };
  uint32_t *tok = malloc(N * sizeof *tok);
  assert_non_null(tok);
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i % 256);
  assert_int_equal(gt_tokfile_write(path, tok, N, 256, GT_TOKFILE_NO_SEP), GT_OK);
  free(tok);
  gt_loader_config cfg = {.path = path, .B = 4, .T_max = 64, .mode = GT_LOADER_FIXED, .nshards = 1};
  gt_loader *l;
  assert_int_equal(gt_loader_open(&cfg, 256, &l), GT_OK);
  gt_batch b;
  assert_int_equal(gt_loader_next(l, &b), GT_OK);
  assert_int_equal(b.inputs[1], 1);
  /* Cut the file to its first few hundred tokens: every later row is gone,
   * where the pages of a mapping would fault. */
  assert_int_equal(truncate(path, GT_TOKFILE_HEADER_BYTES + 600), 0);
  gt_status st = GT_OK;
  for (int i = 0; i < 200 && st == GT_OK; i++) st = gt_loader_next(l, &b);
  assert_int_equal(st, GT_EIO);
  const char *msg = gt_last_error();
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "ends at byte offset 664"));
  assert_non_null(strstr(msg, "truncated or replaced while in use"));
  gt_loader_close(l);
  rm_rf(dir);
}

static void test_missing_corpus_makes_no_directory(void **state) {
  (void)state;
  char dir[256], cmd[1200], data[400], out[300];
  assert_int_equal(temp_dir(dir, sizeof dir, "launch-corpus"), 0);
  snprintf(data, sizeof data, "%s/new/fortunes.tok", dir);
  snprintf(out, sizeof out, "%s/out.txt", dir);
  const char *bd = getenv("GT_BUILD_DIR");
  /* gpt fails on the missing corpus at once (milliseconds): 60 s. */
  snprintf(cmd, sizeof cmd, "timeout 60 %s/examples/gpt --corpus %s/no-such-corpus --data %s --steps 1 >%s 2>&1",
           bd ? bd : ".", dir, data, out);
  int st = system(cmd);
  char *text = slurp(out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 65) fail_msg("gpt exited %d, expected 65:\n%s", st, text ? text : "");
  assert_non_null(strstr(text, "no-such-corpus"));
  free(text);
  /* No directory for the token file that could not be made. */
  snprintf(data, sizeof data, "%s/new", dir);
  struct stat sb;
  assert_int_equal(stat(data, &sb), -1);
  assert_int_equal(errno, ENOENT);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_file_truncated_in_use),
      cmocka_unit_test(test_missing_corpus_makes_no_directory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
