/* See bench_rank.h. Failures end the rank (the harness reports it). */
#include "bench_rank.h"

#include <stdlib.h>
#include <string.h>

#include "localkit/ranks.h"
#include "giant/engine/dist.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "parallel/plan_engine.h"

void bench_rank_setup(bench_rank *r, int rank, int world, const bench_rank_config *c) {
  memset(r, 0, sizeof *r);
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = c->threads}, &r->be));
  gt_backend_set_peak_flops(r->be, 1); /* MFU is not reported here */
  r->plan = (gt_plan){.layout = {1, 1, 1}, .world = 1};
  if (c->layout) {
    r->store = harness_store();
    CHECK_OK(gt_plan_resolve(&(gt_plan_config){.world = world,
                                               .rank = rank,
                                               .layout = c->layout,
                                               .bucket_bytes = c->bucket_bytes,
                                               .zero1 = c->zero1,
                                               .schedule = c->schedule},
                             &r->plan));
    gt_dist_config dc = {.plan = r->plan,
                         .store = r->store,
                         .generation = "bench",
                         .comm = {.secret = HARNESS_SECRET, .host = "127.0.0.1"}};
    CHECK_OK(gt_dist_create(&dc, &r->dist));
  }
  r->rows = c->rows ? c->rows : c->B / r->plan.layout.dp;
  CHECK_OK(gt_model_create(r->be, &(gt_model_config){.B_max = r->rows, .T_max = c->gpt.T_max, .seed = 1}, &r->m));
  if (r->dist) {
    gt_model_parallel mp = gt_dist_model_parallel(r->dist);
    CHECK_OK(gt_model_set_parallel(r->m, &mp));
  }
  CHECK_OK(gpt_add_layers(r->m, &c->gpt));
  if (c->cut_stages) CHECK_OK(gt_plan_cut_stages(&r->plan, r->m, r->rows, c->gpt.T_max, NULL));
  CHECK_OK(gt_model_build(r->m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = c->micro_batches ? c->micro_batches : 1,
                          .schedule = {3e-4f, 3e-4f, 0, 0},
                          .dist = r->dist};
  CHECK_OK(gt_trainer_create(r->m, &tc, &r->tr));
}

void bench_rank_teardown(bench_rank *r) {
  gt_trainer_destroy(r->tr);
  gt_model_destroy(r->m);
  gt_dist_destroy(r->dist);
  gt_store_destroy(r->store);
  gt_backend_destroy(r->be);
}

int32_t *bench_tokens(size_t n, int V, unsigned salt) {
  int32_t *tok = malloc(n * sizeof *tok);
  CHECK(tok != NULL);
  for (size_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 2654435761u + salt) % (size_t)V);
  return tok;
}
