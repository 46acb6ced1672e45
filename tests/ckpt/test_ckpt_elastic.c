/* A job that loses a node and gets it back resumes from its checkpoints at
 * each new world size, resharded to the layout --plan auto chooses there.
 *
 * Two giantrun agents (--nnodes 1:2, two workers each; the first round
 * waits up to --rdzv-settle 8 s for both) against one etcd
 * train examples/gpt with --plan auto, a global batch of 8 rows and a
 * checkpoint every 4 steps. Generation 0 (world 4) stalls at step 10
 * (GT_FAULT, set by a wrapper for that generation only) once the save of
 * step 8 is under way; when it has committed, agent y is SIGKILLed: its node
 * is gone. Agent x re-forms alone: generation 1 has world 2, the planner
 * picks a layout for it, and the workers load step 8 resharded. It stalls
 * at step 14; once step 12 has committed, agent y starts again and is
 * admitted: generation 2 has world 4 again, loads step 12 and finishes.
 *
 * Checked: each generation's world and layout, that each resume names the
 * checkpoint it loaded, the layout it was taken at (the previous
 * generation's) and the steps lost, that the job reaches its last step, and
 * that the last loss is within the cross-layout tolerance (1e-5, relative)
 * of one process that trained the same 24 steps without interruption: the
 * global batch and the sample stream are the same at every layout. */
#include <math.h>
#include <signal.h>
#include <sys/stat.h>

#include "common/run_cmd.h"
#include "launch/launch_test.h"
#include "common/gt_test.h"
#include "localkit/etcd_server.h"

enum { STEPS = 24, EVERY = 4 };

static etcd_fixture fx;
static char gpt[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  setenv("OMP_NUM_THREADS", "1", 1); /* workers and the reference alike */
  if (scratch_corpus("ckel", dir, text, data) != 0) return -1;
  return etcd_fixture_start(&fx, NULL);
}

static int teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return scratch_remove(dir);
}

#define GPT_ARGS                                                                                                   \
  "--corpus", text, "--data", data, "--steps", "24", "--layers", "1", "--channels", "32", "--heads", "4", "--seq", \
      "16", "--global-batch", "8", "--sample", "0", "--print-every", "0"

/* The final loss of a "loss A -> B over steps S..E" line at or after p. */
static float final_loss(const char *p, int *from, const char *all) {
  const char *l = strstr(p, "] loss ");
  if (!l) l = strstr(p, "loss ");
  float a, b;
  int to;
  if (!l || sscanf(strchr(l, 'l'), "loss %f -> %f over steps %d..%d", &a, &b, from, &to) != 4 || to != STEPS)
    text_fail("the agents' logs", all, "no final loss line in the agents' logs (printed above)");
  return b;
}

static float reference_loss(void) {
  char *argv[] = {gpt, GPT_ARGS, NULL};
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 120, r); /* 24 small steps: 1-2 s on busy cores */
  if (r->exit_code != 0) run_fail(r, "reference run: exit %d, its output above", r->exit_code);
  int from;
  float loss = final_loss(r->output, &from, r->output);
  free(r);
  return loss;
}

/* --rdzv-ttl LIVE_TTL (5 s): x's workers train flat out beside the agent,
 * whose renewals must not stall for 3.3 s meanwhile; y's loss is seen 5 s
 * after its last renewal. --rdzv-settle 8 s: the two agents register
 * 0.1-0.3 s apart, so the first round takes both; generation 1, x alone,
 * waits it out once. */
static void start_agent(agent *a, const char *node, const char *wrapper, const char *ck, int round) {
  char log[256];
  snprintf(log, sizeof log, "%s/agent-%s-%d.log", dir, node, round);
  const char *args[] = {"--nnodes",
                        "1:2",
                        "--nproc-per-node",
                        "2",
                        "--rdzv-endpoint",
                        fx.endpoint,
                        "--job-id",
                        "elastic",
                        "--node-id",
                        node,
                        "--rdzv-ttl",
                        LIVE_TTL,
                        "--rdzv-settle",
                        "8",
                        "--max-restarts",
                        "3",
                        "--stop-grace",
                        "2",
                        "--rdzv-timeout",
                        "60",
                        "--hang-timeout",
                        "300",
                        "--plan",
                        "auto",
                        "--ckpt-dir",
                        ck,
                        "--ckpt-every",
                        "4",
                        wrapper,
                        GPT_ARGS,
                        NULL};
  assert_int_equal(agent_start(a, log, args), 0);
}

/* Waits until the file `name` under ck begins with `want`. */
static int wait_file(const char *ck, const char *name, const char *want, double timeout_s) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", ck, name);
  for (double end = mono_now() + timeout_s; mono_now() < end; usleep(20000)) {
    char *s = slurp(path);
    int ok = s && !strncmp(s, want, strlen(want));
    free(s);
    if (ok) return 1;
  }
  return 0;
}

/* Waits until `latest` under ck names `step`, then until the progress
 * file says the job reached `stalled`, where a stall holds it: the save of
 * `step` is written behind the steps after it, so its commit can come
 * before the job has reached the stall (beside a CPU hog it did, and the
 * kill then lost one step, not two). */
static int wait_latest(const char *ck, int step, int stalled, double timeout_s) {
  char want[32];
  snprintf(want, sizeof want, "step-%08d", step);
  double end = mono_now() + timeout_s;
  if (!wait_file(ck, "latest", want, timeout_s)) return 0;
  snprintf(want, sizeof want, "%d\n", stalled);
  return wait_file(ck, "progress", want, end - mono_now());
}

/* The n-th (from 0) "world W = dp D x tp T x pp P" line of rank 0. */
static void layout_of(const char *log, int n, int *world, int l[3]) {
  const char *p = log;
  for (int i = 0; i <= n; i++) {
    p = strstr(p, "; world ");
    if (!p) text_fail("the agent's log", log, "fewer than %d generations started (the log above)", n + 1);
    p++;
  }
  assert_int_equal(sscanf(p, " world %d = dp %d x tp %d x pp %d", world, &l[0], &l[1], &l[2]), 4);
}

/* The n-th resume line: the checkpoint's step, its layout and the steps lost. */
static void resume_of(const char *log, const char *ck, int n, int *step, int l[3], int *lost) {
  const char *p = log;
  for (int i = 0; i <= n; i++) {
    p = strstr(p, "resumed from ");
    if (!p) text_fail("the agent's log", log, "fewer than %d resumes (the log above)", n + 1);
    p++;
  }
  char path[256], want[300];
  assert_int_equal(sscanf(p, "esumed from %255s (step %d, taken at dp=%d,tp=%d,pp=%d", path, step, &l[0], &l[1], &l[2]),
                   5);
  snprintf(want, sizeof want, "%s/step-%08d", ck, *step);
  assert_string_equal(path, want);
  const char *q = strstr(p, "steps lost: ");
  assert_non_null(q);
  assert_int_equal(sscanf(q, "steps lost: %d", lost), 1);
}

static void test_shrink_and_grow_resume_resharded(void **state) {
  (void)state;
  float ref = reference_loss();
  char wrapper[128], ck[128];
  snprintf(wrapper, sizeof wrapper, "%s/stall.sh", dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  FILE *f = fopen(wrapper, "w");
  assert_non_null(f);
  fprintf(f,
          "#!/bin/sh\n"
          "case \"$GT_GENERATION\" in\n"
          "  0) GT_FAULT='stall:rank=all,at=10,seconds=120'; export GT_FAULT ;;\n"
          "  1) GT_FAULT='stall:rank=all,at=14,seconds=120'; export GT_FAULT ;;\n"
          "esac\n"
          "exec \"%s\" \"$@\"\n",
          gpt);
  fclose(f);
  chmod(wrapper, 0755);

  /* Each wait below is for a generation to start and train a few small
   * steps (2-10 s on busy cores, a TTL and the settle time included): 120 s
   * is > 10x. The stalls (120 s) pin the progress until the test acts,
   * which it does within milliseconds of what it waits for. */
  agent x, y, y2;
  start_agent(&x, "x", wrapper, ck, 0);
  start_agent(&y, "y", wrapper, ck, 0);
  if (!wait_latest(ck, 8, 10, 120)) {
    dump_log(&x);
    dump_log(&y);
    fail_msg("generation 0 did not commit step 8 and reach its stall at step 10 within 120 s");
  }
  kill(y.pid, SIGKILL); /* the node is gone, its workers with it */
  assert_int_equal(agent_wait(&y, STOP_S), 128 + SIGKILL);
  if (!wait_latest(ck, 12, 14, 120)) {
    dump_log(&x);
    fail_msg("generation 1 did not commit step 12 and reach its stall at step 14 within 120 s");
  }
  start_agent(&y2, "y", wrapper, ck, 1); /* the node comes back */
  expect_exit(&x, 0, 120);
  expect_exit(&y2, 0, 60);

  char *log = slurp(x.log);
  assert_non_null(log);
  int world[3], l[3][3], step[2], from[2][3], lost[2];
  for (int g = 0; g < 3; g++) layout_of(log, g, &world[g], l[g]);
  for (int k = 0; k < 2; k++) resume_of(log, ck, k, &step[k], from[k], &lost[k]);
  print_message(
      "world %d at dp=%d,tp=%d,pp=%d -> world %d at dp=%d,tp=%d,pp=%d (step %d, %d lost) -> world %d at "
      "dp=%d,tp=%d,pp=%d (step %d, %d lost)\n",
      world[0], l[0][0], l[0][1], l[0][2], world[1], l[1][0], l[1][1], l[1][2], step[0], lost[0], world[2], l[2][0],
      l[2][1], l[2][2], step[1], lost[1]);
  assert_int_equal(world[0], 4);
  assert_int_equal(world[1], 2);
  assert_int_equal(world[2], 4);
  assert_true(memcmp(l[0], l[1], sizeof l[0]) != 0);
  /* Each generation loaded the newest checkpoint, taken by the one before
   * at its layout; the stall pinned the progress 2 steps past it. */
  assert_int_equal(step[0], 8);
  assert_memory_equal(from[0], l[0], sizeof l[0]);
  assert_int_equal(lost[0], 2);
  assert_int_equal(step[1], 12);
  assert_memory_equal(from[1], l[1], sizeof l[1]);
  assert_int_equal(lost[1], 2);
  const char *last = strstr(strstr(log, "resumed from ") + 1, "resumed from ");
  int start;
  float loss = final_loss(last, &start, log);
  assert_int_equal(start, 12);
  print_message("final loss %.6f, uninterrupted one process %.6f (relative difference %.2e)\n", loss, ref,
                fabs((double)loss - ref) / ref);
  if (fabsf(loss - ref) > 1e-5f * fabsf(ref)) fail_msg("final loss %.7f, uninterrupted %.7f", loss, ref);
  free(log);
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  if (!etcd_fixture_available()) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_shrink_and_grow_resume_resharded)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
