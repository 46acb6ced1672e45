/* examples/gpt saves and resumes through the checkpoint API. Alone: 12
 * steps saving every 5, then a run to step 20 given its directory through
 * GT_CKPT_* resumes from step 10, says so and that 2 steps were lost, and
 * logs steps 10..19 exactly as an uninterrupted run does. Under giantrun
 * (--ckpt-dir, --ckpt-every N, --max-restarts 1): a worker SIGKILLed at a
 * random step, the job still finishes, and the restarted generation lost
 * what docs/checkpoint-format.md promises: saves are asynchronous, so
 * when the newest save begun had not committed, besides the N steps
 * before it the steps it was in flight are lost too. From the logs: the
 * progress P (the checkpoint loaded plus the steps lost), the newest save
 * begun S = P - P mod N, and each commit with the step it was seen at.
 * And a worker that giantrun stops (SIGTERM) lets its save in flight
 * commit before it exits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"

enum { EVERY = 4 }; /* --ckpt-every under giantrun */

static char gpt[512], giantrun[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  build_path("launch/giantrun", giantrun, sizeof giantrun);
  return scratch_corpus("ckex", dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

static void run_gpt(const char *steps, const char *metrics, const char *flag_dir, char *const env[], run_result *r) {
  char *argv[40] = {gpt, "--corpus",   text, "--data",        data, "--steps",   (char *)steps,  "--layers",
                    "1", "--channels", "32", "--heads",       "4",  "--seq",     "16",           "--batch",
                    "4", "--sample",   "0",  "--print-every", "0",  "--metrics", (char *)metrics};
  int n = 23;
  if (flag_dir) {
    argv[n++] = "--ckpt-dir";
    argv[n++] = (char *)flag_dir;
    argv[n++] = "--ckpt-every";
    argv[n++] = "5";
  }
  argv[n] = NULL;
  run_cmd(argv, env, 120, r); /* at most 20 small steps: 1-2 s on busy cores */
  if (r->exit_code != 0) run_fail(r, "gpt --steps %s: exit %d, its output above", steps, r->exit_code);
}

/* The metrics line of `step`, up to its timing (which differs run to run). */
static void metrics_line(const char *path, int step, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[1024], want[32];
  snprintf(want, sizeof want, "{\"step\":%d,", step);
  out[0] = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, want, strlen(want))) {
      char *t = strstr(line, ",\"step_time_s\"");
      if (t) *t = 0;
      snprintf(out, cap, "%s", line);
    }
  fclose(f);
  assert_true(out[0] != 0);
}

static void test_example_resumes_exactly(void **state) {
  (void)state;
  char ref[128], first[128], second[128], ck[128], env_dir[160];
  snprintf(ref, sizeof ref, "%s/ref.jsonl", dir);
  snprintf(first, sizeof first, "%s/first.jsonl", dir);
  snprintf(second, sizeof second, "%s/second.jsonl", dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  snprintf(env_dir, sizeof env_dir, "GT_CKPT_DIR=%s", ck);
  run_result r;
  run_gpt("20", ref, NULL, NULL, &r);
  run_gpt("12", first, ck, NULL, &r);
  run_gpt("20", second, NULL, (char *[]){env_dir, "GT_CKPT_EVERY=5", NULL}, &r);
  if (!strstr(r.output, "resumed from") || !strstr(r.output, "step-00000010 (step 10") ||
      !strstr(r.output, "steps lost: 2"))
    run_fail(&r, "no resume line, its output above");
  for (int s = 10; s < 20; s++) {
    char a[1024], b[1024];
    metrics_line(ref, s, a, sizeof a);
    metrics_line(second, s, b, sizeof b);
    assert_string_equal(a, b);
  }
  print_message("resumed at step 10: steps 10..19 logged as the uninterrupted run logged them\n");
}

static void skip_without_etcd(void) {
  if (access("/usr/bin/etcd", X_OK) != 0 && system("command -v etcd >/dev/null 2>&1") != 0) {
    SKIP_CASE("etcd not found");
  }
}

/* giantrun on two workers (dp=2, a save every EVERY steps, one restart)
 * through a wrapper script `body`; returns where the output's resume line
 * is, with the step it loaded and the steps it lost. */
static const char *run_restarted(const char *name, const char *body, run_result *r, int *loaded, int *lost) {
  char wrapper[128], ck[128], every[16];
  snprintf(wrapper, sizeof wrapper, "%s/%s.sh", dir, name);
  snprintf(ck, sizeof ck, "%s/ck-%s", dir, name);
  snprintf(every, sizeof every, "%d", EVERY);
  FILE *f = fopen(wrapper, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n%s", body);
  fclose(f);
  chmod(wrapper, 0755);
  char *argv[] = {giantrun,
                  "--standalone",
                  "--nproc-per-node",
                  "2",
                  "--plan",
                  "dp=2",
                  "--max-restarts",
                  "1",
                  "--stop-grace",
                  "10",
                  "--ckpt-dir",
                  ck,
                  "--ckpt-every",
                  every,
                  "--ckpt-keep",
                  "2",
                  wrapper,
                  "--corpus",
                  text,
                  "--data",
                  data,
                  "--steps",
                  "30",
                  "--layers",
                  "1",
                  "--channels",
                  "32",
                  "--heads",
                  "4",
                  "--seq",
                  "16",
                  "--batch",
                  "4",
                  "--sample",
                  "0",
                  "--print-every",
                  "0",
                  NULL};
  /* 4-8 s on busy cores (a standalone etcd, two generations of 30 small
   * steps, a back-off and the slow saves the tests ask for): 240 s is
   * > 30x. --stop-grace 10: what a stopped rank does on its way out (the
   * rest of a save, at most the 3 s a test delays it by, then milliseconds
   * of writing) fits with 7 s to spare. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 240, r);
  if (r->exit_code != 0) run_fail(r, "giantrun: exit %d, its output above", r->exit_code);
  const char *p = strstr(r->output, "resumed from "), *q = p ? strstr(p, "steps lost: ") : NULL;
  if (!q || sscanf(p, "resumed from %*s (step %d", loaded) != 1 || sscanf(q, "steps lost: %d", lost) != 1)
    run_fail(r, "no resume line, its output above");
  assert_non_null(strstr(p, "over steps"));
  return p;
}

static void test_giantrun_restart_resumes(void **state) {
  (void)state;
  skip_without_etcd();
  SKIP_CASE_WITHOUT_FAULTS();
  /* A wrapper that SIGKILLs rank 1's gpt in the first generation once the
   * progress it records reaches a random step and a first checkpoint has
   * committed (`latest` exists): before that there is nothing to resume
   * from, and the restart starts at step 0, as it should. Steps take
   * milliseconds, so rank 1 stalls (GT_FAULT) one step after the chosen
   * one: the job cannot run past it before the wrapper, polling, acts.
   * The wrapper acts within a poll (0.05 s) of what it waits for, which
   * comes a few seconds after the start; the stall's 120 s and the
   * polling's 1200 rounds (60 s or more) are > 10x. */
  srand((unsigned)time(NULL));
  int kill_at = 6 + rand() % 10;
  char body[1280];
  snprintf(body, sizeof body,
           "if [ \"$GT_RESTART_COUNT\" = 0 ]; then GT_FAULT='stall:rank=1,at=%d,seconds=120'; export GT_FAULT; fi\n"
           "\"%s\" \"$@\" & pid=$!\n"
           "if [ \"$GT_RESTART_COUNT\" = 0 ] && [ \"$GT_RANK\" = 1 ]; then\n"
           "  for i in $(seq 1 1200); do\n"
           "    p=$(cat \"$GT_CKPT_DIR/progress\" 2>/dev/null || echo 0)\n"
           "    if [ \"$p\" -ge %d ] && [ -e \"$GT_CKPT_DIR/latest\" ]; then kill -9 $pid; break; fi\n"
           "    sleep 0.05\n"
           "  done\n"
           "fi\n"
           "wait $pid\n",
           kill_at + 1, gpt, kill_at);
  static run_result r;
  int loaded, lost;
  const char *p = run_restarted("killer", body, &r, &loaded, &lost);
  /* Generation 0's commits, before the resume: each seen at most N steps
   * after its own (the next save waits for it), none newer than the one loaded. */
  int newest = -1, worst = 0;
  for (const char *c = strstr(r.output, "checkpoint step-"); c && c < p; c = strstr(c + 1, "checkpoint step-")) {
    int x, y;
    if (sscanf(c, "checkpoint step-%d committed at step %d", &x, &y) != 2) continue;
    assert_true(y - x >= 0 && y - x <= EVERY);
    if (y - x > worst) worst = y - x;
    if (x > newest) newest = x;
  }
  int progress = loaded + lost, begun = progress - progress % EVERY;
  int in_flight = loaded == begun ? 0 : progress - begun; /* the newest save's steps uncommitted */
  print_message(
      "rank 1 killed at step %d or just after: progress %d, newest save begun at %d, loaded %d (newest "
      "commit logged %d, commits seen at most %d steps late); %d step(s) lost <= %d + %d\n",
      kill_at, progress, begun, loaded, newest, worst, lost, EVERY, in_flight);
  /* A commit that ended while rank 0 waited in the stalled step is not
   * logged before the kill; the one loaded is there all the same. */
  assert_true(newest <= loaded && loaded >= EVERY);
  assert_true(loaded == begun || loaded == begun - EVERY);
  assert_true(lost >= 0 && lost <= EVERY + in_flight);
}

/* The survivors' SIGTERM lets a save in flight commit: rank 0's writer
 * takes 3 s (GT_FAULT slowsave) over the save of step 8, rank 1 stalls at
 * step 10 until its wrapper sees steps 0-9 done (rank 0's progress, written
 * once its save of step 8 has begun) and rank 1's shard of step 8 written,
 * and SIGKILLs it; giantrun stops rank 0 while its writer sleeps. Rank 0 finishes the save on its way out, so the restart loads
 * step 8 and loses 2 steps, fewer than --ckpt-every; killed at once, it
 * would lose the 6 since step 4.
 *
 * Rank 0 is the wrapper's process (exec), so that giantrun waits for it
 * to finish its save on the way out. The shard's file is renamed into
 * place just before rank 1 reports it
 * through the store, one write of 1-20 ms on busy cores: the wrapper
 * waits 0.5 s (> 25x) after seeing it. The kill comes 0.5-1 s into rank
 * 0's 3 s delay; were it later, the save would commit before the stop and
 * the outcome would be the same, only not through the stop. */
static void test_giantrun_stop_commits_in_flight(void **state) {
  (void)state;
  skip_without_etcd();
  SKIP_CASE_WITHOUT_FAULTS();
  char body[2048];
  snprintf(body, sizeof body,
           "if [ \"$GT_RESTART_COUNT\" = 0 ]; then\n"
           "  GT_FAULT='slowsave:rank=0,seconds=3;stall:rank=1,at=10,seconds=120'; export GT_FAULT\n"
           "fi\n"
           "if [ \"$GT_RESTART_COUNT\" != 0 ] || [ \"$GT_RANK\" != 1 ]; then exec \"%s\" \"$@\"; fi\n"
           "\"%s\" \"$@\" & pid=$!\n"
           "for i in $(seq 1 1200); do\n"
           "  p=$(cat \"$GT_CKPT_DIR/progress\" 2>/dev/null || echo 0)\n"
           "  if [ \"$p\" -ge 10 ] && [ -e \"$GT_CKPT_DIR/step-00000008/shard-00001.bin\" ]; then\n"
           "    sleep 0.5; kill -9 $pid; break\n"
           "  fi\n"
           "  sleep 0.05\n"
           "done\n"
           "wait $pid\n",
           gpt, gpt);
  static run_result r;
  int loaded, lost;
  const char *p = run_restarted("stopped", body, &r, &loaded, &lost);
  print_message(
      "rank 1 died at step 10 with rank 0's save of step 8 in flight: the restart loaded step %d, "
      "%d step(s) lost\n",
      loaded, lost);
  if (loaded != 8 || lost != 2) fail_msg("loaded step %d, lost %d:\n%.*s", loaded, lost, (int)(p - r.output), r.output);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_example_resumes_exactly),
      cmocka_unit_test(test_giantrun_restart_resumes),
      cmocka_unit_test(test_giantrun_stop_commits_in_flight),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
