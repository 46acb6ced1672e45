/* bench_offload's disk tier (offload_disk.c). */
#ifndef GIANT_BENCH_OFFLOAD_DISK_H
#define GIANT_BENCH_OFFLOAD_DISK_H

#include "giant/giant.h"

typedef struct disk_result {
  size_t params;
  double memory_s; /* an AdamW step, state in memory (median) */
  double disk_s;   /* the same, state in a file in dir */
  double io_s;     /* reading and writing the state once, one thread, pread/pwrite, as the step does */
} disk_result;

/* An offloaded GPT of `layers` blocks of width C, its gradients set, the
 * AdamW step timed with the state in memory and in a file in `dir`
 * (staged 64 MiB at a time), on `threads` threads; and the time one thread
 * takes to read and write the state's bytes through the same file. The
 * two steps must end with the same parameters, bit for bit. */
gt_status bench_offload_disk(const char *dir, int layers, int C, int threads, disk_result *out);

#endif
