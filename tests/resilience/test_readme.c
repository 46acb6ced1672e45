/* The README's model, as a user would take it: the first C program of
 * "Writing a model" is cut out of README.md, compiled against the public
 * headers and libgiant alone (warnings as errors), and trained under
 * giantrun --standalone --reshape --ckpt-dir on three workers, one of which
 * is killed at step 6 (GT_FAULT crash). The two left reshape in-process and
 * train to the end: the run API gives the program all of that, with no
 * line of its own.
 *
 *   argv[1]: the C compiler; argv[2]: README.md; argv[3]: the public
 *   include folder; argv[4]: libgiant.so's folder; argv[5...]: extra flags
 *   (the sanitizers, where the library was built with them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"
#include "giant/data.h"

static int g_argc;
static char **g_argv;
static char giantrun[512], gpt[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("readme", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* The first ```c block after the heading, into path. */
static void extract_program(const char *readme, const char *path) {
  FILE *f = fopen(readme, "r");
  assert_non_null(f);
  static char text_buf[1 << 20];
  size_t n = fread(text_buf, 1, sizeof text_buf - 1, f);
  fclose(f);
  text_buf[n] = 0;
  const char *h = strstr(text_buf, "\n## Writing a model");
  assert_non_null(h);
  const char *start = strstr(h, "```c\n");
  assert_non_null(start);
  start += 5;
  const char *end = strstr(start, "```");
  assert_non_null(end);
  FILE *out = fopen(path, "w");
  assert_non_null(out);
  fwrite(start, 1, (size_t)(end - start), out);
  assert_int_equal(fclose(out), 0);
}

static void test_readme_model_survives_a_killed_worker(void **state) {
  (void)state;
  char src[128], prog[128], cmd[4096], tok[128];
  snprintf(src, sizeof src, "%s/mymodel.c", dir);
  snprintf(prog, sizeof prog, "%s/mymodel", dir);
  extract_program(g_argv[2], src);
  int k = snprintf(cmd, sizeof cmd, "%s -std=c11 -Wall -Wextra -Werror -I%s -o %s %s -L%s -lgiant -Wl,-rpath,%s",
                   g_argv[1], g_argv[3], prog, src, g_argv[4], g_argv[4]);
  for (int i = 5; i < g_argc && k < (int)sizeof cmd; i++)
    k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %s", g_argv[i]);
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  /* A compile of one file: seconds; 300 s. */
  run_cmd((char *[]){"/bin/sh", "-c", cmd, NULL}, NULL, 300, r);
  if (r->exit_code != 0) run_fail(r, "the README's program does not compile: %s", cmd);
  snprintf(tok, sizeof tok, "%s/fortunes.tok", dir);
  uint64_t ntok = 0;
  const char *inputs[1] = {text};
  assert_int_equal(gt_tokenize_paths(inputs, 1, "%", tok, &ntok), GT_OK);
  char *argv[] = {giantrun,
                  "--standalone",
                  "--nproc-per-node",
                  "3",
                  "--reshape",
                  "--ckpt-dir",
                  dir,
                  "--ckpt-every",
                  "4",
                  prog,
                  "--data",
                  tok,
                  "--steps",
                  "16",
                  "--seq",
                  "16",
                  "--batch",
                  "2",
                  "--plan",
                  "dp=3",
                  "--print-every",
                  "1",
                  NULL};
  /* 16 tiny steps on three ranks and one reshape: ~2 s, ~15 s on loaded
   * cores under ASan; 300 s is > 20x. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", "GT_FAULT=crash:rank=1,at=6", NULL}, 300, r);
  if (r->exit_code != 0) run_fail(r, "giantrun: exit %d, its output above", r->exit_code);
  if (!strstr(r->output, "mymodel: reshaped in ")) run_fail(r, "no reshape after the killed worker");
  const char *p = strstr(r->output, "] loss ");
  float first = NAN, last = NAN;
  int from = -1, to = -1;
  if (!p || sscanf(p, "] loss %f -> %f over steps %d..%d", &first, &last, &from, &to) != 4 || to != 16)
    run_fail(r, "no final loss line over steps ..16");
  /* Bytes from ln(320) = 5.77: 16 steps bring it down. */
  if (!(last < first - 0.3f)) run_fail(r, "the loss did not fall: %.4f -> %.4f", first, last);
  free(r);
}

int main(int argc, char **argv) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  g_argc = argc;
  g_argv = argv;
  if (argc < 5) {
    fprintf(stderr, "usage: test_readme CC README INCLUDE_DIR LIB_DIR [FLAGS...]\n");
    return 2;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_readme_model_survives_a_killed_worker)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
