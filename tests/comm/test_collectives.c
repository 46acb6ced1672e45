/* Collectives between forked ranks on loopback, over TCP and over shared
 * memory, checked exactly: integer-valued floats make every sum exact, in
 * any order (a reduce is checked bit for bit against a reduce-scatter). Sizes 0, 1, odd, not divisible by the rank count, larger than
 * a pipeline piece, and 64 MiB on 2 and 4 ranks; over TCP with encrypted
 * payloads too, which must change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "localkit/ranks.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

typedef struct cfg {
  gt_comm_transport transport;
  bool big; /* add a 64 MiB case */
  bool enc; /* TCP payloads encrypted */
} cfg;

static float val(int rank, size_t i) { return (float)(int)(i % 1000) + 3.0f * (float)rank; }
static float bval(int rank, size_t i) { return (float)(int)(i % 16) + (float)rank; }

static void check_allreduce(gt_comm *c, size_t count, int r, int n) {
  float *x = malloc(count * sizeof *x + 4);
  CHECK(x);
  for (size_t i = 0; i < count; i++) x[i] = val(r, i);
  CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) CHECK(x[i] == (float)n * (float)(int)(i % 1000) + 3.0f * (float)(n * (n - 1) / 2));
  /* Average: contributions n*k + 2r sum to n^2 k + n(n-1), exact over n. */
  for (size_t i = 0; i < count; i++) x[i] = (float)n * (float)(int)(i % 5) + 2.0f * (float)r;
  CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, GT_COMM_AVG));
  for (size_t i = 0; i < count; i++) CHECK(x[i] == (float)n * (float)(int)(i % 5) + (float)(n - 1));
  /* bf16: small integers stay exact through every rounded partial sum. */
  gt_bf16 *h = malloc(count * sizeof *h + 2);
  CHECK(h);
  for (size_t i = 0; i < count; i++) h[i] = gt_f32_to_bf16(bval(r, i));
  CHECK_OK(gt_comm_allreduce(c, h, count, GT_BF16, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++)
    CHECK(gt_bf16_to_f32(h[i]) == (float)n * (float)(int)(i % 16) + (float)(n * (n - 1) / 2));
  /* Two ranks: one rounding of the exact fp32 sum, as reference. */
  if (n == 2) {
    for (size_t i = 0; i < count; i++) h[i] = gt_f32_to_bf16(1.0f + (float)(int)(i % 97) / 97.0f * (float)(r + 1));
    CHECK_OK(gt_comm_allreduce(c, h, count, GT_BF16, GT_COMM_SUM));
    for (size_t i = 0; i < count; i++) {
      float a = gt_bf16_to_f32(gt_f32_to_bf16(1.0f + (float)(int)(i % 97) / 97.0f));
      float b = gt_bf16_to_f32(gt_f32_to_bf16(1.0f + (float)(int)(i % 97) / 97.0f * 2.0f));
      CHECK(h[i] == gt_f32_to_bf16(a + b));
    }
  }
  free(h);
  free(x);
}

static void check_reduce_scatter(gt_comm *c, size_t count, int r, int n) {
  float *in = malloc((size_t)n * count * sizeof *in + 4), *out = malloc(count * sizeof *out + 4);
  CHECK(in && out);
  for (size_t i = 0; i < (size_t)n * count; i++) in[i] = val(r, i);
  CHECK_OK(gt_comm_reduce_scatter(c, in, out, count, GT_F32, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) {
    size_t g = (size_t)r * count + i;
    CHECK(out[i] == (float)n * (float)(int)(g % 1000) + 3.0f * (float)(n * (n - 1) / 2));
  }
  /* The input is left as it was. */
  for (size_t i = 0; i < (size_t)n * count; i++) CHECK(in[i] == val(r, i));
  CHECK_OK(gt_comm_reduce_scatter(c, in, out, count, GT_F32, GT_COMM_AVG));
  for (size_t i = 0; i < count; i++) {
    size_t g = (size_t)r * count + i;
    float sum = (float)n * (float)(int)(g % 1000) + 3.0f * (float)(n * (n - 1) / 2);
    CHECK(out[i] == sum / (float)n);
  }
  free(in);
  free(out);
}

/* Reduce to each root in turn: the bits the reduce-scatter gives root as
 * its block (values that round, so that a sum in another order would show),
 * in place too, with no output on the other ranks; an average. */
static void check_reduce(gt_comm *c, size_t count, int r, int n) {
  float *in = malloc((size_t)n * count * sizeof *in + 4), *rs = malloc(count * sizeof *rs + 4);
  float *y = malloc(count * sizeof *y + 4);
  CHECK(in && rs && y);
  for (size_t i = 0; i < (size_t)n * count; i++)
    in[i] = 1.0f + (float)(int)((i * 7919 + (size_t)r * 104729) % 1000) / 977.0f;
  CHECK_OK(gt_comm_reduce_scatter(c, in, rs, count, GT_F32, GT_COMM_SUM));
  for (int root = 0; root < n; root++) {
    const float *block = in + (size_t)root * count;
    CHECK_OK(gt_comm_reduce_to(c, block, r == root ? y : NULL, count, GT_F32, GT_COMM_SUM, root));
    if (r == root) CHECK(memcmp(y, rs, count * sizeof *y) == 0);
    memcpy(y, block, count * sizeof *y);
    CHECK_OK(gt_comm_reduce_to(c, y, y, count, GT_F32, GT_COMM_SUM, root));
    if (r == root) CHECK(memcmp(y, rs, count * sizeof *y) == 0);
    if (r != root) CHECK(memcmp(y, block, count * sizeof *y) == 0); /* others' buffers untouched */
  }
  for (size_t i = 0; i < count; i++) y[i] = (float)n * (float)(int)(i % 5) + 2.0f * (float)r;
  CHECK_OK(gt_comm_reduce_to(c, y, y, count, GT_F32, GT_COMM_AVG, n - 1));
  if (r == n - 1)
    for (size_t i = 0; i < count; i++) CHECK(y[i] == (float)n * (float)(int)(i % 5) + (float)(n - 1));
  free(in);
  free(rs);
  free(y);
}

static void check_allgather(gt_comm *c, size_t count, int r, int n) {
  float *out = malloc((size_t)n * count * sizeof *out + 4), *mine = malloc(count * sizeof *mine + 4);
  CHECK(out && mine);
  for (size_t i = 0; i < count; i++) mine[i] = val(r, i);
  memset(out, 0xff, (size_t)n * count * sizeof *out);
  CHECK_OK(gt_comm_allgather(c, mine, out, count, GT_F32));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) CHECK(out[(size_t)q * count + i] == val(q, i));
  /* In place: the send block already sits in the output. */
  memset(out, 0, (size_t)n * count * sizeof *out);
  memcpy(out + (size_t)r * count, mine, count * sizeof *mine);
  CHECK_OK(gt_comm_allgather(c, out + (size_t)r * count, out, count, GT_F32));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) CHECK(out[(size_t)q * count + i] == val(q, i));
  free(out);
  free(mine);
}

static void check_broadcast(gt_comm *c, size_t count, int r, int n) {
  float *x = malloc(count * sizeof *x + 4);
  CHECK(x);
  for (int root = 0; root < n; root += (n > 3 ? n - 1 : 1)) {
    for (size_t i = 0; i < count; i++) x[i] = r == root ? val(root, i) : -1.0f;
    CHECK_OK(gt_comm_broadcast(c, x, count, GT_F32, root));
    for (size_t i = 0; i < count; i++) CHECK(x[i] == val(root, i));
  }
  free(x);
}

/* Every ordered pair, in one global order every rank follows. */
static void check_send_recv(gt_comm *c, size_t count, int r, int n) {
  float *x = malloc(count * sizeof *x + 4);
  CHECK(x);
  for (int a = 0; a < n; a++) {
    for (int b = 0; b < n; b++) {
      if (a == b || (r != a && r != b)) continue;
      if (r == a) {
        for (size_t i = 0; i < count; i++) x[i] = (float)(a * 100 + b) + (float)(int)(i % 100);
        CHECK_OK(gt_comm_send(c, x, count, GT_F32, b));
      } else {
        memset(x, 0, count * sizeof *x);
        CHECK_OK(gt_comm_recv(c, x, count, GT_F32, a));
        for (size_t i = 0; i < count; i++) CHECK(x[i] == (float)(a * 100 + b) + (float)(int)(i % 100));
      }
    }
  }
  free(x);
}

/* A ring shift in both directions at once, with messages far larger than
 * any transport buffer: separate send and recv would wait on each other. */
static void check_sendrecv(gt_comm *c, size_t count, int r, int n) {
  float *out = malloc(count * sizeof *out + 4), *in = malloc(count * sizeof *in + 4);
  CHECK(out && in);
  int right = (r + 1) % n, left = (r + n - 1) % n;
  for (size_t i = 0; i < count; i++) out[i] = (float)(r * 1000) + (float)(int)(i % 999);
  CHECK_OK(gt_comm_sendrecv(c, out, count, right, in, count, left, GT_F32));
  for (size_t i = 0; i < count; i++) CHECK(in[i] == (float)(left * 1000) + (float)(int)(i % 999));
  /* Uneven sizes: send r+1 elements, receive left+1. */
  CHECK_OK(gt_comm_sendrecv(c, out, (size_t)r + 1, right, in, (size_t)left + 1, left, GT_F32));
  for (int i = 0; i <= left; i++) CHECK(in[i] == (float)(left * 1000) + (float)i);
  CHECK(gt_comm_sendrecv(c, out, 1, r, in, 1, left, GT_F32) == GT_EINVAL);
  free(out);
  free(in);
}

/* Several operations in flight at once, finished in any order. */
static void check_async(gt_comm *c, int r, int n) {
  enum { K = 4, N = 100003 };
  float *x[K];
  gt_comm_req *req[K];
  for (int k = 0; k < K; k++) {
    x[k] = malloc(N * sizeof(float));
    CHECK(x[k]);
    for (size_t i = 0; i < N; i++) x[k][i] = (float)(k + r) + (float)(int)(i % 10);
    CHECK_OK(gt_comm_allreduce_start(c, x[k], N, GT_F32, GT_COMM_SUM, &req[k]));
  }
  bool done = false;
  double until = gt_now() + 30; /* milliseconds; only a hang gets to 30 s */
  while (!done && gt_now() < until) CHECK_OK(gt_comm_test(req[K - 1], &done));
  CHECK(done);
  for (int k = 0; k < K - 1; k++) CHECK_OK(gt_comm_wait(req[k], 30000));
  for (int k = 0; k < K; k++) {
    for (size_t i = 0; i < N; i++) CHECK(x[k][i] == (float)(n * k + n * (n - 1) / 2) + (float)n * (float)(int)(i % 10));
    free(x[k]);
  }
}

static int rank_main(int r, int n, void *arg) {
  const cfg *k = arg;
  if (k->enc) setenv("GT_COMM_ENCRYPT", "1", 1); /* this rank's process only */
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "coll", r, n, k->transport, 60000); /* no operation may time out */
  CHECK(gt_comm_rank(c) == r && gt_comm_size(c) == n);
  const char *want = k->transport == GT_COMM_SHM ? "shm" : "tcp";
  CHECK(strcmp(gt_comm_transport_name(c), want) == 0);
  size_t sizes[] = {0, 1, 7, (size_t)n * 5 + 3, 300001};
  for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
    check_allreduce(c, sizes[j], r, n);
    check_reduce_scatter(c, sizes[j], r, n);
    check_reduce(c, sizes[j], r, n);
    check_allgather(c, sizes[j], r, n);
    check_broadcast(c, sizes[j], r, n);
  }
  check_send_recv(c, 1, r, n);
  check_send_recv(c, 777777, r, n);
  check_sendrecv(c, 5u << 20, r, n);
  check_async(c, r, n);
  CHECK_OK(gt_comm_barrier(c));
  if (k->big) {
    size_t count = (64u << 20) / sizeof(float);
    float *x = malloc(count * sizeof *x);
    CHECK(x);
    for (size_t i = 0; i < count; i++) x[i] = val(r, i);
    CHECK_OK(gt_comm_allreduce(c, x, count, GT_F32, GT_COMM_SUM));
    for (size_t i = 0; i < count; i++)
      CHECK(x[i] == (float)n * (float)(int)(i % 1000) + 3.0f * (float)(n * (n - 1) / 2));
    free(x);
    check_reduce_scatter(c, count / (size_t)n, r, n);
    check_allgather(c, count / (size_t)n, r, n);
    check_broadcast(c, count / 4, r, n);
  }
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void run_with(int n, gt_comm_transport t, bool big, bool enc) {
  cfg k = {t, big, enc};
  int codes[HARNESS_MAX];
  /* One group's checks: 1-3 s on two loaded cores (8 ranks, optimized
   * build), so 120 s is > 10x with sanitizers too; only a hang gets there. */
  int bad = harness_run(n, rank_main, &k, 120, codes);
  for (int r = 0; r < n; r++)
    if (codes[r] != RANK_OK) print_error("rank %d exited with %d\n", r, codes[r]);
  assert_int_equal(bad, 0);
}

static void run(int n, gt_comm_transport t, bool big) { run_with(n, t, big, false); }

static void tcp_2(void **s) {
  (void)s;
  run(2, GT_COMM_TCP, true);
}
static void tcp_3(void **s) {
  (void)s;
  run(3, GT_COMM_TCP, false);
}
static void tcp_4(void **s) {
  (void)s;
  run(4, GT_COMM_TCP, true);
}
static void tcp_8(void **s) {
  (void)s;
  run(8, GT_COMM_TCP, false);
}
static void tcp_encrypted_2(void **s) {
  (void)s;
  run_with(2, GT_COMM_TCP, true, true);
}
static void tcp_encrypted_3(void **s) {
  (void)s;
  run_with(3, GT_COMM_TCP, false, true);
}
static void shm_2(void **s) {
  (void)s;
  run(2, GT_COMM_SHM, true);
}
static void shm_3(void **s) {
  (void)s;
  run(3, GT_COMM_SHM, false);
}
static void shm_4(void **s) {
  (void)s;
  run(4, GT_COMM_SHM, true);
}
static void shm_8(void **s) {
  (void)s;
  run(8, GT_COMM_SHM, false);
}

static int one_rank(int r, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "solo", r, n, GT_COMM_AUTO, 30000); /* one rank: no waits at all */
  float x[3] = {1, 2, 3}, y[3];
  CHECK_OK(gt_comm_allreduce(c, x, 3, GT_F32, GT_COMM_AVG));
  CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3);
  CHECK_OK(gt_comm_reduce_scatter(c, x, y, 3, GT_F32, GT_COMM_SUM));
  CHECK(y[0] == 1 && y[2] == 3);
  CHECK_OK(gt_comm_reduce_to(c, x, y, 3, GT_F32, GT_COMM_SUM, 0));
  CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3);
  CHECK(gt_comm_reduce_to(c, x, y, 3, GT_F32, GT_COMM_SUM, 1) == GT_EINVAL);
  CHECK_OK(gt_comm_allgather(c, x, y, 3, GT_F32));
  CHECK(y[1] == 2);
  CHECK_OK(gt_comm_broadcast(c, x, 3, GT_F32, 0));
  CHECK_OK(gt_comm_barrier(c));
  /* Bad arguments are errors. */
  CHECK(gt_comm_send(c, x, 3, GT_F32, 0) == GT_EINVAL);
  CHECK(gt_comm_broadcast(c, x, 3, GT_F32, 1) == GT_EINVAL);
  CHECK(gt_comm_allreduce(c, x, 3, GT_I32, GT_COMM_SUM) == GT_EINVAL);
  CHECK(gt_comm_allreduce(c, NULL, 3, GT_F32, GT_COMM_SUM) == GT_EINVAL);
  gt_comm_config bad = {.store = s, .prefix = "x", .rank = 2, .size = 2, .secret = "s"};
  gt_comm *d = NULL;
  CHECK(gt_comm_init(&bad, &d) == GT_EINVAL && d == NULL);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void single_rank(void **s) {
  (void)s;
  int codes[1];
  assert_int_equal(harness_run(1, one_rank, NULL, 60, codes), 0); /* milliseconds */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(single_rank),     cmocka_unit_test(tcp_2), cmocka_unit_test(tcp_3),
      cmocka_unit_test(tcp_4),           cmocka_unit_test(tcp_8), cmocka_unit_test(tcp_encrypted_2),
      cmocka_unit_test(tcp_encrypted_3), cmocka_unit_test(shm_2), cmocka_unit_test(shm_3),
      cmocka_unit_test(shm_4),           cmocka_unit_test(shm_8),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
