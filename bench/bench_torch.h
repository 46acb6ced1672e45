/* Runs the PyTorch baseline of bench/train_step in a python3 subprocess that
 * takes commands on stdin ("losses N", "time N") and answers on stdout. */
#ifndef GIANT_BENCH_TORCH_H
#define GIANT_BENCH_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "bench_threads.h"
#include "giant/giant.h"

typedef struct bench_torch bench_torch;
typedef struct bench_torch_shape {
  int B, T, V, C, NH, L;
  int llama;  /* the peer runs llama_torch.py (examples/llama), else gpt_torch.py */
  int NKV, H; /* llama: key/value heads and the MLP's width */
} bench_torch_shape;

/* Writes the model's parameters (params.bin, params.txt) and the token
 * stream (tokens.bin) into dir for the subprocess to load. */
gt_status bench_torch_export(gt_model *m, const int32_t *tokens, size_t ntokens, const char *dir);
/* Starts PyTorch on device "cpu" or "cuda" with matrix products in
 * precision "fp32" or "bf16" (autocast, fp32 master weights). On the CPU
 * with threads > 1 it starts one process per thread setting, so that each
 * can be timed over as many steps as Giant gets and the best kept:
 * torch's default (torch.set_num_threads(threads), OPENBLAS_NUM_THREADS=
 * threads), one pool in BLAS (1, threads) and torch's own pool (threads,
 * 1). With an OpenMP build of OpenBLAS (Debian's) the BLAS follows
 * torch's OpenMP count whatever OPENBLAS_NUM_THREADS says, so the settings
 * are in fact N threads, 1 thread and N threads: bench_torch_threads says
 * which. Fails, saying why, if python3 or torch is missing or torch cannot
 * reach the device. */
gt_status bench_torch_start(const char *dir, const bench_torch_shape *shape, int threads, const char *device,
                            const char *precision, bench_torch **out);
/* How many settings run (1 or 3); the functions below take one by index. */
int bench_torch_settings(const bench_torch *t);
/* Losses of setting i's first n steps from the exported weights. */
gt_status bench_torch_losses(bench_torch *t, int i, int n, float *losses);
/* Mean ms per step of setting i over n steps, and how many of its threads
 * were busy meanwhile (bench_cpu_times_busy). */
gt_status bench_torch_time(bench_torch *t, int i, int n, double *ms, int *busy);
/* What setting i's process reports: openblas_get_num_threads() of the BLAS
 * torch loaded (-1: not OpenBLAS) and torch.get_num_threads(). */
gt_status bench_torch_threads(bench_torch *t, int i, int *openblas, int *intra);
const char *bench_torch_setting(const bench_torch *t, int i);
void bench_torch_stop(bench_torch *t);

/* The python3 that has Debian's python3-torch: GIANT_PYTHON when set, else
 * /usr/bin/python3 (the system interpreter the package belongs to, which
 * may not be the first python3 on PATH), else python3. */
const char *bench_python(void);

#endif
