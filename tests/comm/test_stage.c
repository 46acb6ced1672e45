/* The staging plan of host buffers for NCCL (comm/stage.h), played on
 * simulated ranks: every operation, cut into pieces by gt_stage_plan_make,
 * its copies run with memcpy into a staging buffer of exactly the bytes the
 * plan asks for (so ASan sees any copy past it), and each piece's NCCL
 * operation computed on what the ranks staged. The callers' outputs must
 * be the whole operation's results, for every element; the peers must cut
 * alike (the same pieces, a sent piece the size of its receive); and the
 * staging stays within its limit. Sizes that are no multiple of a piece,
 * limits from one element a piece to a piece for all, 1 to 4 ranks, and
 * inputs or outputs left in device memory (not staged) where an operation
 * allows it. The NCCL backend runs the same plan on a GPU
 * (test_comm_nccl). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "comm/stage.h"
#include "giant/engine/comm.h"

enum { MAXP = 4 };

/* One simulated rank: its request, its buffers and its staging. */
typedef struct rank_io {
  gt_comm_req q;
  float *in, *out; /* the caller's (in == out in place) */
  gt_stage_plan plan;
  char *stage;
} rank_io;

static void run_copy(char *dst, const char *src, const gt_stage_copy *c) {
  for (size_t r = 0; r < c->rows && c->width; r++)
    memcpy(dst + c->dst + r * c->dpitch, src + c->src + r * c->spitch, c->width);
}

/* The end of a copy's last row in its destination. */
static size_t copy_end(const gt_stage_copy *c) { return c->width ? c->dst + (c->rows - 1) * c->dpitch + c->width : 0; }

static const float *read_at(rank_io *x, const gt_stage_at *a) {
  return (const float *)(a->staged ? x->stage + a->off : (const char *)x->in + a->off);
}
static float *write_at(rank_io *x, const gt_stage_at *a) {
  return (float *)(a->staged ? x->stage + a->off : (char *)x->out + a->off);
}

/* Piece k's operation on every rank at once, as NCCL computes it. */
static void transport(rank_io *x, int P, const gt_stage_piece *pc) {
  comm_op_kind kind = x[0].q.kind;
  size_t n = pc[0].n;
  float *tmp = calloc((size_t)P * n + 1, sizeof *tmp);
  assert_non_null(tmp);
  if (kind == OP_ALLREDUCE || kind == OP_BROADCAST || kind == OP_REDUCE) {
    for (size_t i = 0; i < n; i++)
      for (int r = 0; r < P; r++)
        if (kind != OP_BROADCAST || r == x[0].q.peer) tmp[i] += read_at(&x[r], &pc[r].from)[i];
    for (int r = 0; r < P; r++)
      if (kind != OP_REDUCE || r == x[0].q.peer) memcpy(write_at(&x[r], &pc[r].to), tmp, n * sizeof *tmp);
  } else if (kind == OP_REDUCE_SCATTER) {
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < n; i++)
        for (int q = 0; q < P; q++) tmp[(size_t)r * n + i] += read_at(&x[q], &pc[q].from)[(size_t)r * n + i];
    for (int r = 0; r < P; r++) memcpy(write_at(&x[r], &pc[r].to), tmp + (size_t)r * n, n * sizeof *tmp);
  } else if (kind == OP_ALLGATHER) {
    for (int q = 0; q < P; q++) memcpy(tmp + (size_t)q * n, read_at(&x[q], &pc[q].from), n * sizeof *tmp);
    for (int r = 0; r < P; r++) memcpy(write_at(&x[r], &pc[r].to), tmp, (size_t)P * n * sizeof *tmp);
  } else {
    /* Point to point: each message lands whole in its receiver's piece,
     * which must be its size. Sent first, then delivered, as a group. */
    float *msg[MAXP] = {0};
    for (int r = 0; r < P; r++) {
      if (x[r].q.kind == OP_RECV || !pc[r].n) continue;
      msg[r] = malloc(pc[r].n * sizeof(float));
      memcpy(msg[r], read_at(&x[r], &pc[r].from), pc[r].n * sizeof(float));
    }
    for (int r = 0; r < P; r++) {
      if (x[r].q.kind == OP_SEND) continue;
      int from = x[r].q.kind == OP_RECV ? x[r].q.peer : x[r].q.peer2;
      assert_int_equal(pc[from].n, pc[r].n2);
      if (pc[r].n2) memcpy(write_at(&x[r], &pc[r].to), msg[from], pc[r].n2 * sizeof(float));
    }
    for (int r = 0; r < P; r++) free(msg[r]);
  }
  free(tmp);
}

/* Plays the operation the ranks' requests describe through the staging,
 * with pieces of at most `limit` bytes of it. */
static void play(rank_io *x, int P, bool host_in, bool host_out, size_t limit) {
  size_t pieces = 0;
  for (int r = 0; r < P; r++) {
    gt_stage_plan_make(&x[r].q, sizeof(float), P, r, host_in, host_out, limit, &x[r].plan);
    x[r].stage = malloc(x[r].plan.bytes ? x[r].plan.bytes : 1);
    assert_non_null(x[r].stage);
    if (x[r].plan.pieces > pieces) pieces = x[r].plan.pieces;
    /* Within the limit, unless one element of each row needs more. */
    size_t one = sizeof(float) * (size_t)(P + 1) * 2;
    if (limit >= one) assert_true(x[r].plan.bytes <= limit + 256);
  }
  for (size_t k = 0; k < pieces; k++) {
    gt_stage_piece pc[MAXP];
    for (int r = 0; r < P; r++) {
      /* A rank with fewer pieces (point to point) has nothing left to do. */
      if (k < x[r].plan.pieces)
        gt_stage_piece_at(&x[r].plan, k, &pc[r]);
      else
        pc[r] = (gt_stage_piece){.from = {false, 0}, .to = {false, 0}};
      assert_true(copy_end(&pc[r].in) <= x[r].plan.bytes);
      run_copy(x[r].stage, (const char *)x[r].in, &pc[r].in);
    }
    transport(x, P, pc);
    for (int r = 0; r < P; r++) run_copy((char *)x[r].out, x[r].stage, &pc[r].out);
  }
  /* The collectives: every rank cuts the operation alike. */
  if (x[0].q.kind != OP_SEND && x[0].q.kind != OP_RECV && x[0].q.kind != OP_SENDRECV)
    for (int r = 1; r < P; r++) assert_int_equal(x[r].plan.pieces, x[0].plan.pieces);
  for (int r = 0; r < P; r++) {
    free(x[r].stage);
    x[r].stage = NULL;
  }
}

static float value(int r, size_t i) { return (float)(r * 1000) + (float)(int)(i % 997); }

static const size_t limits[] = {1, 20, 40, 100, GT_STAGE_LIMIT};
static const size_t counts[] = {1, 7, 23, 64};

static void collective(comm_op_kind kind, bool host_in, bool host_out) {
  for (int P = 1; P <= MAXP; P++)
    for (size_t li = 0; li < sizeof limits / sizeof *limits; li++)
      for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t n = counts[ci], N = n * (size_t)P;
        rank_io x[MAXP] = {0};
        for (int r = 0; r < P; r++) {
          bool one = kind == OP_ALLREDUCE || kind == OP_BROADCAST;
          x[r].in = calloc(N, sizeof(float));
          x[r].out = one ? x[r].in : calloc(N, sizeof(float));
          for (size_t i = 0; i < N; i++) x[r].out[i] = -1.0f;
          for (size_t i = 0; i < N; i++) x[r].in[i] = value(r, i);
          x[r].q = (gt_comm_req){
              .kind = kind, .src = one ? NULL : x[r].in, .buf = x[r].out, .count = n, .dtype = GT_F32, .peer = P - 1};
        }
        play(x, P, host_in, host_out, limits[li]);
        for (int r = 0; r < P; r++) {
          for (size_t i = 0; i < (kind == OP_ALLGATHER ? N : n); i++) {
            float want = 0;
            if (kind == OP_ALLREDUCE || (kind == OP_REDUCE && r == P - 1))
              for (int q = 0; q < P; q++) want += value(q, i);
            else if (kind == OP_REDUCE)
              want = -1.0f; /* the output is root's alone */
            else if (kind == OP_BROADCAST)
              want = value(P - 1, i);
            else if (kind == OP_REDUCE_SCATTER)
              for (int q = 0; q < P; q++) want += value(q, (size_t)r * n + i);
            else
              want = value((int)(i / n), i % n);
            if (x[r].out[i] != want)
              fail_msg("op %d, %d ranks, limit %zu, count %zu, in %s, out %s: rank %d element %zu is %g, want %g",
                       (int)kind, P, limits[li], n, host_in ? "host" : "device", host_out ? "host" : "device", r, i,
                       (double)x[r].out[i], (double)want);
          }
          if (x[r].out != x[r].in) free(x[r].out);
          free(x[r].in);
        }
      }
}

static void test_allreduce(void **state) {
  (void)state;
  collective(OP_ALLREDUCE, true, true);
}
static void test_reduce(void **state) {
  (void)state;
  collective(OP_REDUCE, true, true);
  collective(OP_REDUCE, false, true);
  collective(OP_REDUCE, true, false);
}
static void test_broadcast(void **state) {
  (void)state;
  collective(OP_BROADCAST, true, true);
}

static void test_reduce_scatter(void **state) {
  (void)state;
  collective(OP_REDUCE_SCATTER, true, true);
  collective(OP_REDUCE_SCATTER, false, true);
  collective(OP_REDUCE_SCATTER, true, false);
}

static void test_allgather(void **state) {
  (void)state;
  collective(OP_ALLGATHER, true, true);
  collective(OP_ALLGATHER, false, true);
  collective(OP_ALLGATHER, true, false);
}

/* A ring of sendrecv with counts that differ by rank (each sends what its
 * receiver expects), and a send met by a recv: the pieces must pair. */
static void test_point_to_point(void **state) {
  (void)state;
  for (int P = 2; P <= MAXP; P++)
    for (size_t li = 0; li < sizeof limits / sizeof *limits; li++)
      for (int in_host = 0; in_host < 2; in_host++) {
        rank_io x[MAXP] = {0};
        size_t sends[MAXP];
        for (int r = 0; r < P; r++) sends[r] = 5 + 9 * (size_t)r;
        for (int r = 0; r < P; r++) {
          int to = (r + 1) % P, from = (r + P - 1) % P;
          x[r].in = calloc(sends[r], sizeof(float));
          x[r].out = calloc(sends[from], sizeof(float));
          for (size_t i = 0; i < sends[r]; i++) x[r].in[i] = value(r, i);
          x[r].q = (gt_comm_req){.kind = OP_SENDRECV,
                                 .src = x[r].in,
                                 .buf = x[r].out,
                                 .count = sends[r],
                                 .count2 = sends[from],
                                 .dtype = GT_F32,
                                 .peer = to,
                                 .peer2 = from};
        }
        play(x, P, in_host, true, limits[li]);
        for (int r = 0; r < P; r++) {
          int from = (r + P - 1) % P;
          for (size_t i = 0; i < sends[from]; i++) assert_true(x[r].out[i] == value(from, i));
          free(x[r].in);
          free(x[r].out);
        }
      }
  for (size_t li = 0; li < sizeof limits / sizeof *limits; li++) {
    rank_io x[2] = {0};
    size_t n = 37;
    x[0].in = calloc(n, sizeof(float));
    x[1].out = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[0].in[i] = value(0, i);
    x[0].q = (gt_comm_req){.kind = OP_SEND, .src = x[0].in, .count = n, .dtype = GT_F32, .peer = 1};
    x[1].q = (gt_comm_req){.kind = OP_RECV, .buf = x[1].out, .count = n, .dtype = GT_F32, .peer = 0};
    play(x, 2, true, true, limits[li]);
    assert_int_equal(x[0].plan.pieces, x[1].plan.pieces);
    for (size_t i = 0; i < n; i++) assert_true(x[1].out[i] == value(0, i));
    /* The same message received by a sendrecv that sends nothing back. */
    memset(x[1].out, 0, n * sizeof(float));
    x[1].q = (gt_comm_req){
        .kind = OP_SENDRECV, .buf = x[1].out, .count = 0, .count2 = n, .dtype = GT_F32, .peer = 0, .peer2 = 0};
    play(x, 2, true, true, limits[li]);
    for (size_t i = 0; i < n; i++) assert_true(x[1].out[i] == value(0, i));
    free(x[0].in);
    free(x[1].out);
  }
}

/* The figures of one plan, worked by hand: a reduce-scatter of 10 floats a
 * rank over 3 ranks, its input in host memory and its output on the
 * device, with 100 bytes of staging: 100 / (4 x 4) = 6 elements a piece,
 * two pieces (6 and 4); the input rows [3][6] in front, the output behind
 * at 3 x 6 x 4 = 72 rounded to 256. */
static void test_plan_figures(void **state) {
  (void)state;
  float in[30], out[10];
  gt_comm_req q = {.kind = OP_REDUCE_SCATTER, .src = in, .buf = out, .count = 10, .dtype = GT_F32};
  gt_stage_plan p;
  gt_stage_plan_make(&q, 4, 3, 1, true, false, 100, &p);
  assert_int_equal(p.piece, 6);
  assert_int_equal(p.pieces, 2);
  assert_true(p.via_in && !p.via_out);
  assert_int_equal(p.at_out, 256);
  assert_int_equal(p.bytes, 256);
  gt_stage_piece pc;
  gt_stage_piece_at(&p, 1, &pc);
  assert_int_equal(pc.n, 4);
  gt_stage_copy want_in = {.dst = 0, .dpitch = 16, .src = 24, .spitch = 40, .width = 16, .rows = 3};
  assert_memory_equal(&pc.in, &want_in, sizeof want_in);
  assert_true(pc.from.staged && pc.from.off == 0);
  assert_true(!pc.to.staged && pc.to.off == 24); /* the device output, written in place */
  assert_int_equal(pc.out.width, 0);
  /* What each operation reads and writes, over 3 ranks. */
  size_t in_bytes, out_bytes;
  gt_stage_extent(&q, 4, 3, &in_bytes, &out_bytes);
  assert_true(in_bytes == 120 && out_bytes == 40);
  assert_ptr_equal(gt_stage_input(&q), in);
  gt_comm_req ag = {.kind = OP_ALLGATHER, .src = out, .buf = in, .count = 10, .dtype = GT_F32};
  gt_stage_extent(&ag, 4, 3, &in_bytes, &out_bytes);
  assert_true(in_bytes == 40 && out_bytes == 120);
  gt_comm_req ar = {.kind = OP_ALLREDUCE, .buf = out, .count = 10, .dtype = GT_F32};
  gt_stage_extent(&ar, 4, 3, &in_bytes, &out_bytes);
  assert_true(in_bytes == 40 && out_bytes == 40);
  assert_ptr_equal(gt_stage_input(&ar), out);
  gt_comm_req sr = {.kind = OP_SENDRECV, .src = in, .buf = out, .count = 5, .count2 = 7, .dtype = GT_F32};
  gt_stage_extent(&sr, 4, 3, &in_bytes, &out_bytes);
  assert_true(in_bytes == 20 && out_bytes == 28);
  gt_comm_req rv = {.kind = OP_RECV, .buf = out, .count = 7, .dtype = GT_F32};
  gt_stage_extent(&rv, 4, 3, &in_bytes, &out_bytes);
  assert_true(in_bytes == 0 && out_bytes == 28);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_figures),   cmocka_unit_test(test_allreduce), cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_reduce_scatter), cmocka_unit_test(test_reduce),    cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_point_to_point),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
