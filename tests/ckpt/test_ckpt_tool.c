/* giant-ckpt: ls names each committed checkpoint with its step and
 * layout; verify passes a good checkpoint and fails a damaged one, naming
 * the shard; convert writes one framed file holding every tensor whole;
 * diff finds a checkpoint taken at dp=2,tp=2 and the same state saved
 * again by one process identical, tensor by tensor, and two steps apart
 * different. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "common/run_cmd.h"
#include "giant/engine/checkpoint.h"

static char tool[512];

static void run_tool(char *const argv[], int want_exit, const char *want, run_result *r) {
  run_cmd(argv, NULL, 60, r); /* a small checkpoint: milliseconds */
  if (r->exit_code != want_exit || (want && !strstr(r->output, want)))
    run_fail(r, "giant-ckpt %s: exit %d (wanted %d), wanted '%s' in its output (above)", argv[1], r->exit_code,
             want_exit, want ? want : "");
}

static void test_ls_verify_convert_diff(void **state) {
  (void)state;
  build_path("tools/giant-ckpt", tool, sizeof tool);
  char *data = cr_make_data(), a[4200], b[4200], a5[4300], a10[4300], out[4300];
  snprintf(a, sizeof a, "%s.a", data);
  snprintf(b, sizeof b, "%s.b", data);
  snprintf(a5, sizeof a5, "%s/step-00000005", a);
  snprintf(a10, sizeof a10, "%s/step-00000010", a);
  snprintf(out, sizeof out, "%s.export", data);
  cr_cfg src = {.layout = "dp=2,tp=2", .data = data, .dir = a, .s1 = 10, .save_every = 5};
  cr_run(4, &src);
  cr_cfg again = {.data = data, .dir = b, .s0 = -1, .load_path = a10, .s1 = 10, .save_at = 10};
  cr_run(1, &again);
  run_result r;
  run_tool((char *[]){tool, "ls", a, NULL}, 0, "dp=2,tp=2,pp=1", &r);
  assert_non_null(strstr(r.output, "step       10"));
  assert_non_null(strstr(r.output, "step        5"));
  run_tool((char *[]){tool, "verify", a, NULL}, 0, "every hash good", &r);
  run_tool((char *[]){tool, "convert", a, out, NULL}, 0, NULL, &r);
  struct stat st;
  assert_int_equal(stat(out, &st), 0);
  FILE *f = fopen(out, "rb");
  char magic[8];
  assert_int_equal(fread(magic, 1, 8, f), 8);
  fclose(f);
  assert_memory_equal(magic, GT_CKPT_MAGIC, 8);
  run_tool((char *[]){tool, "diff", a, b, NULL}, 0, "max relative difference 0.000e+00", &r);
  assert_non_null(strstr(r.output, "adamw.v/h1.fc2.w"));
  run_tool((char *[]){tool, "diff", a5, a10, NULL}, 0, NULL, &r);
  assert_null(strstr(r.output, "max relative difference 0.000e+00"));
  /* A flipped bit in one of the shards. */
  char shard[4400];
  snprintf(shard, sizeof shard, "%s/shard-00001.bin", a10);
  cr_flip_bit(shard, 100, 1);
  run_tool((char *[]){tool, "verify", a10, NULL}, 1, "shard-00001.bin", &r);
  assert_non_null(strstr(r.output, "DAMAGED"));
  print_message("ls, verify, convert (%lld bytes) and diff behave\n", (long long)st.st_size);
  cr_rmtree(a);
  cr_rmtree(b);
  unlink(out);
  *strrchr(data, '/') = 0;
  cr_rmtree(data);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_ls_verify_convert_diff)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
