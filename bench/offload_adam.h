/* The host-side optimizer of CPU offloading, measured: Giant's CPU AdamW
 * against torch.optim.AdamW(foreach=True) on the same number of parameters
 * and threads, and against the machine's memory bandwidth, measured in the
 * same run. */
#ifndef GIANT_BENCH_OFFLOAD_ADAM_H
#define GIANT_BENCH_OFFLOAD_ADAM_H

#include <stddef.h>

#include "giant/giant.h"

/* Times gt_op_adamw_update on a CPU backend of `threads` threads (0: all
 * cores) over n fp32 parameters in host memory: the median step after a
 * warm-up, in seconds (*gt_adam_s). *memcpy_gbps is a multi-threaded
 * memcpy's rate, bytes read plus bytes written per second (1e9), with the
 * same threads. An AdamW step moves at least 28 bytes a parameter (reads
 * p, g, m, v; writes p, m, v), so *cpu_adam_of_bw = (28 n / bandwidth) /
 * *gt_adam_s, 1 at the bandwidth bound. *torch_s is PyTorch's median step
 * with the same threads, and *cpu_adam_vs_torch = *torch_s / *gt_adam_s;
 * both are NAN, with the reason printed, when python3 with torch cannot
 * run (not an error). Prints the backend's kernels. */
gt_status bench_offload_adam(size_t n, int threads, double *gt_adam_s, double *torch_s, double *memcpy_gbps,
                             double *cpu_adam_vs_torch, double *cpu_adam_of_bw);

#endif
