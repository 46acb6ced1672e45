/* ZeRO-1's gradient sync, bucket by bucket: each bucket reduced to the
 * rank whose shard holds it, during backward or held back until it ends,
 * must leave in every rank's shard the very bits of one reduce-scatter of
 * the whole gradient buffer after backward (the reduce sums in the ring
 * order the reduce-scatter does). dp = 2, 3 and 4, small buckets, so that
 * buckets are cut at the shards' edges and many end during backward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/model/model_engine.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/engine/store.h"
#include "localkit/ranks.h"
#include "parallel/dp_sync.h"
#include "parallel/train_result.h"

enum { V = 64, T = 16, C = 32, NH = 4, L = 2, ROWS = 2 };

/* One backward of this rank's rows with the sync's buckets overlapped or
 * held back, then finish(). */
static void backward(gt_model *m, gt_acts *a, gt_dp_sync *s, const gt_batch *b, bool overlap) {
  float loss;
  CHECK_OK(gt_model_zero_grads(m));
  CHECK_OK(gt_dp_sync_begin(s, true, overlap));
  CHECK_OK(gt_model_forward(m, a, b, &loss));
  CHECK_OK(gt_model_backward(m, a, 1.0f / (ROWS * T)));
}

static int rank_main(int rank, int world, void *arg) {
  (void)arg;
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_store *store;
  gt_plan plan;
  gt_dist *dist;
  char layout[16];
  snprintf(layout, sizeof layout, "dp=%d", world);
  train_rank_dist(&(gt_plan_config){.world = world, .rank = rank, .layout = layout, .zero1 = true}, "z1", &store, &plan,
                  &dist);
  gt_model *m;
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = ROWS, .T_max = T, .seed = 7}, &m));
  gt_model_parallel mp = gt_dist_model_parallel(dist);
  CHECK_OK(gt_model_set_parallel(m, &mp));
  CHECK_OK(
      gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true}));
  CHECK_OK(gt_model_build(m));
  gt_comm *dp = gt_grid_comm(gt_dist_grid(dist), GT_GRID_DP);
  gt_dp_sync *s;
  CHECK_OK(gt_dp_sync_create(m, dp, 2048, true, &s));
  gt_acts *a;
  CHECK_OK(gt_acts_create(m, &a));
  int32_t tok[ROWS * T + 1];
  for (int i = 0; i <= ROWS * T; i++) tok[i] = (i * 7 + rank * 13 + i * i) % V;
  gt_batch b = {.B = ROWS, .T = T, .inputs = tok, .targets = tok + 1};

  size_t n = gt_model_buffer_floats(m), lo, hi;
  gt_dp_sync_shard(s, &lo, &hi);
  CHECK(hi - lo == n / (size_t)world && lo == (size_t)rank * (hi - lo));
  float *local = malloc(n * sizeof *local), *ref = malloc((hi - lo) * sizeof *ref);
  CHECK(local && ref);
  /* Held back: this rank's own gradients are whole after backward. */
  backward(m, a, s, &b, false);
  memcpy(local, gt_model_grads(m), n * sizeof *local);
  CHECK_OK(gt_dp_sync_finish(s));
  CHECK(gt_dp_sync_last(s)->buckets > world); /* cut at the shards' edges, and small */
  CHECK_OK(gt_comm_reduce_scatter(dp, local, ref, hi - lo, GT_F32, GT_COMM_SUM));
  CHECK(memcmp(gt_model_grads(m) + lo, ref, (hi - lo) * sizeof *ref) == 0);
  /* Overlapped with backward: the same bits. */
  backward(m, a, s, &b, true);
  CHECK_OK(gt_dp_sync_finish(s));
  CHECK(memcmp(gt_model_grads(m) + lo, ref, (hi - lo) * sizeof *ref) == 0);
  free(local);
  free(ref);
  gt_acts_destroy(a);
  gt_dp_sync_destroy(s);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

static void run(int world) {
  int codes[HARNESS_MAX];
  /* Well under a second a rank; only a hang gets near the bound. */
  assert_int_equal(harness_run(world, rank_main, NULL, 120, codes), 0);
}

static void dp2(void **state) {
  (void)state;
  run(2);
}
static void dp3(void **state) {
  (void)state;
  run(3);
}
static void dp4(void **state) {
  (void)state;
  run(4);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(dp2), cmocka_unit_test(dp3), cmocka_unit_test(dp4)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
