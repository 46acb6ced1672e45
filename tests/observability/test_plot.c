/* giant-plot (docs/observability.md): the sheet of a real job, and its
 * answers to bad input.
 *
 * job: examples/gpt on four workers under giantrun --reshape --failslow
 *   --metrics, rank 2 slowed x4 for a while (GT_FAULT slow) and rank 1
 *   killed later (GT_FAULT crash); the three left reshape and finish.
 *   giant-plot draws its metrics: the PNG is a PNG of the size asked for,
 *   and the SVG holds the panels' titles and the marks' labels: the fault,
 *   the reshape to the layout the job reports, and each rank the fail-slow
 *   monitor flagged in the metrics file.
 * inputs: a file that does not exist, a line that is not JSON, files with
 *   no step lines, bad usage and a missing gnuplot give a clear message and
 *   a non-zero exit; a last line cut short (a job killed mid-write) and a
 *   non-finite loss (as C prints it) are drawn past; a restart appended to
 *   a file is marked where its steps go back.
 * Where gnuplot is missing the cases that draw skip (exit 77). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

static char plot[512], dir[64];
static run_result res;

static int have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  if (len) *len = (size_t)n;
  fclose(f);
  return s;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* A PNG (its 8-byte signature) whose IHDR says w x h. */
static void expect_png(const char *path, unsigned w, unsigned h) {
  size_t n = 0;
  unsigned char *p = (unsigned char *)slurp(path, &n);
  if (!p) fail_msg("no PNG at %s", path);
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(n > 33);
  assert_memory_equal(p, sig, 8);
  assert_memory_equal(p + 12, "IHDR", 4);
  unsigned pw = (unsigned)p[16] << 24 | (unsigned)p[17] << 16 | (unsigned)p[18] << 8 | p[19];
  unsigned ph = (unsigned)p[20] << 24 | (unsigned)p[21] << 16 | (unsigned)p[22] << 8 | p[23];
  if (pw != w || ph != h) fail_msg("%s is %ux%u, wanted %ux%u", path, pw, ph, w, h);
  free(p);
}

static void expect_in(const char *what, const char *text, const char *words) {
  if (!strstr(text, words)) text_fail(what, text, "%s lacks '%s' (above)", what, words);
}

/* giant-plot with args (NULL-terminated, at most 16); env: one NAME=value
 * or NULL. Drawing a sheet takes gnuplot well under a second, a few on
 * loaded cores under ASan: 120 s is > 20x. */
static void run_plot(const char *const *args, char *env) {
  char *argv[20] = {plot};
  int k = 1;
  for (int i = 0; args[i]; i++) argv[k++] = (char *)args[i];
  argv[k] = NULL;
  run_cmd(argv, (char *[]){env, NULL}, 120, &res);
}

static void expect_failure(const char *const *args, char *env, int code, const char *words) {
  run_plot(args, env);
  if (res.exit_code != code) run_fail(&res, "giant-plot: exit %d, wanted %d", res.exit_code, code);
  if (!strstr(res.output, words)) run_fail(&res, "giant-plot's message lacks '%s'", words);
}

static void test_bad_inputs(void **state) {
  (void)state;
  char good[128], bad[128], empty[128], none[128], arr[128], range[128], png[128];
  snprintf(good, sizeof good, "%s/good.jsonl", dir);
  snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
  snprintf(empty, sizeof empty, "%s/empty.jsonl", dir);
  snprintf(none, sizeof none, "%s/none.jsonl", dir);
  snprintf(arr, sizeof arr, "%s/array.jsonl", dir);
  snprintf(range, sizeof range, "%s/range.jsonl", dir);
  snprintf(png, sizeof png, "%s/out.png", dir);
  write_file(good, "{\"step\":1,\"loss\":4.5,\"tokens_per_s\":100,\"mfu\":0.01,\"rank\":0}\n");
  write_file(bad, "{\"step\":1,\"loss\":4.5,\"rank\":0}\nthis is not json\n");
  write_file(empty, "");
  write_file(none, "{\"event\":\"fault\",\"step\":3,\"rank\":0,\"text\":\"x\"}\n");
  write_file(arr, "[1,2,3]\n");
  write_file(range, "{\"step\":-4,\"loss\":1.0}\n");

  char where[160], path_env[128];
  snprintf(where, sizeof where, "cannot open %s/missing.jsonl", dir);
  expect_failure((const char *[]){where + strlen("cannot open "), "-o", png, NULL}, NULL, 1, where);
  snprintf(where, sizeof where, "%s:2: not a JSON object", bad);
  expect_failure((const char *[]){good, bad, "-o", png, NULL}, NULL, 1, where);
  snprintf(where, sizeof where, "%s:1: not a JSON object", arr);
  expect_failure((const char *[]){arr, "-o", png, NULL}, NULL, 1, where);
  expect_failure((const char *[]){empty, "-o", png, NULL}, NULL, 1, "no step lines in");
  expect_failure((const char *[]){none, "-o", png, NULL}, NULL, 1, "no step lines in");
  expect_failure((const char *[]){range, "-o", png, NULL}, NULL, 1, "not a whole number in range");
  expect_failure((const char *[]){good, NULL}, NULL, 2, "no output given");
  expect_failure((const char *[]){"-o", png, NULL}, NULL, 2, "no metrics file given");
  expect_failure((const char *[]){good, "-o", png, "--size", "12", NULL}, NULL, 2, "--size 12");
  expect_failure((const char *[]){good, "-o", png, "--frobnicate", NULL}, NULL, 2, "unknown option");
  /* Without gnuplot, it says what to install. */
  snprintf(path_env, sizeof path_env, "PATH=%s", dir); /* a PATH with no gnuplot on it */
  expect_failure((const char *[]){good, "-o", png, NULL}, path_env, 1, "gnuplot-nox");
  struct stat st;
  assert_true(stat(png, &st) != 0); /* none of these drew anything */
}

/* A job killed mid-write leaves its last line cut short: a warning, and
 * the rest drawn; a non-finite loss, as C prints it, draws nothing. */
static void test_cut_short(void **state) {
  (void)state;
  if (!have_gnuplot()) SKIP_CASE("gnuplot not found (Debian: gnuplot-nox)");
  char m[128], png[128];
  snprintf(m, sizeof m, "%s/cut.jsonl", dir);
  snprintf(png, sizeof png, "%s/cut.png", dir);
  write_file(m,
             "{\"step\":1,\"loss\":4.5,\"tokens_per_s\":100,\"mfu\":0.01,\"rank\":0,\"compute_s\":0.1}\n"
             "{\"step\":2,\"loss\":nan,\"tokens_per_s\":-nan,\"mfu\":0.01,\"rank\":0,\"compute_s\":0.1}\n"
             "{\"step\":3,\"loss\":4.1,\"tokens_per_s\":110,\"mfu\":0.01,\"rank\":0,\"compute_s\":0.1}\n"
             "{\"step\":4,\"loss\":4.");
  run_plot((const char *[]){m, "-o", png, "--size", "800x600", NULL}, NULL);
  if (res.exit_code != 0) run_fail(&res, "giant-plot: exit %d", res.exit_code);
  expect_in("giant-plot's output", res.output, ":4: the last line is cut short");
  expect_in("giant-plot's output", res.output, "(3 step lines");
  expect_png(png, 800, 600);
  /* Nothing finite to draw in a panel: the panel says so. */
  write_file(m, "{\"step\":1,\"loss\":nan,\"rank\":0}\n{\"step\":2,\"loss\":inf,\"rank\":0}\n");
  char svg[128];
  snprintf(svg, sizeof svg, "%s/cut.svg", dir);
  run_plot((const char *[]){m, "-o", png, "--svg", svg, NULL}, NULL);
  if (res.exit_code != 0) run_fail(&res, "giant-plot: exit %d", res.exit_code);
  char *s = slurp(svg, NULL);
  assert_non_null(s);
  expect_in("the SVG", s, "no finite loss in these metrics");
  expect_in("the SVG", s, "no tokens/s or MFU in these metrics");
  expect_in("the SVG", s, "no per-rank timing in these metrics");
  free(s);
}

/* A restart appended to the file: steps go back, and the sheet marks it
 * where they do (the job wrote no resume event). */
static void test_restart(void **state) {
  (void)state;
  if (!have_gnuplot()) SKIP_CASE("gnuplot not found (Debian: gnuplot-nox)");
  char m[128], png[128], svg[128];
  snprintf(m, sizeof m, "%s/restart.jsonl", dir);
  snprintf(png, sizeof png, "%s/restart.png", dir);
  snprintf(svg, sizeof svg, "%s/restart.svg", dir);
  FILE *f = fopen(m, "w");
  assert_non_null(f);
  for (int s = 0; s < 8; s++) fprintf(f, "{\"step\":%d,\"loss\":%.2f,\"rank\":0}\n", s, 5.0 - 0.1 * s);
  for (int s = 5; s < 12; s++) fprintf(f, "{\"step\":%d,\"loss\":%.2f,\"rank\":0}\n", s, 4.0 - 0.1 * s);
  assert_int_equal(fclose(f), 0);
  run_plot((const char *[]){m, "-o", png, "--svg", svg, NULL}, NULL);
  if (res.exit_code != 0) run_fail(&res, "giant-plot: exit %d", res.exit_code);
  expect_in("giant-plot's output", res.output, "(15 step lines, 1 marks)");
  char *s = slurp(svg, NULL);
  assert_non_null(s);
  expect_in("the SVG", s, ">restart<");
  free(s);
}

/* The step and layout of rank 0's first "gpt: reshaped in" line ("...
 * dp=3, ... step N, ..."); 0 when there is none. */
static int reshape_of(const char *out, char layout[64], int *step) {
  const char *line = strstr(out, "[rank 0] gpt: reshaped in ");
  if (!line) return 0;
  const char *eol = strchr(line, '\n'), *lp = strstr(line, "dp="), *sp = strstr(line, ", step ");
  if (!lp || !sp || (eol && (lp > eol || sp > eol))) return 0;
  if (sscanf(lp, "%63[^ ,]", layout) != 1 || sscanf(sp, ", step %d", step) != 1) return 0;
  return 1;
}

static void test_job_sheet(void **state) {
  (void)state;
  if (!GT_TEST_FAULTS) SKIP_CASE("%s", GT_TEST_NO_FAULTS);
  if (!have_gnuplot()) SKIP_CASE("gnuplot not found (Debian: gnuplot-nox)");
  char giantrun[512], gpt[512], text[128], data[128], sdir[64], metrics[128], png[128], svg[128];
  /* Exits 77 without etcd (giantrun --standalone runs one). */
  assert_int_equal(giantrun_scratch("plotjob", giantrun, gpt, sdir, text, data), 0);
  snprintf(metrics, sizeof metrics, "%s/m.jsonl", sdir);
  snprintf(png, sizeof png, "%s/run.png", sdir);
  snprintf(svg, sizeof svg, "%s/run.svg", sdir);
  enum { KILL_AT = 30 };
  char *argv[] = {giantrun,
                  "--standalone",
                  "--nproc-per-node",
                  "4",
                  "--plan",
                  "dp=4",
                  "--reshape",
                  gpt,
                  "--corpus",
                  text,
                  "--data",
                  data,
                  "--steps",
                  "40",
                  "--layers",
                  "2",
                  "--channels",
                  "32",
                  "--heads",
                  "4",
                  "--seq",
                  "32",
                  "--global-batch",
                  "8",
                  "--sample",
                  "0",
                  "--print-every",
                  "0",
                  "--failslow",
                  "--failslow-clock",
                  "cpu",
                  "--metrics",
                  metrics,
                  NULL};
  /* Rank 2 x4 from step 8 to 20: the monitor flags it (or the ladder leaves
   * it out, the job going on without it); rank 1 dies at step 30. */
  char fault[128];
  snprintf(fault, sizeof fault, "GT_FAULT=slow:rank=2,factor=4,from=8,until=20;crash:rank=1,at=%d", KILL_AT);
  /* 40 small steps on four ranks and a reshape: ~5 s, a minute at worst
   * under ASan on loaded cores; 280 s only bounds a hang. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", fault, NULL}, 280, &res);
  if (res.exit_code != 0) run_fail(&res, "giantrun: exit %d, its output above", res.exit_code);
  char layout[64];
  int reshape_step = 0;
  if (!reshape_of(res.output, layout, &reshape_step)) run_fail(&res, "no reshape line from rank 0 (above)");

  run_plot((const char *[]){metrics, "-o", png, "--svg", svg, "--title", "plot job", NULL}, NULL);
  if (res.exit_code != 0) run_fail(&res, "giant-plot: exit %d", res.exit_code);
  expect_png(png, 1600, 1200);
  char *s = slurp(svg, NULL);
  assert_non_null(s);
  expect_in("the SVG", s, "<svg");
  expect_in("the SVG", s, "plot job");
  expect_in("the SVG", s, ">Loss<");
  expect_in("the SVG", s, ">Throughput<");
  expect_in("the SVG", s, "compute time per step");
  expect_in("the SVG", s, ">train<");
  expect_in("the SVG", s, ">tokens/s<");
  char label[96];
  snprintf(label, sizeof label, "reshape %s", layout);
  expect_in("the SVG", s, label);
  expect_in("the SVG", s, ">fault<");
  /* Every rank the monitor flagged, as the metrics file says. */
  char *m = slurp(metrics, NULL);
  assert_non_null(m);
  /* The marks are the job's own: its lead wrote these event lines. */
  expect_in("the metrics", m, "{\"event\":\"fault\"");
  expect_in("the metrics", m, "{\"event\":\"reshape\"");
  int flagged = 0;
  for (const char *p = strstr(m, "\"state\":\"slow\""); p; p = strstr(p + 1, "\"state\":\"slow\"")) {
    const char *obj = p;
    while (obj > m && *obj != '{') obj--;
    int rank;
    if (sscanf(obj, "{\"rank\":%d,\"kind\":\"compute\"", &rank) != 1) continue;
    snprintf(label, sizeof label, "rank %d slow x", rank);
    expect_in("the SVG", s, label);
    flagged++;
  }
  print_message("reshape to %s at step %d; %d compute verdicts of slow marked\n", layout, reshape_step, flagged);
  free(m);
  free(s);
  assert_int_equal(scratch_remove(sdir), 0);
}

static int setup(void **state) {
  (void)state;
  build_path("tools/giant-plot", plot, sizeof plot);
  snprintf(dir, sizeof dir, "/tmp/giant-plot-test-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "inputs";
  const struct CMUnitTest inputs[] = {cmocka_unit_test(test_bad_inputs), cmocka_unit_test(test_cut_short),
                                      cmocka_unit_test(test_restart)};
  const struct CMUnitTest job[] = {cmocka_unit_test(test_job_sheet)};
  if (!strcmp(group, "job")) return gt_test_exit(cmocka_run_group_tests(job, setup, teardown));
  return gt_test_exit(cmocka_run_group_tests(inputs, setup, teardown));
}
