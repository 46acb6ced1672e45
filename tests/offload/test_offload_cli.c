/* Offloading from the command line: the example trains offloaded to the
 * same losses, a model that does not fit the device budget fails at start
 * with the budget's message and the way out, the same model trains
 * offloaded inside it, its optimizer state on disk trains inside a host
 * budget that the state does not fit, and --print-plan says where the
 * state lives and what the device will hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char gpt[512], tmpdir[64], data[160];

/* The longest run here (4 steps of an 8-layer, 128-channel GPT) takes
 * ~1 s on loaded cores, a few under ASan: 120 s is > 30x. A run refused at
 * start (a bad flag, a budget) takes ~10 ms: 60 s only bounds a hang. */
#define RUN_TIMEOUT_S 120
#define REFUSED_TIMEOUT_S 60

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  strcpy(tmpdir, "/tmp/giant-offload-XXXXXX");
  if (access(gpt, X_OK) != 0 || !mkdtemp(tmpdir)) return -1;
  char text[128];
  snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
  snprintf(data, sizeof data, "%s/corpus.tok", tmpdir);
  FILE *f = fopen(text, "w");
  if (!f) return -1;
  for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d\n%%\n", i % 10);
  fclose(f);
  /* Tokenized once by a first short run. */
  run_result r;
  run_cmd((char *[]){gpt, "--corpus", text, "--data", data, "--steps", "1", "--layers", "1", "--channels", "32",
                     "--seq", "32", "--sample", "0", NULL},
          NULL, RUN_TIMEOUT_S, &r);
  return r.exit_code == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void run_ok(char *const argv[], run_result *r) {
  run_cmd(argv, NULL, RUN_TIMEOUT_S, r);
  if (r->exit_code != 0) run_fail(r, "exit %d, its output above", r->exit_code);
}

/* Every step's loss and norm as printed, and the summary line, alike. */
static void same_losses(const run_result *plain, const run_result *off, int steps) {
  for (int step = 0; step < steps; step++) {
    char key[32];
    snprintf(key, sizeof key, "step %5d | loss", step);
    const char *a = strstr(plain->output, key), *b = strstr(off->output, key);
    assert_non_null(a);
    assert_non_null(b);
    const char *ea = strstr(a, " ms"), *eb = strstr(b, " ms");
    assert_non_null(ea);
    assert_non_null(eb);
    /* "loss X | lr Y | grad norm Z | T ms": everything before the time. */
    const char *ta = ea, *tb = eb;
    while (ta > a && ta[-1] != '|') ta--;
    while (tb > b && tb[-1] != '|') tb--;
    assert_int_equal(ta - a, tb - b);
    assert_memory_equal(a, b, (size_t)(ta - a));
  }
  const char *la = strstr(plain->output, "\nloss "), *lb = strstr(off->output, "\nloss ");
  assert_non_null(la);
  assert_non_null(lb);
  assert_memory_equal(la, lb, strcspn(la + 1, "\n") + 1);
}

static void test_same_losses(void **state) {
  (void)state;
  run_result plain, off;
  run_ok((char *[]){gpt,  "--data",  data, "--steps",  "12", "--layers",      "3", "--channels", "32", "--seq",
                    "32", "--accum", "2",  "--sample", "0",  "--print-every", "1", "--threads",  "1",  NULL},
         &plain);
  run_ok((char *[]){gpt,  "--data",    data, "--steps",   "12", "--layers", "3", "--channels",
                    "32", "--seq",     "32", "--accum",   "2",  "--sample", "0", "--print-every",
                    "1",  "--threads", "1",  "--offload", "2",  NULL},
         &off);
  assert_non_null(strstr(off.output, ", offloaded"));
  assert_null(strstr(plain.output, ", offloaded"));
  same_losses(&plain, &off, 12);
}

static void test_budget(void **state) {
  (void)state;
  run_result r;
  char *const big[] = {gpt,  "--data",  data, "--steps",  "3", "--layers",  "8", "--channels",       "128", "--seq",
                       "16", "--batch", "1",  "--sample", "0", "--threads", "1", "--device-mem-mib", "8",   NULL};
  run_cmd(big, NULL, RUN_TIMEOUT_S, &r);
  if (r.exit_code != 1 || !strstr(r.output, "device memory budget exceeded") || !strstr(r.output, "--offload W"))
    run_fail(&r, "exit %d (wanted 1 with the budget's message), its output above", r.exit_code);
  char *const off[] = {gpt,  "--data",  data, "--steps",  "3", "--layers",  "8", "--channels",       "128", "--seq",
                       "16", "--batch", "1",  "--sample", "0", "--threads", "1", "--device-mem-mib", "8",   "--offload",
                       "1",  NULL};
  run_ok(off, &r);
  assert_non_null(strstr(r.output, ", offloaded"));
  assert_non_null(strstr(r.output, "\nloss "));
}

/* The optimizer state on disk: a host budget that holds the weights and
 * gradients but not the moments fails at start with the way out; with the
 * state on disk the same budget trains, to the same losses as in memory. */
static void test_disk_tier(void **state) {
  (void)state;
  char disk[128];
  snprintf(disk, sizeof disk, "disk:%s", tmpdir);
#define DISK_MODEL                                                                                          \
  gpt, "--data", data, "--steps", "4", "--layers", "8", "--channels", "128", "--seq", "16", "--batch", "1", \
      "--sample", "0", "--threads", "1", "--print-every", "1", "--offload", "1"
  run_result plain, r;
  run_ok((char *[]){DISK_MODEL, NULL}, &plain);
  /* About 1.6 M parameters: 13 MB of weights and gradients, 13 MB of moments. */
  run_cmd((char *[]){DISK_MODEL, "--host-mem-mib", "16", NULL}, NULL, RUN_TIMEOUT_S, &r);
  if (r.exit_code != 1 || !strstr(r.output, "host memory budget exceeded") ||
      !strstr(r.output, "--offload-optimizer disk:DIR"))
    run_fail(&r, "exit %d (wanted 1 with the host budget's message), its output above", r.exit_code);
  run_ok((char *[]){DISK_MODEL, "--host-mem-mib", "16", "--offload-optimizer", disk, NULL}, &r);
  same_losses(&plain, &r, 4);
  /* Bad values say what is wanted; a missing directory fails at start. */
  run_cmd((char *[]){DISK_MODEL, "--offload-optimizer", "nvme", NULL}, NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.output, "--offload-optimizer takes disk:DIR"));
  run_cmd((char *[]){DISK_MODEL, "--offload-optimizer", "disk:", NULL}, NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 2);
  char missing[160];
  snprintf(missing, sizeof missing, "disk:%s/missing", tmpdir);
  run_cmd((char *[]){DISK_MODEL, "--offload-optimizer", missing, NULL}, NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.output, "cannot create a file in"));
  assert_null(strstr(r.output, "step     0"));
#undef DISK_MODEL
}

static void test_print_plan(void **state) {
  (void)state;
  run_result r;
  run_ok((char *[]){gpt, "--data", data, "--print-plan", "--layers", "4", "--channels", "64", "--seq", "32",
                    "--threads", "1", "--offload", "2", "--device-mem-mib", "64", NULL},
         &r);
  const char *head = "device memory, expected peak per rank (one micro-batch in flight; budget 64.0 MiB): ";
  assert_non_null(strstr(r.output, head));
  assert_non_null(strstr(r.output, "parameters 0.0 MiB, gradients 0.0 MiB, optimizer state 0.0 MiB"));
  /* Four blocks between the embedding and the final LayerNorm and head. */
  assert_non_null(strstr(r.output, "the device holds 2 of 7 layers' weights, prefetching 1 ahead"));
  assert_non_null(strstr(r.output, "transfers a step:"));
  /* Each tensor says where it lives; the planner counts the window. */
  assert_non_null(strstr(r.output, "[host; device in a window slot]"));
  assert_non_null(strstr(r.output,
                         "offloaded: parameters, gradients and optimizer state live in host memory; the "
                         "device holds the weights of 2 layers at a time"));
  assert_non_null(strstr(r.output, "(offloaded: the window and activations)"));
  assert_non_null(strstr(r.output, "offloaded, window 2:"));
  double slots = 0, total = 0;
  const char *p = strstr(r.output, "offload slots ");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "offload slots %lf MiB", &slots), 1);
  assert_int_equal(sscanf(strstr(r.output, head) + strlen(head), "%lf MiB", &total), 1);
  assert_true(slots > 0 && total > slots);
  run_ok((char *[]){gpt, "--data", data, "--print-plan", "--layers", "4", "--channels", "64", "--seq", "32",
                    "--threads", "1", NULL},
         &r);
  assert_non_null(strstr(r.output, "master weights, gradients and optimizer state on the device"));
  assert_null(strstr(r.output, "window slot"));
  assert_non_null(strstr(r.output, "offload slots 0.0 MiB"));
}

static void test_bad_flags(void **state) {
  (void)state;
  run_result r;
  run_cmd((char *[]){gpt, "--offload", "-1", NULL}, NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.output, "--offload"));
  run_cmd((char *[]){gpt, "--device-mem-mib", "lots", NULL}, NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.output, "--device-mem-mib wants an integer"));
  /* A reshape rebuilds the trainer from its peers, without the delayed
   * update's held gradients. */
  run_cmd((char *[]){gpt, "--data", data, "--offload", "1", "--delayed-update", "--reshape", NULL}, NULL,
          REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.output, "--delayed-update holds a step's gradients"));
  assert_non_null(strstr(r.output, "leave out --reshape"));
  /* The update layer by layer refuses clipping, saying so. */
  run_cmd((char *[]){gpt, "--data", data, "--steps", "1", "--layers", "1", "--channels", "32", "--seq", "32",
                     "--sample", "0", "--offload", "1", "--update-per-layer", NULL},
          NULL, REFUSED_TIMEOUT_S, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.output, "needs grad_clip = 0"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_losses), cmocka_unit_test(test_budget),    cmocka_unit_test(test_disk_tier),
      cmocka_unit_test(test_print_plan),  cmocka_unit_test(test_bad_flags),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
