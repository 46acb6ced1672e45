/* bench_cpu_adam: the CPU AdamW of offloading (bench_offload_adam) on its
 * own.
 *
 *   bench_cpu_adam [--params N (default 100000000)] [--threads T (default all)]
 *                  [--rounds R (default 7)]
 *
 * Giant's step, torch's, memcpy and the update's stream run once each in
 * every round; each figure is the median over the rounds. The last line:
 * cpu_adam_s=<Giant's step> torch_adamw_s=<torch.optim.AdamW(foreach=True)'s>
 * memcpy_gbps=<read + written> stream_gbps=<the update's own traffic:
 * p, g, m, v read, p, m, v written> cpu_adam_vs_torch=<torch / Giant>
 * cpu_adam_of_bw=<the bound at stream_gbps / Giant's step>. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload_adam.h"

static void usage(void) {
  fprintf(stderr,
          "usage: bench_cpu_adam [--params N (default 100000000)] [--threads T (default all cores)]\n"
          "                      [--rounds R (default 7)]\n");
}

int main(int argc, char **argv) {
  size_t n = 100000000;
  int threads = 0, rounds = 7;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--params") && i + 1 < argc) {
      double v = strtod(argv[++i], &end);
      if (*end || v < 1) {
        usage();
        return 2;
      }
      n = (size_t)v;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      long t = strtol(argv[++i], &end, 10);
      if (*end || t < 0) {
        usage();
        return 2;
      }
      threads = (int)t;
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      long k = strtol(argv[++i], &end, 10);
      if (*end || k < 1 || k > 1000) {
        usage();
        return 2;
      }
      rounds = (int)k;
    } else {
      usage();
      return 2;
    }
  }
  printf("bench_cpu_adam: %zu parameters (%.2f GB of fp32 p, g, m, v), threads %d of %d cores\n", n,
         16.0 * (double)n / 1e9, threads ? threads : omp_get_num_procs(), omp_get_num_procs());
  bench_adam_result r;
  gt_status s = bench_offload_adam(n, threads, rounds, &r);
  if (s != GT_OK) {
    fprintf(stderr, "bench_cpu_adam: %s\n", gt_last_error());
    return 1;
  }
  printf("bandwidth bound (28 bytes a parameter at the stream's %.2f GB/s): %.4f s; at memcpy's %.2f GB/s: %.4f s\n",
         r.stream_gbps, 28.0 * (double)n / (r.stream_gbps * 1e9), r.memcpy_gbps,
         28.0 * (double)n / (r.memcpy_gbps * 1e9));
  printf(
      "cpu_adam_s=%.4f torch_adamw_s=%.4f memcpy_gbps=%.2f stream_gbps=%.2f cpu_adam_vs_torch=%.2f "
      "cpu_adam_of_bw=%.2f\n",
      r.gt_s, r.torch_s, r.memcpy_gbps, r.stream_gbps, r.vs_torch, r.of_bw);
  return 0;
}
