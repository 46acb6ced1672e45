/* The two-rank shared-memory all-reduce: results against a sum computed
 * locally (bit for bit, with non-integer values, in fp32 and bf16), sizes
 * around its pipeline pieces, interleaved with the other operations that
 * share its channels, and its failures: a peer killed or stopped
 * mid-operation, and operations that do not match. A peer's segment as the
 * store names it is mapped only when it is what the group makes: the name's
 * exact form for that rank and pid, a private regular file of this user,
 * big enough. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "localkit/ranks.h"
#include "comm/comm_internal.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

/* Time bounds. Measured on two cores busy with other work (optimized
 * build; sanitizers make it about 3x slower): the checks of results take
 * under 1 s in all; one all-reduce of BIG floats on the pair takes well
 * under 0.3 s; rank 0 sees its killed peer 0.02 s after it dies; a
 * mismatch is seen in milliseconds; an operation on a failed group returns
 * in microseconds. */
/* No operation ends by its timeout, except where a stopped peer is meant to
 * be caught by it. */
#define OP_TIMEOUT_MS 30000
/* A killed peer is seen by its exit, not the timeout: 10 s is > 100x the
 * typical and a third of OP_TIMEOUT_MS. */
#define KILL_SEEN_S 10.0
/* A stopped peer is caught only by the operation timeout, so the test lasts
 * that long; 6 s is 20x the slowest all-reduce the pair must finish twice
 * before the stop (about 7x with sanitizers). */
#define STOP_TIMEOUT_MS 6000
/* The timeout fires within 15 ms of its deadline, and rank 0 may start its
 * last all-reduce a little after the victim stops: 1 s of slack is > 20x. */
#define TIMEOUT_SLACK_S 1.0
/* "At once": below every operation timeout here, and > 100x what a rank
 * waiting for a busy core needs. */
#define AT_ONCE_S 1.0
/* A whole scenario of two ranks: a few seconds at most (a stopped peer's
 * STOP_TIMEOUT_MS included); 60 s only bounds a hang. */
#define RUN_S 60

/* Values whose sum rounds: the reference is one fp32 addition. */
__attribute__((noinline)) static float fval(int rank, size_t i) {
  return 0.1f * (float)(int)(i % 997) + (rank ? 1.0f / 3.0f : 0.7f) * (float)(int)(i % 13);
}

static void check_f32(gt_comm *c, size_t count, int r) {
  float *x = malloc(count * sizeof *x + 4);
  CHECK(x);
  for (size_t i = 0; i < count; i++) x[i] = fval(r, i);
  CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) CHECK(x[i] == fval(0, i) + fval(1, i));
  for (size_t i = 0; i < count; i++) x[i] = fval(r, i);
  CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, GT_COMM_AVG));
  for (size_t i = 0; i < count; i++) CHECK(x[i] == (fval(0, i) + fval(1, i)) / 2.0f);
  free(x);
}

static void check_bf16(gt_comm *c, size_t count, int r) {
  gt_bf16 *h = malloc(count * sizeof *h + 2);
  CHECK(h);
  for (size_t i = 0; i < count; i++) h[i] = gt_f32_to_bf16(fval(r, i));
  CHECK_OK(gt_comm_allreduce(c, h, count, GT_BF16, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) {
    float a = gt_bf16_to_f32(gt_f32_to_bf16(fval(0, i)));
    float b = gt_bf16_to_f32(gt_f32_to_bf16(fval(1, i)));
    CHECK(h[i] == gt_f32_to_bf16(a + b));
  }
  free(h);
}

/* Other operations between all-reduces leave the channels in step. */
static void check_interleaved(gt_comm *c, int r) {
  enum { N = 200003 };
  float *x = malloc(N * sizeof *x), *g = malloc(2 * N * sizeof *g);
  CHECK(x && g);
  for (int it = 0; it < 3; it++) {
    for (size_t i = 0; i < N; i++) x[i] = (float)(int)(i % 100) + (float)r;
    CHECK_OK(gt_comm_allreduce(c, x, N, GT_F32, GT_COMM_SUM));
    for (size_t i = 0; i < N; i++) CHECK(x[i] == 2.0f * (float)(int)(i % 100) + 1.0f);
    CHECK_OK(gt_comm_allgather(c, x, g, N, GT_F32));
    for (size_t i = 0; i < 2 * N; i++) CHECK(g[i] == x[i % N]);
    for (size_t i = 0; i < N; i++) x[i] = r == it % 2 ? (float)it : -1.0f;
    CHECK_OK(gt_comm_broadcast(c, x, N, GT_F32, it % 2));
    for (size_t i = 0; i < N; i++) CHECK(x[i] == (float)it);
    CHECK_OK(gt_comm_barrier(c));
  }
  /* Several in flight at once. */
  enum { K = 3 };
  float *y[K];
  gt_comm_req *req[K];
  for (int k = 0; k < K; k++) {
    y[k] = malloc(N * sizeof(float));
    CHECK(y[k]);
    for (size_t i = 0; i < N; i++) y[k][i] = (float)(k * r) + (float)(int)(i % 10);
    CHECK_OK(gt_comm_allreduce_start(c, y[k], N, GT_F32, GT_COMM_SUM, &req[k]));
  }
  for (int k = 0; k < K; k++) {
    CHECK_OK(gt_comm_wait(req[k], 30000));
    for (size_t i = 0; i < N; i++) CHECK(y[k][i] == (float)k + 2.0f * (float)(int)(i % 10));
    free(y[k]);
  }
  free(x);
  free(g);
}

static int pair_main(int r, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "pair", r, n, GT_COMM_SHM, OP_TIMEOUT_MS);
  CHECK(strcmp(gt_comm_transport_name(c), "shm") == 0);
  /* 65536 floats and 131072 bf16 fill a 256 KiB piece; each half is cut
   * into pieces, so try halves just under, at and over one and two. From
   * 16 MiB the sums received are streamed into the buffer: the last size
   * takes that path (in both types) with halves that end mid-vector. */
  const size_t sizes[] = {1,      2,      3,      5,      1000,     131071,         131072,         131073,
                          262143, 262144, 262145, 524289, 1u << 20, (3u << 20) + 7, (8u << 20) + 13};
  for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
    check_f32(c, sizes[j], r);
    check_bf16(c, sizes[j], r);
  }
  check_interleaved(c, r);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void results(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  int bad = harness_run(2, pair_main, NULL, RUN_S, codes);
  for (int r = 0; r < 2; r++)
    if (codes[r] != RANK_OK) print_error("rank %d exited with %d\n", r, codes[r]);
  assert_int_equal(bad, 0);
}

/* ---- failures ---- */

typedef struct shared {
  double victim_time, fail_time;
  int fail_status;
  char fail_msg[256];
} shared;

typedef struct fcfg {
  int sig;
  int op_timeout_ms;
  shared *sh;
} fcfg;

enum { BIG = (32u << 20) / 4 };

static int victim_main(int r, int n, void *arg) {
  fcfg *k = arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "victim", r, n, GT_COMM_SHM, k->op_timeout_ms);
  float *x = malloc(BIG * sizeof *x);
  CHECK(x);
  for (int it = 0; it < 50; it++) {
    for (size_t i = 0; i < BIG; i++) x[i] = 1.0f;
    /* The victim goes before its third all-reduce, which rank 0 has started
     * or is about to: rank 0 is left waiting on a peer that will never do
     * its half. (Going just after starting it raced with its own progress
     * thread, which on a loaded machine could finish the all-reduce first.) */
    if (r == 1 && it == 2) {
      k->sh->victim_time = gt_now();
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      raise(k->sig);
      _exit(RANK_FAIL);
    }
    gt_comm_req *req;
    CHECK_OK(gt_comm_allreduce_start(c, x, BIG, GT_F32, GT_COMM_SUM, &req));
    gt_status st = gt_comm_wait(req, -1);
    if (st != GT_OK) {
      k->sh->fail_time = gt_now();
      k->sh->fail_status = st;
      snprintf(k->sh->fail_msg, sizeof k->sh->fail_msg, "%s", gt_last_error());
      double t0 = gt_now();
      CHECK(gt_comm_allreduce(c, x, 10, GT_F32, GT_COMM_SUM) != GT_OK);
      CHECK(gt_comm_barrier(c) != GT_OK);
      CHECK(gt_now() - t0 < AT_ONCE_S);
      break;
    }
    CHECK(it < 2);
    for (size_t i = 0; i < BIG; i += 4099) CHECK(x[i] == 2.0f);
  }
  free(x);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void run_victim(int sig, int op_timeout_ms, double limit_s) {
  shared *sh = harness_shared(sizeof *sh);
  fcfg k = {sig, op_timeout_ms, sh};
  int codes[HARNESS_MAX];
  harness_run(2, victim_main, &k, RUN_S, codes);
  assert_int_equal(codes[1], sig == SIGKILL ? RANK_KILLED_BY(SIGKILL) : RANK_STOPPED);
  assert_int_equal(codes[0], RANK_OK);
  double dt = sh->fail_time - sh->victim_time;
  print_message("rank 0 failed %.3f s after the victim (%s): %s\n", dt, gt_status_name(sh->fail_status), sh->fail_msg);
  assert_true(sh->victim_time > 0 && sh->fail_time > 0);
  assert_true(dt >= 0 && dt < limit_s);
  assert_true(sh->fail_status == GT_ECONN || sh->fail_status == GT_ETIMEDOUT);
  assert_true(strlen(sh->fail_msg) > 20);
}

static void killed(void **st) {
  (void)st;
  run_victim(SIGKILL, OP_TIMEOUT_MS, KILL_SEEN_S);
}
static void stopped(void **st) {
  (void)st;
  run_victim(SIGSTOP, STOP_TIMEOUT_MS, STOP_TIMEOUT_MS / 1000.0 + TIMEOUT_SLACK_S);
}

/* Rank 0 all-reduces; rank 1 all-reduces another size, then runs an
 * all-gather against rank 0's all-reduce. Both fail promptly. */
static int mismatch_main(int r, int n, void *arg) {
  int what = *(int *)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "pmismatch", r, n, GT_COMM_SHM, OP_TIMEOUT_MS);
  enum { N = 300000 };
  float *x = calloc(2 * N, sizeof *x);
  CHECK(x);
  double t0 = gt_now();
  gt_status st;
  if (r == 0 || what == 0)
    st = gt_comm_allreduce(c, x, r == 0 ? N : N / 2, GT_F32, GT_COMM_SUM);
  else
    st = gt_comm_allgather(c, x, x, N / 2, GT_F32);
  CHECK(st == GT_EFORMAT || st == GT_ECONN);
  /* Milliseconds on loaded cores: 5 s is > 100x, and a timeout would not
   * give the statuses above. */
  CHECK(gt_now() - t0 < 5.0);
  CHECK(strstr(gt_last_error(), "rank") != NULL);
  free(x);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void mismatch_size(void **st) {
  (void)st;
  int what = 0, codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, mismatch_main, &what, RUN_S, codes), 0);
}
static void mismatch_op(void **st) {
  (void)st;
  int what = 1, codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, mismatch_main, &what, RUN_S, codes), 0);
}

static void segment_names(void **st) {
  (void)st;
  assert_true(gt_comm_shm_name_ok("/giant-4242-1-00c0ffee", 1, 4242));
  assert_false(gt_comm_shm_name_ok("/giant-4242-1-00c0ffee", 0, 4242)); /* another rank's */
  assert_false(gt_comm_shm_name_ok("/giant-4242-1-00c0ffee", 1, 4243)); /* another process's */
  assert_false(gt_comm_shm_name_ok("/giant-4242-1-c0ffee", 1, 4242));   /* not as written */
  assert_false(gt_comm_shm_name_ok("/giant-4242-1-00c0ffee/x", 1, 4242));
  assert_false(gt_comm_shm_name_ok("/giant-4242-1-00c0ffeeX", 1, 4242));
  assert_false(gt_comm_shm_name_ok("/../../etc/passwd", 1, 4242));
  assert_false(gt_comm_shm_name_ok("giant-4242-1-00c0ffee", 1, 4242));
  assert_false(gt_comm_shm_name_ok("/giant-+4242-1-00c0ffee", 1, 4242));
  assert_false(gt_comm_shm_name_ok("", 1, 4242));

  /* Well named, but open to others, or too short: not mapped. */
  char name[64];
  int pid = (int)getpid();
  snprintf(name, sizeof name, "/giant-%d-1-0000abcd", pid);
  shm_unlink(name);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 8192), 0);
  char *m = gt_comm_shm_map_peer("test", name, 1, pid, 8192);
  assert_non_null(m); /* the good case */
  munmap(m, 8192);
  assert_null(gt_comm_shm_map_peer("test", name, 1, pid, 16384)); /* shorter than the group's segments */
  assert_int_equal(fchmod(fd, 0644), 0);
  assert_null(gt_comm_shm_map_peer("test", name, 1, pid, 8192)); /* others may open it */
  close(fd);
  shm_unlink(name);
  assert_null(gt_comm_shm_map_peer("test", name, 1, pid, 8192)); /* gone */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(results),       cmocka_unit_test(killed),      cmocka_unit_test(stopped),
      cmocka_unit_test(mismatch_size), cmocka_unit_test(mismatch_op), cmocka_unit_test(segment_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
