/* Asynchronous saves never interleave. A writer is held up
 * deterministically: its shard's temporary name is a FIFO, whose open
 * blocks until someone reads, and whose fsync then fails. Training goes
 * on meanwhile. Under the skip policy, with step 1's writer held, the
 * saves of steps 2 to 6 are skipped and nothing commits. Under the wait
 * policy, with step 2's writer held, the save of step 3 waits for it, and
 * steps 1 and 3 to 6 commit. The failed save is reported and commits
 * nothing, and the newest checkpoint holds exactly the state it was taken
 * at.
 *
 * On two ranks under the skip policy, with only rank 0's writer held from
 * step 1 to step 4, rank 1's writer is idle: the ranks still skip the same
 * saves (each rank counts its own), no rank starts a save the other
 * skipped (no step directory without a MANIFEST), nothing hangs, and,
 * once every rank has waited for its writer at step 5, a save commits. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "localkit/ranks.h"
#include "giant/engine/checkpoint.h"

static char *data;

static double mono_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int held; /* the step whose writer is held */

static void fifo_path(const char *dir, char *out, size_t cap) {
  snprintf(out, cap, "%s/step-%08d/.shard-00000.bin.tmp", dir, held);
}

/* Reads the FIFO to its end: lets the held writer go on (and fail). */
static void *drain(void *arg) {
  int fd = open(arg, O_RDONLY);
  char buf[65536];
  while (fd >= 0 && read(fd, buf, sizeof buf) > 0) {}
  if (fd >= 0) close(fd);
  free(arg);
  return NULL;
}

static void start_drain(const char *dir, bool in_thread) {
  char *p = malloc(4200);
  fifo_path(dir, p, 4200);
  if (!in_thread) {
    drain(p);
    return;
  }
  pthread_t t;
  pthread_create(&t, NULL, drain, p);
  pthread_detach(t);
}

static void hold(const char *dir, int steps_done) {
  if (steps_done != held) return;
  char step[4200], fifo[4200];
  snprintf(step, sizeof step, "%s/step-%08d", dir, held);
  mkdir(dir, 0755);
  mkdir(step, 0755);
  fifo_path(dir, fifo, sizeof fifo);
  if (mkfifo(fifo, 0644) != 0) abort();
}

static void skip_policy_after(const char *dir) { start_drain(dir, false); }
static void wait_policy_hook(const char *dir, int steps_done) {
  hold(dir, steps_done);
  if (steps_done == 3) start_drain(dir, true); /* the save of step 3 waits for this to let step 2 end */
}

static void policy_case(gt_ckpt_busy busy, const int *want, int nwant) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s.%s", data, busy == GT_CKPT_BUSY_SKIP ? "skip" : "wait");
  held = busy == GT_CKPT_BUSY_SKIP ? 1 : 2;
  int *save_status = harness_shared(sizeof(int));
  cr_state final = cr_state_new(NULL), loaded = cr_state_new(NULL);
  cr_cfg cfg = {.data = data,
                .dir = dir,
                .s1 = 6,
                .save_every = 1,
                .busy = busy,
                .save_status = save_status,
                .final = final,
                .before_save = busy == GT_CKPT_BUSY_SKIP ? hold : wait_policy_hook,
                .after_steps = busy == GT_CKPT_BUSY_SKIP ? skip_policy_after : NULL};
  cr_run(1, &cfg);
  int steps[8], n;
  assert_int_equal(gt_ckpt_list(dir, steps, 8, &n), GT_OK);
  print_message("%s policy: %d committed%s; last save: %s\n", busy == GT_CKPT_BUSY_SKIP ? "skip" : "wait", n,
                n ? ", the newest at step 6" : "", gt_status_name(*save_status));
  assert_int_equal(n, nwant);
  for (int i = 0; i < n; i++) assert_int_equal(steps[i], want[i]);
  if (busy == GT_CKPT_BUSY_SKIP) {
    assert_int_not_equal(*save_status, GT_OK); /* step 1's, the only one tried */
    cr_rmtree(dir);
    return;
  }
  /* The newest checkpoint holds the state after its step. */
  cr_cfg check = {.data = data, .dir = dir, .s0 = -1, .s1 = 0, .loaded = loaded};
  cr_run(1, &check);
  assert_memory_equal(loaded.p->params, final.p->params, final.p->nparams * sizeof(float));
  assert_memory_equal(loaded.v->params, final.v->params, final.p->nparams * sizeof(float));
  cr_rmtree(dir);
}

/* Two ranks: rank 0's shard at step 1 is the FIFO (whichever rank gets
 * here first makes it); one thread, claimed through shared memory, drains
 * it once 4 steps are done. */
static int *drain_claimed;

static void hold_rank0(const char *dir, int steps_done) {
  if (steps_done == held) {
    char step[4200], fifo[4200];
    snprintf(step, sizeof step, "%s/step-%08d", dir, held);
    mkdir(dir, 0755);
    mkdir(step, 0755);
    fifo_path(dir, fifo, sizeof fifo);
    if (mkfifo(fifo, 0644) != 0 && errno != EEXIST) abort();
  }
  if (steps_done == 4 && __atomic_exchange_n(drain_claimed, 1, __ATOMIC_SEQ_CST) == 0) start_drain(dir, true);
}

static void test_skip_agreed(void **state) {
  (void)state;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s.agreed", data);
  held = 1;
  drain_claimed = harness_shared(sizeof(int));
  int *skipped = harness_shared(2 * sizeof(int)), *save_status = harness_shared(sizeof(int));
  cr_cfg cfg = {.layout = "dp=2",
                .data = data,
                .dir = dir,
                .s1 = 8,
                .save_every = 1,
                .busy = GT_CKPT_BUSY_SKIP,
                .save_status = save_status,
                .skipped = skipped,
                .before_save = hold_rank0,
                .wait_at = 5};
  double t0 = mono_seconds();
  cr_run(2, &cfg);
  double took = mono_seconds() - t0;
  int steps[8], n;
  assert_int_equal(gt_ckpt_list(dir, steps, 8, &n), GT_OK);
  print_message(
      "rank 0's writer held over steps 1..4: rank 0 skipped %d saves, rank 1 %d; %d committed, the newest "
      "at step %d; %.1f s\n",
      skipped[0], skipped[1], n, n ? steps[0] : -1, took);
  /* Steps 2, 3 and 4, and some of 6 to 8 when step 5's is slow; both ranks alike. */
  assert_int_equal(skipped[0], skipped[1]);
  assert_true(skipped[0] >= 3 && skipped[0] <= 6);
  assert_int_equal(*save_status, GT_OK); /* the last save begun after the release committed */
  assert_true(n >= 1 && steps[0] >= 5);
  for (int s = 2; s <= 8; s++) { /* a directory only where both ranks saved, and then committed */
    char path[4300];
    snprintf(path, sizeof path, "%s/step-%08d", dir, s);
    bool exists = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/step-%08d/MANIFEST", dir, s);
    if (exists && access(path, F_OK) != 0) fail_msg("step %d was begun by some rank and never committed", s);
    if (s <= 4) assert_false(exists);
  }
  assert_true(took < 120); /* nothing hangs: 0.3 s on busy cores */
  cr_rmtree(dir);
}

static void test_skip_policy(void **state) {
  (void)state;
  policy_case(GT_CKPT_BUSY_SKIP, NULL, 0);
}

static void test_wait_policy(void **state) {
  (void)state;
  policy_case(GT_CKPT_BUSY_WAIT, (int[]){6, 5, 4, 3, 1}, 5);
}

static int setup(void **state) {
  (void)state;
  data = cr_make_data();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cr_free_data(data);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_skip_policy), cmocka_unit_test(test_wait_policy),
                                     cmocka_unit_test(test_skip_agreed)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
