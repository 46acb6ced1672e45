/* What every multi-process benchmark rank sets up: a CPU backend, the
 * distributed state for a layout (none for one process), and a GPT with a
 * trainer over it. */
#ifndef GIANT_BENCH_RANK_H
#define GIANT_BENCH_RANK_H

#include <stdint.h>

#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "gpt.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"

typedef struct bench_rank_config {
  const char *layout; /* NULL: one process */
  int threads;
  gpt_config gpt;
  int B;               /* the global rows of a micro-batch, split evenly over replicas */
  int rows;            /* this rank's rows instead (uneven shares); 0: B / dp */
  int micro_batches;   /* per step; 0: 1 */
  gt_pp_kind schedule; /* with pp > 1 */
  bool cut_stages;     /* let the planner cut the pipeline stages */
  size_t bucket_bytes; /* 0: the plan's default */
  bool zero1;          /* ZeRO-1 over the data-parallel replicas */
} bench_rank_config;

typedef struct bench_rank {
  gt_backend *be;
  gt_store *store;
  gt_dist *dist; /* NULL for one process */
  gt_plan plan;
  gt_model *m;
  gt_trainer *tr;
  int rows; /* micro-batch rows this rank trains on */
} bench_rank;

void bench_rank_setup(bench_rank *r, int rank, int world, const bench_rank_config *c);
void bench_rank_teardown(bench_rank *r);

/* n deterministic token ids below V (salt varies the stream); free() it. */
int32_t *bench_tokens(size_t n, int V, unsigned salt);

#endif
