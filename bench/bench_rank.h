/* What every multi-process benchmark rank sets up: a CPU backend, the
 * distributed state for a layout (none for one process), and a GPT with a
 * trainer over it. */
#ifndef GIANT_BENCH_RANK_H
#define GIANT_BENCH_RANK_H

#include "giant/plan.h"
#include "gpt.h"

typedef struct bench_rank {
  gt_backend *be;
  gt_store *store;
  gt_dist *dist; /* NULL for one process */
  gt_plan plan;
  gt_model *m;
  gt_trainer *tr;
  int rows;      /* micro-batch rows this rank trains on */
} bench_rank;

/* layout NULL: one process. B is the global batch. */
void bench_rank_setup(bench_rank *r, int rank, int world, const char *layout, int threads, const gpt_config *gc,
                      int B, size_t bucket_bytes);
void bench_rank_teardown(bench_rank *r);

#endif
