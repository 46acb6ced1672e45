/* In-process reshaping under giantrun --reshape: examples/gpt on four
 * workers, one SIGKILLed (GT_FAULT crash) at a random step. The three left
 * keep their processes, agree on the step, build a layout for three ranks,
 * take the state from each other and train on to the end.
 *
 * The reference makes the same layout change through a checkpoint: the old
 * layout trains to the step the survivors resumed at and saves; the new
 * layout (the one the survivors chose) loads it and trains to the end.
 * Both train the same global sample sequence with the same global batch
 * (the reshape keeps the rows of a step, in more micro-batches when the
 * replicas are fewer, and the reference is given the same), so their final
 * checkpoints must agree within the cross-layout tolerance (1e-5), and at
 * most the step in flight is lost.
 *
 *   dp=4        -> dp=3
 *   dp=2,pp=2   -> the planner's layout for three ranks
 *   dp=2,tp=2   -> the same
 *   dp=4 with ZeRO-1 -> dp=3: the lost rank's optimizer shard comes from
 *                       the copy its peer keeps (--mirror-every 1)
 * and, with --max-restarts 1, the dead worker restarted alone joins the
 * job again at a step boundary, given its state by its peers (4 -> 3 -> 4,
 * at dp=2,tp=2 and at dp=4 with ZeRO-1); the reference then makes both
 * changes through checkpoints. A second worker killed in the middle of the
 * reshape (GT_FAULT crashreshape) makes the two left try the next epoch:
 * 4 -> 2 at the same step, matching a reference that goes 4 -> 2. A
 * worker restarted after the job's last look for joins ends with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "common/run_cmd.h"
#include "giant/ckpt.h"

enum { STEPS = 24 };

static char gpt[512], giantrun[512], dir[64], text[128], data[128];
static run_result res;

static int setup(void **state) {
  (void)state;
  return giantrun_scratch("reshape", giantrun, gpt, dir, text, data);
}

static int teardown(void **state) {
  (void)state;
  return scratch_remove(dir);
}

/* gpt under giantrun on n workers at `plan`, to `steps`, saving every
 * `every` steps into ck; extra: more of giantrun's flags first. */
/* The micro-batches of a step as --global-batch rows times --accum. */
typedef struct batch_shape {
  int rows, accum;
} batch_shape;

static const batch_shape launch_shape = {12, 2};

static void run_job(int n, const char *plan, int zero, int steps, int every, const char *ck, const char *fault,
                    bool reshape, bool rejoin, batch_shape bs, run_result *r) {
  char np[8], st[8], ev[8], fenv[128], gb[16], ac[16];
  snprintf(gb, sizeof gb, "%d", bs.rows);
  snprintf(ac, sizeof ac, "%d", bs.accum);
  snprintf(np, sizeof np, "%d", n);
  snprintf(st, sizeof st, "%d", steps);
  snprintf(ev, sizeof ev, "%d", every);
  snprintf(fenv, sizeof fenv, "GT_FAULT=%s", fault ? fault : "");
  char *argv[64] = {giantrun,     "--standalone", "--nproc-per-node", np, "--plan", (char *)plan,
                    "--ckpt-dir", (char *)ck,     "--ckpt-every",     ev};
  int k = 10;
  if (reshape) argv[k++] = "--reshape";
  if (rejoin) { /* the dead worker alone restarts and joins */
    argv[k++] = "--max-restarts";
    argv[k++] = "1";
  }
  char *rest[] = {gpt, "--corpus",   text, "--data",   data, "--steps",       st,   "--layers",
                  "2", "--channels", "32", "--heads",  "4",  "--seq",         "16", "--global-batch",
                  gb,  "--accum",    ac,   "--sample", "0",  "--print-every", "1",  NULL};
  for (int i = 0; rest[i]; i++) argv[k++] = rest[i];
  if (zero) { /* the ZeRO stage */
    argv[k++] = "--zero";
    argv[k++] = zero == 2 ? "2" : "1";
  }
  if (reshape) { /* so that a ZeRO-1 shard's loss loses nothing */
    argv[k++] = "--mirror-every";
    argv[k++] = "1";
  }
  argv[k] = NULL;
  char *env[] = {"OMP_NUM_THREADS=1", fault ? fenv : NULL, NULL};
  /* 24 tiny steps on four ranks, a reshape or two: ~1 s, ~10 s on loaded
   * cores under ASan (a rejoin's restart included); 300 s is > 30x. */
  run_cmd(argv, env, 300, r);
  if (r->exit_code != 0) run_fail(r, "giantrun --plan %s: exit %d, its output above", plan, r->exit_code);
}

/* The pid a worker printed at its start, and after its reshape (0: none). */
static int pid_of(const char *out, int rank, const char *marker) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
  for (const char *p = strstr(out, prefix); p; p = strstr(p + 1, prefix)) {
    const char *eol = strchr(p, '\n'), *m = strstr(p, marker);
    if (!m || (eol && m > eol)) continue;
    const char *q = strstr(p, "(pid ");
    if (q && (!eol || q < eol)) return atoi(q + 5);
  }
  return 0;
}

/* The layout, step and batch shape of the n-th reshape line ("reshaped
 * in ..."): of rank 0's, which every rank's matches. */
static const char *reshape_line(const char *out, int nth, char layout[64], int *step, int *world, batch_shape *bs) {
  const char *line = out;
  for (int k = 0; k <= nth; k++) {
    line = strstr(line, "[rank 0] gpt: reshaped in ");
    if (!line) return NULL;
    if (k < nth) line++;
  }
  const char *of = strstr(line, " of "), *lp = strstr(line, "dp="), *sp = strstr(line, ", step ");
  if (!of || !lp || !sp || sscanf(of, " of %d", world) != 1 || sscanf(lp, "%63[^ ]", layout) != 1 ||
      sscanf(sp, ", step %*d, %*d rows of %d x %d micro-batches", &bs->rows, &bs->accum) != 2 ||
      sscanf(sp, ", step %d", step) != 1)
    return NULL;
  layout[strlen(layout) - 1] = 0; /* the comma after it */
  return line;
}

/* second >= 0: that rank is killed too, in the middle of the reshape
 * (GT_FAULT crashreshape): the two left try the next epoch. */
static void reshape_case(const char *plan, int zero, bool rejoin, int second) {
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  const int steps = STEPS;
  int kill_at = 5 + rand() % 10, victim = 1 + rand() % 3;
  if (second >= 0) victim = second == 1 ? 2 : 1;
  char fault[96], ck[128];
  snprintf(fault, sizeof fault, "crash:rank=%d,at=%d", victim, kill_at);
  if (second >= 0) snprintf(fault + strlen(fault), sizeof fault - strlen(fault), ";crashreshape:rank=%d", second);
  /* The restarted worker's start takes what a loaded machine gives it: rank
   * 0 waits for it at its first look for joins (30 s, under giantrun's
   * least --hang-timeout), so that it joins before the end. From the kill
   * to its request to join takes ~0.2 s, a second or two under ASan on
   * loaded cores: the 30 s are > 15x, and end as it asks. */
  if (rejoin) snprintf(fault + strlen(fault), sizeof fault - strlen(fault), ";holdjoin:rank=0,seconds=30");
  int left = second >= 0 ? 2 : 3;
  snprintf(ck, sizeof ck, "%s/ck-%s-zero%d%s%d", dir, plan, zero, rejoin ? "-rejoin" : "", second);
  print_message("%s + ZeRO-%d: %s\n", plan, zero, fault);
  run_job(4, plan, zero, steps, steps, ck, fault, true, rejoin, launch_shape, &res);
  /* The survivors reshaped: same processes, one layout, one step. */
  char layout[64], layout4[64] = "";
  int resumed = -1, world = 0, joined = -1, world4 = 0;
  batch_shape bs = {0}, bs4 = {0};
  const char *line = reshape_line(res.output, 0, layout, &resumed, &world, &bs);
  if (!line) run_fail(&res, "no reshape, its output above");
  assert_int_equal(world, left);
  print_message("killed at step %d; the %d left resumed at step %d at %s, %d micro-batches of %d rows\n", kill_at, left,
                resumed, layout, bs.accum, bs.rows);
  /* The same rows a step: with fewer replicas, more micro-batches. */
  assert_int_equal(bs.rows * bs.accum, launch_shape.rows * launch_shape.accum);
  assert_true(bs.accum >= launch_shape.accum);
  if (second >= 0) assert_non_null(strstr(res.output, "trying the next membership epoch"));
  assert_true(resumed == kill_at || resumed == kill_at + 1); /* at most the step in flight is lost */
  if (rejoin) {                                              /* ... and the restarted worker joined them */
    const char *l2 = reshape_line(res.output, 1, layout4, &joined, &world4, &bs4);
    if (!l2) run_fail(&res, "no second reshape, its output above");
    assert_int_equal(world4, 4);
    assert_int_equal(bs4.rows, launch_shape.rows); /* all back: the launch's micro-batches */
    assert_int_equal(bs4.accum, launch_shape.accum);
    assert_true(joined > resumed);
    assert_non_null(strstr(res.output, "asks to join the running job"));
    print_message("the restarted worker joined at step %d: %s\n", joined, layout4);
  }
  int kept = 0;
  for (int r = 0; r < 4; r++) {
    int before = pid_of(res.output, r, "--reshape on"), after = pid_of(res.output, r, "reshaped in ");
    if (r == victim || r == second) continue;
    print_message("rank %d: pid %d, after the reshape %d\n", r, before, after);
    assert_true(before > 0);
    assert_int_equal(before, after);
    kept++;
  }
  assert_int_equal(kept, left);
  assert_non_null(strstr(res.output, "over steps 0.."));
  /* The reference: the same change through a checkpoint. */
  char ref[128];
  snprintf(ref, sizeof ref, "%s/ref-%s-zero%d%s%d", dir, plan, zero, rejoin ? "-rejoin" : "", second);
  run_result *rr = malloc(sizeof *rr);
  assert_non_null(rr);
  run_job(4, plan, zero, resumed, resumed, ref, NULL, false, false, launch_shape, rr);
  if (rejoin) {
    run_job(3, layout, zero, joined, joined, ref, NULL, false, false, bs, rr);
    run_job(4, layout4, zero, steps, steps, ref, NULL, false, false, bs4, rr);
  } else {
    run_job(left, layout, zero, steps, steps, ref, NULL, false, false, bs, rr);
  }
  assert_non_null(strstr(rr->output, "resumed from"));
  free(rr);
  char a[256], b[256];
  snprintf(a, sizeof a, "%s/step-%08d", ck, steps);
  snprintf(b, sizeof b, "%s/step-%08d", ref, steps);
  double worst = 1;
  assert_int_equal(gt_ckpt_diff(b, a, NULL, &worst), GT_OK);
  print_message("%s: parameters and optimizer state at step %d within %.2e of the reference\n", plan, steps, worst);
  assert_true(worst <= 1e-5);
  /* Nothing came from storage: with ZeRO-1 the lost shard came from its copy on a peer. */
  assert_non_null(strstr(line, ", 0 from a checkpoint"));
}

static void test_reshape_dp4(void **state) {
  (void)state;
  reshape_case("dp=4", false, false, -1);
}
static void test_reshape_dp2_pp2(void **state) {
  (void)state;
  reshape_case("dp=2,pp=2", false, false, -1);
}
static void test_reshape_dp2_tp2(void **state) {
  (void)state;
  reshape_case("dp=2,tp=2", false, false, -1);
}
static void test_reshape_dp4_zero1(void **state) {
  (void)state;
  reshape_case("dp=4", 1, false, -1);
}
/* ZeRO-2's sharded gradients live within a step: its reshape moves what
 * ZeRO-1's does. */
static void test_reshape_dp4_zero2(void **state) {
  (void)state;
  reshape_case("dp=4", 2, false, -1);
}
/* The dead worker restarted alone joins the running job: 4 -> 3 -> 4. */
static void test_reshape_dp2_tp2_rejoin(void **state) {
  (void)state;
  reshape_case("dp=2,tp=2", false, true, -1);
}
static void test_reshape_dp4_zero1_rejoin(void **state) {
  (void)state;
  reshape_case("dp=4", true, true, -1);
}
/* A second worker killed in the middle of the reshape: 4 -> 2, consistently. */
static void test_reshape_kill_during_reshape(void **state) {
  (void)state;
  reshape_case("dp=4", false, false, 3);
}

/* Killed after the job's last look for joins (every 5 steps; none after
 * step 19 of 24): the restarted worker asks to join a job that then
 * finishes without it. It ends too, with status 0, and so does the job,
 * at once rather than after the join's timeout.
 *
 * The job takes ~1 s, ~3 s on loaded cores and a few more under ASan. The
 * join's timeout is made 200 s (GT_RESHAPE_TIMEOUT_MS; 60 s by default)
 * so that "at once" can be told from it with room on both sides: a job
 * under 100 s is > 10x the typical and still half the timeout. */
#define JOIN_TIMEOUT_MS "200000"
#define AT_ONCE_S 100.0
static void test_reshape_rejoin_after_end(void **state) {
  (void)state;
  char ck[128];
  snprintf(ck, sizeof ck, "%s/ck-rejoin-after-end", dir);
  setenv("GT_RESHAPE_TIMEOUT_MS", JOIN_TIMEOUT_MS, 1);
  run_job(4, "dp=4", false, STEPS, STEPS, ck, "crash:rank=2,at=22", true, true, launch_shape, &res);
  unsetenv("GT_RESHAPE_TIMEOUT_MS");
  assert_non_null(strstr(res.output, "[rank 2] gpt: rank 2 (pid "));
  assert_non_null(strstr(res.output, "asks to join the running job"));
  if (!strstr(res.output, "training ended before the job took it in"))
    run_fail(&res, "the restarted worker did not end with the job, its output above");
  assert_non_null(strstr(res.output, "over steps 0..24"));
  print_message("rank 2 killed at step 22, restarted: it ended with the job %.1f s after the start\n", res.seconds);
  assert_true(res.seconds < AT_ONCE_S); /* not the join's 200 s timeout */
}

int main(void) {
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape_dp4),
      cmocka_unit_test(test_reshape_dp2_pp2),
      cmocka_unit_test(test_reshape_dp2_tp2),
      cmocka_unit_test(test_reshape_dp4_zero1),
      cmocka_unit_test(test_reshape_dp4_zero2),
      cmocka_unit_test(test_reshape_dp2_tp2_rejoin),
      cmocka_unit_test(test_reshape_dp4_zero1_rejoin),
      cmocka_unit_test(test_reshape_kill_during_reshape),
      cmocka_unit_test(test_reshape_rejoin_after_end),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
