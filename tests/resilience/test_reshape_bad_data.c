/* Bad input under giantrun --reshape ends the job, at once and with the
 * worker's error, instead of restarting the failed worker alone into a
 * job that has no rank left (which waited forever).
 *
 * Two agents of one worker each (--nnodes 2, --reshape, --max-restarts 3)
 * train a program on a token file that is: of a wrong magic; cut short in
 * its header; holding a token id past its vocabulary; missing; or cut
 * short while training. Each worker reports the error and exits 65 (bad
 * input data, GT_RUN_EXIT_INPUT), which giantrun never retries: both
 * agents exit 1, naming the error, and no worker is restarted. Training
 * that diverges (a NaN loss every rank sees) ends the job alike. Both
 * programs are tried, examples/gpt and examples/custom_layer: neither has
 * any of this code of its own. */
#include <signal.h>
#include <sys/stat.h>

#include "giant/data.h"
#include "common/run_cmd.h"
#include "launch/launch_test.h"
#include "common/gt_test.h"
#include "localkit/etcd_server.h"

static etcd_fixture fx;
static char dir[64];

static int setup(void **state) {
  (void)state;
  setenv("OMP_NUM_THREADS", "1", 1);
  snprintf(dir, sizeof dir, "/tmp/giant-baddata-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  rm_rf(dir);
  return 0;
}

/* A good token file of n byte tokens. */
static void write_tokens(const char *path, int n) {
  uint32_t *tok = malloc((size_t)n * sizeof *tok);
  assert_non_null(tok);
  for (int i = 0; i < n; i++) tok[i] = (uint32_t)((i * 7 + i / 13) % 256);
  assert_int_equal(gt_tokfile_write(path, tok, (uint64_t)n, 256, GT_TOKFILE_NO_SEP), GT_OK);
  free(tok);
}

/* Overwrites len bytes at offset of path. */
static void patch(const char *path, long offset, const void *bytes, size_t len) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, offset, SEEK_SET), 0);
  assert_int_equal(fwrite(bytes, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

/* DIVERGING is good data that training cannot get past: a NaN loss at
 * step 3 (GT_FAULT) with --skip-nonfinite 0 fails that step on every rank
 * alike, which exits 70 (GT_RUN_EXIT_DIVERGED). */
typedef enum { WRONG_MAGIC, SHORT_HEADER, TOKEN_PAST_VOCAB, MISSING, TRUNCATED_IN_USE, DIVERGING } damage;

static const char *prepare(damage d, const char *path) {
  switch (d) {
    case WRONG_MAGIC:
      write_tokens(path, 20000);
      patch(path, 0, "NOTATOKN", 8);
      return "magic";
    case SHORT_HEADER: {
      FILE *f = fopen(path, "wb");
      assert_non_null(f);
      fwrite("GIANTTOK\1\0\0\0", 1, 12, f);
      fclose(f);
      return "truncated";
    }
    case TOKEN_PAST_VOCAB: {
      write_tokens(path, 20000);
      unsigned char v = 200; /* the header's vocabulary: 200, while ids reach 255 */
      patch(path, 24, &v, 1);
      patch(path, 25, "\0\0\0", 3);
      return "vocabulary";
    }
    case MISSING: /* examples/gpt makes a missing file from --corpus: that is missing too */
      unlink(path);
      return strrchr(path, '/') + 1;
    case TRUNCATED_IN_USE: write_tokens(path, 200000); return "truncated or replaced while in use";
    case DIVERGING: write_tokens(path, 20000); return "loss nan";
  }
  return NULL;
}

/* Bounds: a bad file fails a worker in milliseconds after it starts (0.3-1 s
 * under load); the other agent learns the job failed at its next poll of
 * etcd. START_S + RUN_S is > 100x. A training step here is ~10 ms; the job
 * is long (100000 steps) so that it is truncated mid-way. */
static void play(const char *program, damage d) {
  char prog[512], path[128], log[160], ck[128];
  build_path(program, prog, sizeof prog);
  snprintf(path, sizeof path, "%s/data-%d.tok", dir, (int)d);
  snprintf(ck, sizeof ck, "%s/ck-%s-%d", dir, strrchr(program, '/') + 1, (int)d);
  const char *words = prepare(d, path);
  char job[64];
  snprintf(job, sizeof job, "bad-%s-%d", strrchr(program, '/') + 1, (int)d);
  agent a[2];
  bool gpt = strstr(program, "gpt") != NULL;
  for (int i = 0; i < 2; i++) {
    snprintf(log, sizeof log, "%s/%s-agent%d.log", dir, job, i);
    const char *args[64] = {"--nnodes",
                            "2",
                            "--nproc-per-node",
                            "1",
                            "--rdzv-endpoint",
                            fx.endpoint,
                            "--job-id",
                            job,
                            "--node-id",
                            i ? "y" : "x",
                            "--rdzv-ttl",
                            LIVE_TTL,
                            "--max-restarts",
                            "3",
                            "--stop-grace",
                            "2",
                            "--reshape",
                            "--ckpt-dir",
                            ck,
                            "--ckpt-every",
                            "50",
                            prog,
                            "--data",
                            path,
                            "--steps",
                            "100000",
                            "--seq",
                            "16",
                            "--batch",
                            "2",
                            "--print-every",
                            "1",
                            "--channels",
                            "32",
                            "--plan",
                            "dp=2"};
    int n = 0;
    while (args[n]) n++;
    char corpus[128];
    snprintf(corpus, sizeof corpus, "%s/no-such-corpus", dir);
    const char *gpt_args[] = {"--layers", "1", "--heads", "2", "--sample", "0", "--corpus", corpus, NULL};
    for (int k = 0; gpt && gpt_args[k]; k++) args[n++] = gpt_args[k];
    if (d == DIVERGING) {
      args[n++] = "--skip-nonfinite";
      args[n++] = "0";
      setenv("GT_FAULT", "nan:rank=0,at=3", 1);
    }
    assert_int_equal(agent_start(&a[i], log, args), 0);
    unsetenv("GT_FAULT");
  }
  if (d == TRUNCATED_IN_USE) {
    /* Training under way, then the file cut to its first 100 tokens. */
    if (!log_has(&a[0], "step     2", START_S + RUN_S)) {
      dump_log(&a[0]);
      dump_log(&a[1]);
      fail_msg("%s: no step 2 within %d s", program, START_S + RUN_S);
    }
    assert_int_equal(truncate(path, GT_TOKFILE_HEADER_BYTES + 100), 0);
  }
  for (int i = 0; i < 2; i++) expect_exit(&a[i], 1, START_S + RUN_S);
  bool named = false;
  for (int i = 0; i < 2; i++) {
    char *text = slurp(a[i].log);
    assert_non_null(text);
    if (strstr(text, "restarted alone") || strstr(text, "restart 1:")) {
      dump_log(&a[i]);
      fail_msg("%s: a worker with bad input was restarted", program);
    }
    const char *why = d == DIVERGING ? "training diverged" : "bad input data";
    named |= strstr(text, words) != NULL && strstr(text, why) != NULL;
    free(text);
  }
  if (!named) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("%s: neither agent's log names the error ('%s') and why the job ends", program, words);
  }
  /* Nothing of the job left running ("[/]tmp/...": a pattern that the
   * shell running pgrep, whose command line holds it, does not match). */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "pgrep -f '[%c]%s' >/dev/null", path[0], path + 1);
  double end = mono_now() + GONE_S;
  while (system(cmd) == 0 && mono_now() < end) usleep(50000);
  if (system(cmd) == 0) fail_msg("%s: processes reading %s are still running", program, path);
}

/* The divergence is a NaN from GT_FAULT: the last damage, played only on a
 * build with fault points. */
static damage last_damage(void) {
  if (GT_TEST_FAULTS) return DIVERGING;
  print_message("this build has no fault points (configure with -DGIANT_FAULTS=ON): no divergence\n");
  return TRUNCATED_IN_USE;
}

static void test_gpt_bad_files(void **state) {
  (void)state;
  damage last = last_damage();
  for (int d = WRONG_MAGIC; d <= (int)last; d++) play("examples/gpt", (damage)d);
}

static void test_custom_layer_bad_files(void **state) {
  (void)state;
  damage last = last_damage();
  for (int d = WRONG_MAGIC; d <= (int)last; d++) play("examples/custom_layer", (damage)d);
}

int main(void) {
  if (access("/usr/bin/etcd", X_OK) != 0 && system("command -v etcd >/dev/null 2>&1") != 0) {
    fprintf(stderr, "etcd not found: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt_bad_files),
      cmocka_unit_test(test_custom_layer_bad_files),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
