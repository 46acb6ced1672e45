/* The host-side optimizer of CPU offloading, measured: Giant's CPU AdamW
 * against torch.optim.AdamW(foreach=True) on the same number of parameters
 * and threads, and against the memory bandwidth, all in the same rounds
 * of one run so that a bandwidth that moves moves for all of them. */
#ifndef GIANT_BENCH_OFFLOAD_ADAM_H
#define GIANT_BENCH_OFFLOAD_ADAM_H

#include <stddef.h>

#include "giant/giant.h"

typedef struct bench_adam_result {
  int threads;        /* the backend's, used by every measurement */
  double gt_s;        /* gt_op_adamw_update's step, seconds */
  double torch_s;     /* torch.optim.AdamW(foreach=True)'s step; NAN when it cannot run */
  double memcpy_gbps; /* a multi-threaded memcpy: bytes read plus written per second (1e9) */
  double stream_gbps; /* the update's own traffic: reads p, g, m, v, writes p, m, v (28 bytes a parameter) */
  double vs_torch;    /* torch_s / gt_s */
  double of_bw;       /* (28 n / stream_gbps) / gt_s: 1 at the update's bandwidth bound */
} bench_adam_result;

/* Over n fp32 parameters in host memory, with a CPU backend of `threads`
 * threads (0: all cores) and the same threads for everything else: each
 * of `rounds` rounds (after 2 of warm-up) runs once, in an order that
 * turns from round to round, Giant's update, the memcpy, the stream
 * (the update's loads and stores with simple arithmetic, on the same
 * buffers and split over threads as the update) and, in a python3 peer
 * kept up for the whole run, torch's step. Every figure is the median
 * over the rounds. torch_s and vs_torch are NAN, with the reason
 * printed, when python3 with torch cannot run (not an error). Prints the
 * backend's kernels and the peer's configuration. */
gt_status bench_offload_adam(size_t n, int threads, int rounds, bench_adam_result *out);

#endif
