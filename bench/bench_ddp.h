/* Runs bench/scaling_ddp.py, PyTorch DistributedDataParallel on Gloo over
 * loopback, as the peer of a data-parallel benchmark: a python3 parent that
 * takes commands on stdin and answers for its worker processes. */
#ifndef GIANT_BENCH_DDP_H
#define GIANT_BENCH_DDP_H

#include <stddef.h>

#include "bench_torch.h"

typedef struct bench_ddp bench_ddp;

/* Starts `world` DDP workers, each torch.set_num_threads(1) with
 * OPENBLAS_NUM_THREADS=1, on the weights and tokens bench_torch_export
 * wrote into dir; each takes shape->B / world rows. Fails, saying why, if
 * python3, torch or Gloo is missing. */
gt_status bench_ddp_start(const char *dir, const bench_torch_shape *shape, int world, bench_ddp **out);
/* The global losses of the first n steps (n <= 16). */
gt_status bench_ddp_losses(bench_ddp *d, int n, float *losses);
/* Times n steps under each DDP setting the script tries, printing a line
 * each, and keeps the fastest; its name goes to best. */
gt_status bench_ddp_tune(bench_ddp *d, int n, char *best, size_t cap);
/* Mean ms per step over n steps, the slowest worker's. */
gt_status bench_ddp_time(bench_ddp *d, int n, double *ms);
void bench_ddp_stop(bench_ddp *d);

#endif
