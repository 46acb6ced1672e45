/* The planner: stage cuts against hand-worked cases and a brute force over
 * every cut, batch shares, the cost model against hand-computed step times
 * and memory, the layout choice, the layers read from a GPT, and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"

#include "examples/gpt/gpt.h"
#include "giant/engine/grid.h"
#include "parallel/planner.h"
#include "giant/group.h"

#define MIB (1024.0 * 1024.0)

static void expect_cut(const int *got, const int *want, int n) {
  for (int i = 0; i <= n; i++)
    if (got[i] != want[i]) fail_msg("cut boundary %d is %d, want %d", i, got[i], want[i]);
}

static void equal_layers(gt_planner_layer *ls, int L, double flops, double params, double acts) {
  for (int i = 0; i < L; i++) ls[i] = (gt_planner_layer){.flops = flops, .param_bytes = params, .act_bytes = acts};
}

static void test_partition_cases(void **state) {
  (void)state;
  gt_planner_layer ls[12];
  int first[5];
  equal_layers(ls, 8, 1e9, 1, 1);
  OK(gt_planner_partition(ls, 8, &(gt_planner_stages){.n = 4}, first));
  expect_cut(first, (int[]){0, 2, 4, 6, 8}, 4);
  /* Ties go to the earliest cut: 5 layers on 2 stages give 2 + 3. */
  OK(gt_planner_partition(ls, 5, &(gt_planner_stages){.n = 2}, first));
  expect_cut(first, (int[]){0, 2, 5}, 2);
  /* One stage runs at half speed: with 12 layers it gets 4 (8 / 1 = 4 / 0.5). */
  equal_layers(ls, 12, 1e9, 1, 1);
  OK(gt_planner_partition(ls, 12, &(gt_planner_stages){.n = 2, .speed = (double[]){1.0, 0.5}}, first));
  expect_cut(first, (int[]){0, 8, 12}, 2);
  OK(gt_planner_partition(ls, 12, &(gt_planner_stages){.n = 2, .speed = (double[]){0.5, 1.0}}, first));
  expect_cut(first, (int[]){0, 4, 12}, 2);
  /* Memory: per layer 100 parameter bytes (x4 with gradients and Adam) and
   * 10 activation bytes per micro-batch; 1F1B on 2 stages keeps 2 and 1
   * micro-batches. Stage 0 then needs 420 per layer, stage 1 410. */
  equal_layers(ls, 4, 1, 100, 10);
  const double flight[2] = {2, 1};
  OK(gt_planner_partition(ls, 4, &(gt_planner_stages){.n = 2, .in_flight = flight}, first));
  expect_cut(first, (int[]){0, 2, 4}, 2);
  OK(gt_planner_partition(ls, 4, &(gt_planner_stages){.n = 2, .in_flight = flight, .mem_bytes = (double[]){500, 2000}},
                          first));
  expect_cut(first, (int[]){0, 1, 4}, 2);
  /* Nothing fits: the closest cut (2 + 2) is over by 340 bytes on stage 0. */
  expect_error(gt_planner_partition(
                   ls, 4, &(gt_planner_stages){.n = 2, .in_flight = flight, .mem_bytes = (double[]){500, 500}}, first),
               GT_ENOMEM, "on stage 0 (layers 0-1");
  expect_cut(first, (int[]){0, 2, 4}, 2);
  /* Stages may be uneven, never empty: 3 layers on 3 stages, one heavy. */
  ls[0].flops = 100;
  OK(gt_planner_partition(ls, 3, &(gt_planner_stages){.n = 3}, first));
  expect_cut(first, (int[]){0, 1, 2, 3}, 3);
}

/* Every cut of L layers into n stages, for the smallest largest time. */
static double brute(const gt_planner_layer *ls, int L, int n, const double *speed, const double *mem,
                    const double *flight, int s, int from) {
  if (s == n - 1 || from == L) {
    if (s != n - 1) return INFINITY;
    double f = 0, pb = 0, a = 0;
    for (int i = from; i < L; i++) {
      f += ls[i].flops;
      pb += ls[i].param_bytes;
      a += ls[i].act_bytes;
    }
    if (from == L || 4 * pb + flight[s] * a > mem[s]) return INFINITY;
    return f / speed[s];
  }
  double best = INFINITY, f = 0, pb = 0, a = 0;
  for (int to = from + 1; to < L; to++) {
    f += ls[to - 1].flops;
    pb += ls[to - 1].param_bytes;
    a += ls[to - 1].act_bytes;
    if (4 * pb + flight[s] * a > mem[s]) break;
    double rest = brute(ls, L, n, speed, mem, flight, s + 1, to), here = f / speed[s];
    double v = rest > here ? rest : here;
    if (v < best) best = v;
  }
  return best;
}

static void test_partition_matches_brute_force(void **state) {
  (void)state;
  srand(7);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 400; trial++) {
    int L = 1 + rand() % 10, n = 1 + rand() % (L < 4 ? L : 4);
    gt_planner_layer ls[10];
    double speed[4], mem[4], flight[4];
    for (int i = 0; i < L; i++)
      ls[i] = (gt_planner_layer){.flops = 1 + rand() % 50, .param_bytes = rand() % 20, .act_bytes = rand() % 10};
    for (int s = 0; s < n; s++) {
      speed[s] = 0.25 * (1 + rand() % 4);
      mem[s] = 50 + rand() % 300;
      flight[s] = n - s;
    }
    double want = brute(ls, L, n, speed, mem, flight, 0, 0);
    int first[5];
    gt_status st = gt_planner_partition(
        ls, L, &(gt_planner_stages){.n = n, .speed = speed, .mem_bytes = mem, .in_flight = flight}, first);
    if (!isfinite(want)) {
      assert_int_equal(st, GT_ENOMEM);
      infeasible++;
      continue;
    }
    OK(st);
    feasible++;
    double worst = 0;
    assert_int_equal(first[0], 0);
    assert_int_equal(first[n], L);
    for (int s = 0; s < n; s++) {
      double f = 0, pb = 0, a = 0;
      assert_true(first[s] < first[s + 1]);
      for (int i = first[s]; i < first[s + 1]; i++) {
        f += ls[i].flops;
        pb += ls[i].param_bytes;
        a += ls[i].act_bytes;
      }
      assert_true(4 * pb + flight[s] * a <= mem[s]);
      if (f / speed[s] > worst) worst = f / speed[s];
    }
    NEAR(worst, want, 1e-9);
  }
  assert_true(feasible > 100 && infeasible > 20); /* both branches exercised */
}

static void test_batch_split(void **state) {
  (void)state;
  int sh[3];
  OK(gt_planner_batch_split(3, 2, (double[]){1.0, 0.5}, sh));
  assert_true(sh[0] == 2 && sh[1] == 1);
  OK(gt_planner_batch_split(12, 2, (double[]){1.0, 0.5}, sh));
  assert_true(sh[0] == 8 && sh[1] == 4);
  OK(gt_planner_batch_split(10, 3, NULL, sh)); /* remainder to the lowest index */
  assert_true(sh[0] == 4 && sh[1] == 3 && sh[2] == 3);
  OK(gt_planner_batch_split(7, 3, (double[]){1.0, 2.0, 1.0}, sh)); /* 1.75 3.5 1.75 */
  assert_true(sh[0] == 2 && sh[1] == 3 && sh[2] == 2);
  OK(gt_planner_batch_split(2, 2, (double[]){1.0, 0.001}, sh)); /* at least one each */
  assert_true(sh[0] == 1 && sh[1] == 1);
  OK(gt_planner_batch_split(5, 2, (double[]){1.0, 0.001}, sh));
  assert_true(sh[0] == 4 && sh[1] == 1);
  expect_error(gt_planner_batch_split(1, 2, NULL, sh), GT_EINVAL, "batch of >= 2 rows");
  expect_error(gt_planner_batch_split(4, 2, (double[]){1.0, 0.0}, sh), GT_EINVAL, "replica 1 has speed 0");
  expect_error(gt_planner_batch_split(4, 0, NULL, sh), GT_EINVAL, "at least one replica");
}

/* Four equal layers of 1 GFLOP, 1 MiB of parameters and 0.5 MiB of
 * activations each, 4 micro-batches, ranks of 1 GFLOP/s; all-reduce links
 * of 4 MiB/s, half of the gradient all-reduce hidden. */
static gt_planner_layer four[4];
static gt_planner_hw hw2;
static gt_planner_job job4;

static int setup(void **state) {
  (void)state;
  for (int i = 0; i < 4; i++)
    four[i] = (gt_planner_layer){.flops = 1e9,
                                 .param_bytes = MIB,
                                 .act_bytes = 0.5 * MIB,
                                 .out_bytes = 1024,
                                 .tp_allreduces = 2,
                                 .tp_allreduce_bytes = MIB};
  hw2 =
      (gt_planner_hw){.world = 2, .peak_flops = 1e9, .p2p_bandwidth = 1e30, .ar_bandwidth = 4 * MIB, .dp_overlap = 0.5};
  job4 = (gt_planner_job){.layers = four, .nlayers = 4, .micro_batches = 4, .schedule = GT_PP_1F1B, .chunks = 1};
  return 0;
}

static void test_estimate_by_hand(void **state) {
  (void)state;
  gt_planner_result e;
  /* pp=2: 2 layers per stage, forward 2 s, backward 4 s: (m+p-1) * 6 = 30 s.
   * Memory: 4 x 2 MiB of state + 2 (stage 0) or 1 (stage 1) x 1 MiB. */
  OK(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){1, 1, 2}, NULL, &e));
  expect_cut(e.first, (int[]){0, 2, 4}, 2);
  NEAR(e.pipeline_seconds, 30, 1e-9);
  NEAR(e.step_seconds, 30, 1e-9);
  NEAR(e.bubble, 1.0 / 5, 1e-12);
  NEAR(e.stage_seconds[0], 6, 1e-12);
  NEAR(e.mem_bytes[0], 10 * MIB, 1e-3);
  NEAR(e.mem_bytes[1], 9 * MIB, 1e-3);
  /* dp=2: 2 micro-batches each of 4 s + 8 s; the ring all-reduce of 4 MiB
   * over 2 ranks moves 4 MiB per link: 1 s, half exposed. */
  OK(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.pipeline_seconds, 24, 1e-9);
  NEAR(e.dp_seconds, 1, 1e-9);
  NEAR(e.step_seconds, 24.5, 1e-9);
  NEAR(e.mem_bytes[0], 16 * MIB + 2 * MIB, 1e-3);
  /* ZeRO-1 shards Adam's state: 2 + 2/2 = 3 bytes per parameter byte. */
  gt_planner_job z = job4;
  z.zero1 = true;
  OK(gt_planner_estimate(&hw2, &z, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.mem_bytes[0], 12 * MIB + 2 * MIB, 1e-3);
  /* tp=2: half the compute (2 s + 4 s per micro-batch) plus, per layer and
   * direction, 2 ring all-reduces of 1 MiB over 2 ranks: 8 x 0.25 s each way. */
  OK(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){1, 2, 1}, NULL, &e));
  NEAR(e.stage_seconds[0], 6 + 2 * 8 * 0.25, 1e-9);
  NEAR(e.step_seconds, 4 * (6 + 4), 1e-9);
  NEAR(e.mem_bytes[0], 9 * MIB, 1e-3);
  /* A given cut: 1 + 3 layers, the slow stage sets the pace: forward 3 s,
   * backward 6 s; makespan = 1 + 4 * 9 + 2 (stage 0's last backward). */
  OK(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){1, 1, 2}, (int[]){0, 1, 4}, &e));
  NEAR(e.pipeline_seconds, 1 + 36 + 2, 1e-9);
  /* A budget: 9.5 MiB per rank leaves stage 0 (10 MiB) 0.5 MiB short. */
  gt_planner_hw tight = hw2;
  tight.mem_bytes = (double[]){9.5 * MIB, 9.5 * MIB};
  OK(gt_planner_estimate(&tight, &job4, (gt_grid_layout){1, 1, 2}, (int[]){0, 2, 4}, &e));
  NEAR(e.mem_shortfall, 0.5 * MIB, 1e-3);
  assert_int_equal(e.short_rank, 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gt_planner_print(&e, &job4, f);
  fclose(f);
  assert_non_null(strstr(buf, "plan: dp=1,tp=1,pp=2  schedule 1f1b"));
  assert_non_null(strstr(buf, "bubble 20.0%"));
  assert_non_null(strstr(buf, "0      0     0-1          2"));
  assert_non_null(strstr(buf, "memory, pipeline rank 0: 10.0 MiB"));
  assert_non_null(strstr(buf, "0.5 MiB over budget on rank 0"));
  free(buf);
}

static void test_choose(void **state) {
  (void)state;
  gt_planner_result e;
  /* No memory limit, no tensor parallelism: dp=2 (24.5 s) beats pp=2 (30 s). */
  OK(gt_planner_choose(&hw2, &job4, &e));
  assert_true(e.layout.dp == 2 && e.layout.tp == 1 && e.layout.pp == 1);
  /* A factor already decided (by a flag or an annotation) is kept: with pp
   * fixed at 2 the planner takes the slower pipeline; with dp fixed at 1 it
   * fills the world with pp. */
  gt_planner_job fixed = job4;
  fixed.fixed = (gt_grid_layout){.pp = 2};
  OK(gt_planner_choose(&hw2, &fixed, &e));
  assert_true(e.layout.dp == 1 && e.layout.tp == 1 && e.layout.pp == 2);
  fixed.fixed = (gt_grid_layout){.dp = 1};
  OK(gt_planner_choose(&hw2, &fixed, &e));
  assert_int_equal(e.layout.pp, 2);
  fixed.fixed = (gt_grid_layout){.tp = 2}; /* job4 allows tp = 1 only */
  expect_error(gt_planner_choose(&hw2, &fixed, &e), GT_EINVAL, "fixed factors dp=0,tp=2,pp=0");
  /* 12 MiB per rank: one replica of the whole model needs 18 MiB, so the
   * model is cut into two stages (10 and 9 MiB). */
  gt_planner_hw small = hw2;
  small.mem_bytes = (double[]){12 * MIB, 12 * MIB};
  OK(gt_planner_choose(&small, &job4, &e));
  assert_true(e.layout.dp == 1 && e.layout.tp == 1 && e.layout.pp == 2);
  assert_true(e.mem_shortfall <= 0);
  /* With tensor parallelism allowed and fast links, tp=2 has no bubble. */
  gt_planner_hw fast = small;
  fast.ar_bandwidth = 1e30;
  gt_planner_job tpj = job4;
  tpj.tp_allowed = (int[]){1, 2};
  tpj.ntp_allowed = 2;
  OK(gt_planner_choose(&fast, &tpj, &e));
  assert_true(e.layout.dp == 1 && e.layout.tp == 2 && e.layout.pp == 1);
  NEAR(e.step_seconds, 24, 1e-9);
  /* 5 MiB: nothing fits; tp=2 (9 MiB) comes closest, 4 MiB short. */
  fast.mem_bytes = (double[]){5 * MIB, 5 * MIB};
  expect_error(gt_planner_choose(&fast, &tpj, &e), GT_ENOMEM, "the closest, dp=1,tp=2,pp=1, needs 4.0 MiB more");
  /* Interleaved needs each replica's micro-batches to be a multiple of pp:
   * one micro-batch on 2 ranks allows neither dp=2 nor pp=2. */
  gt_planner_job il = job4;
  il.schedule = GT_PP_INTERLEAVED;
  il.chunks = 2;
  il.micro_batches = 1;
  expect_error(gt_planner_choose(&hw2, &il, &e), GT_EINVAL, "no layout of 2 ranks suits this job");
  /* With 4, dp=2 does not fit in 12 MiB; pp=2 with 2 chunks per rank does,
   * one layer per chunk. */
  il.micro_batches = 4;
  OK(gt_planner_choose(&small, &il, &e));
  assert_true(e.layout.pp == 2 && e.nstages == 4 && e.chunks == 2);
  expect_cut(e.first, (int[]){0, 1, 2, 3, 4}, 4);
}

/* Offloading: a rank holds window + 2 slots of the widest layer and the
 * activations; its transfers overlap compute, and a stage takes the longer
 * of the two. */
static void test_offload(void **state) {
  (void)state;
  gt_planner_result e;
  gt_planner_hw hw = hw2;
  hw.copy_bandwidth = 1e30;
  gt_planner_job off = job4;
  off.offload_window = 1;
  /* dp=2, 2 micro-batches each: 3 slots of 1 MiB and the 4 layers'
   * activations (2 MiB) instead of 16 + 2 MiB; free copies cost nothing. */
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.mem_bytes[0], 5 * MIB, 1e-3);
  NEAR(e.step_seconds, 24.5, 1e-9);
  /* At 1 MiB/s, per micro-batch: 4 MiB in for forward (4 s, as long as
   * its compute), 4 MiB in again for backward, 4 MiB of gradients out and,
   * in one of the two micro-batches, in: 10 s against 8 s of compute. */
  hw.copy_bandwidth = MIB;
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.pipeline_seconds, 2 * (4 + 10), 1e-9);
  NEAR(e.step_seconds, 28.5, 1e-9);
  NEAR(e.offload_bytes, 28 * MIB, 1e-3);
  NEAR(e.offload_seconds, 28, 1e-9);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gt_planner_print(&e, &off, f);
  fclose(f);
  assert_non_null(strstr(buf, "memory, pipeline rank 0: 5.0 MiB (offloaded: the window and activations)"));
  assert_non_null(strstr(buf, "offloaded, window 1: 28.0 MiB a step between host and device, 28 s of transfers"));
  free(buf);
  /* Under bf16 a window holds the matmul-only weights (3/4 of each layer
   * here) in bf16 and the rest in fp32 with a bf16 copy: a weight slot of
   * 0.25 x 1.5 + 0.75 / 2 = 0.75 MiB beside two fp32 gradient slots, and a
   * fetch moves 0.625 MiB. Per micro-batch 2.5 MiB in for forward (4 s of
   * compute is longer), 2.5 in for backward and 6 of gradients: 8.5 s
   * against 8 s of compute. */
  for (int i = 0; i < 4; i++) four[i].matmul_bytes = 0.75 * MIB;
  off.precision = GT_PRECISION_BF16;
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.mem_bytes[0], 4.75 * MIB, 1e-3);
  NEAR(e.pipeline_seconds, 2 * (4 + 8.5), 1e-9);
  NEAR(e.offload_bytes, 22 * MIB, 1e-3);
  /* fp32 ignores matmul_bytes. */
  off.precision = GT_PRECISION_FP32;
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.offload_bytes, 28 * MIB, 1e-3);
  off.precision = (gt_precision)7;
  expect_error(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e), GT_EINVAL, "unknown precision 7");
  off.precision = GT_PRECISION_FP32;
  four[0].matmul_bytes = -1;
  expect_error(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e), GT_EINVAL, "matmul bytes -1");
  for (int i = 0; i < 4; i++) four[i].matmul_bytes = 0;
  /* A window as wide as the rank's layers keeps the weights for the step:
   * they come in once (2 MiB a micro-batch), the gradients as before. */
  off.offload_window = 4;
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e));
  NEAR(e.mem_bytes[0], 6 * MIB + 2 * MIB, 1e-3);
  NEAR(e.step_seconds, 24.5, 1e-9);
  NEAR(e.offload_bytes, 16 * MIB, 1e-3);
  /* pp=2, window 1: 3 MiB of slots and 2 (stage 0) or 1 (stage 1) micro-
   * batches of 2 layers' activations. */
  off.offload_window = 1;
  hw.copy_bandwidth = 1e30;
  OK(gt_planner_estimate(&hw, &off, (gt_grid_layout){1, 1, 2}, NULL, &e));
  NEAR(e.mem_bytes[0], 5 * MIB, 1e-3);
  NEAR(e.mem_bytes[1], 4 * MIB, 1e-3);
  /* 6 MiB a rank: nothing fits without offloading (pp=2 needs 10 MiB);
   * offloaded, dp=2 fits and is the fastest. */
  hw.mem_bytes = (double[]){6 * MIB, 6 * MIB};
  expect_error(gt_planner_choose(&hw, &job4, &e), GT_ENOMEM, "no layout of 2 ranks fits in memory");
  OK(gt_planner_choose(&hw, &off, &e));
  assert_true(e.layout.dp == 2 && e.layout.pp == 1 && e.mem_shortfall <= 0);
  /* Bad input. */
  off.offload_window = -1;
  expect_error(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e), GT_EINVAL, "offload window");
  off.offload_window = 1;
  hw.copy_bandwidth = 0;
  expect_error(gt_planner_estimate(&hw, &off, (gt_grid_layout){2, 1, 1}, NULL, &e), GT_EINVAL, "copy bandwidth");
}

/* The planner's memory is the model's expected peak: for one rank,
 * category by category what gt_model_device_estimate_ex says of the built
 * model (the flat buffers within their size class: the model pads each
 * parameter to 64 bytes). And a budget between two layouts' peaks makes the
 * planner take the one that fits, though the other is faster. */
static void test_budget_from_estimate(void **state) {
  (void)state;
  enum { B = 1, T = 8 };
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = T, .seed = 1}, &m));
  OK(gpt_add_layers(m, &(gpt_config){.vocab_size = 64, .T_max = T, .C = 128, .NH = 4, .L = 4, .tie_weights = true}));
  OK(gt_model_build(m));
  gt_planner_layer *ls;
  int n;
  OK(gt_planner_layers_from_model(m, B, T, &ls, &n));
  gt_planner_job job = {.layers = ls, .nlayers = n, .micro_batches = 2, .schedule = GT_PP_1F1B, .chunks = 1};
  OK(gt_planner_model_extras(m, B, T, &job.extras));
  gt_planner_hw hw = {.world = 1,
                      .peak_flops = 1e10,
                      .p2p_bandwidth = 2e9,
                      .p2p_latency = 50e-6,
                      .ar_bandwidth = 2e9,
                      .ar_latency = 50e-6,
                      .dp_overlap = 0.4};
  gt_planner_result e;
  OK(gt_planner_estimate(&hw, &job, (gt_grid_layout){1, 1, 1}, NULL, &e));
  gt_device_estimate want;
  OK(gt_model_device_estimate_ex(m, &(gt_estimate_config){.optim_states = 2}, &want));
  for (int k = 0; k < GT_MEM_KINDS; k++) {
    double w = (double)gt_device_estimate_bytes(&want, (gt_mem_kind)k), got = e.mem_kinds[0][k];
    if (k == GT_MEM_PARAMS || k == GT_MEM_GRADS || k == GT_MEM_OPTIMIZER)
      assert_true(fabs(got - w) <= w / 8);
    else
      NEAR(got, w, 0);
  }
  assert_true(fabs(e.mem_bytes[0] - (double)want.total) <= (double)want.total / 16);

  /* Two ranks: dp=2 holds every parameter, pp=2 about half of them. */
  hw.world = 2;
  gt_planner_result dp, pp;
  OK(gt_planner_estimate(&hw, &job, (gt_grid_layout){2, 1, 1}, NULL, &dp));
  OK(gt_planner_estimate(&hw, &job, (gt_grid_layout){1, 1, 2}, NULL, &pp));
  double pp_peak = fmax(pp.mem_bytes[0], pp.mem_bytes[1]);
  assert_true(pp_peak < dp.mem_bytes[0]);
  OK(gt_planner_choose(&hw, &job, &e));
  assert_int_equal(e.layout.dp, 2); /* the faster without a budget */
  double budget[2] = {(pp_peak + dp.mem_bytes[0]) / 2, (pp_peak + dp.mem_bytes[0]) / 2};
  hw.mem_bytes = budget;
  OK(gt_planner_choose(&hw, &job, &e));
  assert_true(e.layout.pp == 2 && e.mem_shortfall <= 0);
  /* Under both: the error names the smallest peak and its parts. */
  budget[0] = budget[1] = pp_peak / 2;
  char msg[128];
  snprintf(msg, sizeof msg, "its expected peak is %.1f MiB (parameters ", pp_peak / (1 << 20));
  expect_error(gt_planner_choose(&hw, &job, &e), GT_ENOMEM, msg);
  assert_non_null(strstr(gt_last_error(), "attention"));
  free(ls);
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

static void test_layers_from_gpt(void **state) {
  (void)state;
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = 8, .seed = 1}, &m));
  OK(gpt_add_layers(m, &(gpt_config){.vocab_size = 64, .T_max = 8, .C = 24, .NH = 4, .L = 3, .tie_weights = true}));
  OK(gt_model_build(m));
  gt_planner_layer *ls;
  int n;
  OK(gt_planner_layers_from_model(m, 2, 8, &ls, &n));
  assert_int_equal(n, gt_model_num_layers(m));
  double flops = 0, params = 0;
  int blocks = 0;
  for (int i = 0; i < n; i++) {
    flops += ls[i].flops;
    params += ls[i].param_bytes;
    assert_true(ls[i].act_bytes >= ls[i].out_bytes && ls[i].out_bytes > 0);
    if (ls[i].tp_allreduces) {
      blocks++;
      NEAR(ls[i].tp_allreduce_bytes, 2 * 8 * 24 * 4, 0);
      /* A block's four matrices (3C^2 + C^2 + 4C^2 + 4C^2) are matmul-only. */
      NEAR(ls[i].matmul_bytes, 12.0 * 24 * 24 * 4, 0);
      NEAR(ls[i].window_bytes, ls[i].param_bytes, 0);
    }
  }
  /* The tied head reads the embedding's table, as a matrix product. */
  NEAR(ls[n - 1].param_bytes, 0, 0);
  NEAR(ls[n - 1].window_bytes, 64.0 * 24 * 4, 0);
  NEAR(ls[n - 1].matmul_bytes, 64.0 * 24 * 4, 0);
  NEAR(ls[0].matmul_bytes, 0, 0); /* the embedding reads it as a table */
  assert_int_equal(blocks, 3);
  NEAR(flops, gt_model_flops(m, 2, 8), 1e-6 * flops);
  NEAR(params, 4.0 * gt_model_param_count(m), 0); /* tied head counted once */
  free(ls);
  expect_error(gt_planner_layers_from_model(m, 0, 8, &ls, &n), GT_EINVAL, "B, T >= 1");
  gt_model_destroy(m);
  gt_backend_destroy(be);
}

static void test_bad_input(void **state) {
  (void)state;
  int first[8];
  gt_planner_result e;
  expect_error(gt_planner_partition(four, 4, &(gt_planner_stages){.n = 5}, first), GT_EINVAL, "use at most 4 stages");
  expect_error(gt_planner_partition(four, 4, &(gt_planner_stages){.n = 2, .speed = (double[]){1, 0}}, first), GT_EINVAL,
               "stage 1 has speed 0");
  expect_error(gt_planner_partition(four, 4, &(gt_planner_stages){.n = 2, .mem_bytes = (double[]){1, NAN}}, first),
               GT_EINVAL, "budgets must be >= 0");
  expect_error(gt_planner_partition(NULL, 4, &(gt_planner_stages){.n = 2}, first), GT_EINVAL, "partition needs");
  gt_planner_layer neg = {.flops = -1};
  expect_error(gt_planner_partition(&neg, 1, &(gt_planner_stages){.n = 1}, first), GT_EINVAL, "layer 0 has a negative");
  expect_error(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){2, 2, 1}, NULL, &e), GT_EINVAL,
               "does not match the world size 2");
  expect_error(gt_planner_estimate(&hw2, &job4, (gt_grid_layout){1, 1, 2}, (int[]){0, 4, 4}, &e), GT_EINVAL,
               "give each of 2 stages a layer");
  gt_planner_hw bad = hw2;
  bad.ar_bandwidth = 0;
  expect_error(gt_planner_choose(&bad, &job4, &e), GT_EINVAL, "bandwidths > 0");
  bad = hw2;
  bad.dp_overlap = 1.5;
  expect_error(gt_planner_choose(&bad, &job4, &e), GT_EINVAL, "dp_overlap");
  bad = hw2;
  bad.speed = (double[]){1, -1};
  expect_error(gt_planner_choose(&bad, &job4, &e), GT_EINVAL, "rank 1 has speed -1");
  gt_planner_job j = job4;
  j.chunks = 2;
  expect_error(gt_planner_choose(&hw2, &j, &e), GT_EINVAL, "needs the interleaved schedule");
  j = job4;
  j.micro_batches = 0;
  expect_error(gt_planner_choose(&hw2, &j, &e), GT_EINVAL, "micro_batches >= 1");
  j = job4;
  j.micro_batches = 1;
  expect_error(gt_planner_estimate(&hw2, &j, (gt_grid_layout){2, 1, 1}, NULL, &e), GT_EINVAL,
               "dp=2 replicas need at least 2 micro-batches");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_partition_cases),      cmocka_unit_test(test_partition_matches_brute_force),
      cmocka_unit_test(test_batch_split),          cmocka_unit_test_setup(test_estimate_by_hand, setup),
      cmocka_unit_test_setup(test_choose, setup),  cmocka_unit_test_setup(test_offload, setup),
      cmocka_unit_test(test_layers_from_gpt),      cmocka_unit_test_setup(test_bad_input, setup),
      cmocka_unit_test(test_budget_from_estimate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
