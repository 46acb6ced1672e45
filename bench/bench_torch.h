/* Runs the PyTorch baseline of bench/train_step in a python3 subprocess that
 * takes commands on stdin ("losses N", "time N") and answers on stdout. */
#ifndef GIANT_BENCH_TORCH_H
#define GIANT_BENCH_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "giant/giant.h"

typedef struct bench_torch bench_torch;
typedef struct bench_torch_shape {
  int B, T, V, C, NH, L;
} bench_torch_shape;

/* Writes the model's parameters (params.bin, params.txt) and the token
 * stream (tokens.bin) into dir for the subprocess to load. */
gt_status bench_torch_export(gt_model *m, const int32_t *tokens, size_t ntokens, const char *dir);
/* Starts PyTorch on device "cpu" or "cuda" with matrix products in
 * precision "fp32" or "bf16" (autocast, fp32 master weights). On the CPU it
 * tries two thread settings and keeps the faster: one pool
 * (torch.set_num_threads(1), OPENBLAS_NUM_THREADS=threads) or torch's own
 * (torch.set_num_threads(threads), OPENBLAS_NUM_THREADS=1). Fails, saying
 * why, if python3 or torch is missing or torch cannot reach the device. */
gt_status bench_torch_start(const char *dir, const bench_torch_shape *shape, int threads, const char *device,
                            const char *precision, bench_torch **out);
/* Losses of the first n steps from the exported weights. */
gt_status bench_torch_losses(bench_torch *t, int n, float *losses);
/* Mean ms per step over n steps. */
gt_status bench_torch_time(bench_torch *t, int n, double *ms);
const char *bench_torch_setting(const bench_torch *t);
void bench_torch_stop(bench_torch *t);

/* The python3 that has Debian's python3-torch: GIANT_PYTHON when set, else
 * /usr/bin/python3 (the system interpreter the package belongs to, which
 * may not be the first python3 on PATH), else python3. */
const char *bench_python(void);

#endif
