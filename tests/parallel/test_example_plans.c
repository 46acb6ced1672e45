/* examples/gpt under giantrun at several plans: the same model code trains at
 * every layout, layouts that see the same data agree with one process (and
 * replicas with uneven shares by --speeds with even ones), and a
 * plan that cannot work fails before training with the constraint named. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char giantrun[512], gpt[512], dir[64], text[128], data[128];

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("plans", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* Runs the example on `nproc` workers at `plan` (with extra flags, one
 * flag and its value per word), into *r; fails unless it exits with
 * want_exit and prints each of `words` (NULL-terminated, may be NULL). */
static char agent_flag[2][32]; /* one giantrun flag and its value (or "") for the next run, or "" */
static char *transport_env;    /* the workers' GT_COMM_TRANSPORT=..., or NULL */

static void run_example(int nproc, const char *plan, const char *extra, int want_exit, const char *const *words,
                        run_result *r) {
  char np[16];
  snprintf(np, sizeof np, "%d", nproc);
  char *argv[40] = {giantrun, "--standalone", "--nproc-per-node", np, "--plan", (char *)plan};
  int n = 6;
  if (agent_flag[0][0]) argv[n++] = agent_flag[0];
  if (agent_flag[0][0] && agent_flag[1][0]) argv[n++] = agent_flag[1];
  char *tail[] = {gpt, "--corpus",   text, "--data",        data, "--steps", "8",  "--layers",
                  "2", "--channels", "32", "--heads",       "4",  "--seq",   "16", "--batch",
                  "4", "--sample",   "0",  "--print-every", "0"};
  for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) argv[n++] = tail[i];
  char flags[256];
  snprintf(flags, sizeof flags, "%s", extra ? extra : "");
  for (char *save = NULL, *w = strtok_r(flags, " ", &save); w && n < 38; w = strtok_r(NULL, " ", &save)) argv[n++] = w;
  argv[n] = NULL;
  /* A standalone etcd and a few small steps on up to four workers: 1-3 s
   * on busy cores; 120 s is > 40x. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", transport_env, NULL}, 120, r);
  bool missing = false;
  for (int i = 0; words && words[i]; i++) missing |= !strstr(r->output, words[i]);
  if (r->exit_code != want_exit || missing)
    run_fail(r, "plan %s%s%s: exit %d (wanted %d)%s, its output above", plan, extra ? " " : "", extra ? extra : "",
             r->exit_code, want_exit, missing ? ", a line missing" : "");
}

/* Runs the example on `nproc` workers at `plan` (with extra flags) and
 * returns its final loss. */
static float run_plan(int nproc, const char *plan, const char *extra, int want_exit, const char *want_words) {
  static run_result r;
  const char *words[] = {want_words, NULL};
  run_example(nproc, plan, extra, want_exit, words, &r);
  if (want_exit != 0) return NAN;
  const char *p = strstr(r.output, "] loss ");
  float first, last;
  if (!p || sscanf(p, "] loss %f -> %f", &first, &last) != 2) run_fail(&r, "no loss line, its output above");
  assert_true(last < first);
  print_message("%-10s %-16s loss %.6f -> %.6f\n", plan, extra ? extra : "", first, last);
  return last;
}

static void close_to(float a, float b) {
  if (fabsf(a - b) > 1e-5f * fabsf(b)) fail_msg("losses differ: %.7f vs %.7f", a, b);
}

static void test_every_layout_trains_and_agrees(void **state) {
  (void)state;
  /* One replica: one process, tp=2, tp=4 and sequence parallelism see the same batches. */
  float one = run_plan(1, "auto", NULL, 0, NULL);
  close_to(run_plan(2, "tp=2", NULL, 0, NULL), one);
  close_to(run_plan(4, "tp=4", "--seq-parallel", 0, NULL), one);
  /* Two replicas read two shards: dp=2 with and without tensor parallelism agree. */
  float dp2 = run_plan(2, "dp=2", NULL, 0, NULL);
  close_to(run_plan(4, "dp=2,tp=2", "--zero1", 0, NULL), dp2);
  /* Replicas of unequal speed take 5 and 3 of every 8 rows, the same 8 rows
   * the even replicas take, and every token weighs the same. */
  close_to(run_plan(2, "dp=2", "--speeds 1,0.5", 0, NULL), dp2);
  run_plan(4, "dp=4", "--zero1", 0, NULL);
}

/* giantrun --comm-integrity mac: every payload between the ranks carries
 * its tag too, and training is the same; so with --comm-encrypt. */
static void test_payload_integrity_trains_the_same(void **state) {
  (void)state;
  float plain = run_plan(4, "dp=2,tp=2", "--no-overlap", 0, NULL);
  snprintf(agent_flag[0], sizeof agent_flag[0], "--comm-integrity");
  snprintf(agent_flag[1], sizeof agent_flag[1], "mac");
  close_to(run_plan(4, "dp=2,tp=2", "--no-overlap", 0, NULL), plain);
  snprintf(agent_flag[1], sizeof agent_flag[1], "sha1");
  run_plan(2, "dp=2", NULL, 2, "--comm-integrity 'sha1': use headers or mac");
  /* giantrun --comm-encrypt, over TCP (the shared memory a node's workers
   * would use is not encrypted): every payload encrypted, the same
   * training. */
  snprintf(agent_flag[0], sizeof agent_flag[0], "--comm-encrypt");
  agent_flag[1][0] = 0;
  transport_env = "GT_COMM_TRANSPORT=tcp";
  close_to(run_plan(4, "dp=2,tp=2", "--no-overlap", 0, NULL), plain);
  transport_env = NULL;
  agent_flag[0][0] = 0;
}

static void test_plans_that_cannot_work_are_refused(void **state) {
  (void)state;
  run_plan(4, "tp=3", NULL, 1, "does not divide the world size 4");
  run_plan(4, "tp=8", NULL, 1, "does not divide the world size 4");
  run_plan(2, "dp=2,sp=1", NULL, 1, "unknown factor 'sp'");
  run_plan(2, "dp=2", "--seq-parallel", 1, "sequence parallelism needs tensor parallelism");
}

/* The example's annotations (--annotate) decide what --plan leaves open,
 * --print-plan says where each decision came from, and a conflict stops
 * the job before training with the layer it concerns. */
static void test_annotations_drive_the_example(void **state) {
  (void)state;
  static run_result r;
  /* Whale's replicated embedding (and first block) before a body split four
   * ways, laid out by the annotations alone, sees one process's batches. */
  float one = run_plan(1, "auto", "--untied", 0, NULL);
  close_to(run_plan(4, "auto", "--untied --annotate embed,split=4", 0, NULL), one);
  run_example(
      4, "auto", "--untied --annotate embed,split=4 --print-plan", 0,
      (const char *[]){"decide dp=1 from planner (auto)", "decide tp=4 from annotation (split(4) from 'h1')",
                       "decide pp=1 from planner", "decide replicate=embed..h0 over 4 ranks from annotation", NULL},
      &r);
  /* A flag beats an annotation; the planner fills the rest. */
  run_example(4, "tp=2", "--annotate split=4 --print-plan", 0,
              (const char *[]){"decide tp=2 from flag", "decide dp=2 from planner", NULL}, &r);
  run_example(
      4, "auto", "--annotate replicate=2 --print-plan", 0,
      (const char *[]){"decide dp=2 from annotation (replicate(2) around the model)", "from planner (auto)", NULL}, &r);
  run_example(2, "auto", "--annotate stages=2,pipeline=4 --print-plan", 0,
              (const char *[]){"decide pp=2 from annotation (2 stage scopes from 'embed')",
                               "decide micro-batches=4 from annotation (pipeline(4) from 'embed')",
                               "decide stages=0-2|3-4 from annotation", NULL},
              &r);
  run_example(2, "auto", "--annotate stages=2,pipeline=4 --accum 2 --print-plan", 0,
              (const char *[]){"decide micro-batches=2 from flag", NULL}, &r);
  /* pipeline(4) runs four micro-batches a step. */
  run_example(2, "auto", "--annotate stages=2,pipeline=4", 0, (const char *[]){"x 4 micro-batches per replica", NULL},
              &r);
  /* Conflicts. */
  run_plan(4, "auto", "--annotate embed", 1, "untie them");
  run_plan(4, "auto", "--annotate replicate=2,split=4", 1, "makes 8 ranks, but the world has 4");
  run_plan(3, "auto", "--annotate split=3", 1, "layer 'embed' (embedding): tensor parallelism tp=3 does not divide");
  run_plan(2, "auto", "--annotate stages=9", 1, "stages=9: the model has 5 layers");
  run_plan(2, "auto", "--annotate shard=2", 1, "unknown 'shard=2'");
  run_plan(4, "auto", "--untied --annotate embed,split=4 --batch 6", 1,
           "a micro-batch of 6 rows does not divide among the 4 ranks of the replicated region 'embed'..'h0'");
  run_plan(4, "auto", "--untied --annotate embed,replicate=2,split=2 --rebalance", 1, "--rebalance moves rows");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_layout_trains_and_agrees),
      cmocka_unit_test(test_plans_that_cannot_work_are_refused),
      cmocka_unit_test(test_annotations_drive_the_example),
      cmocka_unit_test(test_payload_integrity_trains_the_same),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
