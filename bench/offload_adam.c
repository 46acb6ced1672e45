/* bench_offload_adam: Giant's CPU AdamW, memcpy and PyTorch's AdamW, one
 * after the other in one process so they see the same machine. */
#include "offload_adam.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "bench_stats.h"
#include "bench_torch.h"
#include "core/backend_engine.h"

enum { WARMUP = 2, STEPS = 7 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 64-byte aligned, and its pages touched by the threads that will use
 * them (the static split of the kernels' loops), not by this one. */
static float *host_floats(size_t n, float value, int threads) {
  float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!x) return NULL;
#pragma omp parallel for simd num_threads(threads) schedule(simd : static)
  for (size_t i = 0; i < n; i++) x[i] = value;
  return x;
}

/* Each thread copies its own contiguous share, as the kernels split their
 * loops. */
static void copy_parallel(char *dst, const char *src, size_t bytes, int threads) {
#pragma omp parallel num_threads(threads)
  {
    size_t nth = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
    size_t per = (bytes / nth + 63) / 64 * 64;
    size_t lo = tid * per < bytes ? tid * per : bytes;
    size_t hi = lo + per < bytes ? lo + per : bytes;
    memcpy(dst + lo, src + lo, hi - lo);
  }
}

/* A buffer of 4 n floats (what AdamW streams), at most 1 GiB, so it stays
 * far beyond any cache. */
static gt_status measure_memcpy(size_t n, int threads, double *gbps) {
  size_t bytes = 4 * n * sizeof(float);
  if (bytes > ((size_t)1 << 30)) bytes = (size_t)1 << 30;
  if (bytes < ((size_t)64 << 20)) bytes = (size_t)64 << 20;
  size_t nf = bytes / sizeof(float);
  float *src = host_floats(nf, 1.0f, threads), *dst = host_floats(nf, 0.0f, threads);
  if (!src || !dst) {
    free(src);
    free(dst);
    return gt_errorf(GT_ENOMEM, "cannot allocate 2 x %zu MiB for the memcpy measurement", bytes >> 20);
  }
  double t[STEPS];
  for (int i = 0; i < WARMUP + STEPS; i++) {
    double t0 = now();
    copy_parallel((char *)dst, (const char *)src, nf * sizeof(float), threads);
    if (i >= WARMUP) t[i - WARMUP] = now() - t0;
  }
  *gbps = 2.0 * (double)(nf * sizeof(float)) / bench_median(t, STEPS) / 1e9;
  /* For reading the figures only: memcpy's stores may cost a read of the
   * line first, which AdamW's (to p, m, v, just read) do not, so a stream
   * that reads and writes the same buffer can go faster than memcpy. */
  for (int i = 0; i < WARMUP + STEPS; i++) {
    double t0 = now();
#pragma omp parallel for simd num_threads(threads) schedule(simd : static)
    for (size_t j = 0; j < nf; j++) dst[j] += src[j];
    if (i >= WARMUP) t[i - WARMUP] = now() - t0;
  }
  printf("memcpy %.2f GB/s (read + written); x[i] += y[i] %.2f GB/s (12 bytes an element)\n", *gbps,
         3.0 * (double)(nf * sizeof(float)) / bench_median(t, STEPS) / 1e9);
  free(src);
  free(dst);
  return GT_OK;
}

static gt_status time_gt_adam(size_t n, int threads, double *sec) {
  gt_backend *be = NULL;
  GT_TRY(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = threads}, &be));
  int nt = gt_backend_num_threads(be);
  printf("giant cpu backend: %d threads, kernels %s\n", nt, gt_backend_kernels(be));
  float *p = host_floats(n, 0.5f, nt), *g = host_floats(n, 1e-3f, nt);
  float *m = host_floats(n, 0.0f, nt), *v = host_floats(n, 0.0f, nt);
  gt_status s = GT_OK;
  if (!p || !g || !m || !v) {
    s = gt_errorf(GT_ENOMEM, "cannot allocate 4 x %zu MiB of AdamW state; try a smaller --params", (n * 4) >> 20);
  } else {
    gt_adamw_args a = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .grad_scale = 1.0f};
    double t[STEPS];
    for (int i = 0; i < WARMUP + STEPS && s == GT_OK; i++) {
      a.step = i + 1;
      double t0 = now();
      s = gt_op_adamw_update(be, p, g, m, v, n, &a);
      if (i >= WARMUP) t[i - WARMUP] = now() - t0;
    }
    if (s == GT_OK) *sec = bench_median(t, STEPS);
  }
  free(p);
  free(g);
  free(m);
  free(v);
  gt_backend_destroy(be);
  return s;
}

/* bench/cpu_adam_torch.py in a python3 subprocess (it exits 3 without
 * torch); NAN when it cannot run. */
static double time_torch_adam(size_t n, int threads) {
  char cmd[1024], line[256];
  snprintf(cmd, sizeof cmd, "%s %s/cpu_adam_torch.py %zu %d %d %d", bench_python(), GIANT_BENCH_DIR, n, threads, WARMUP,
           STEPS);
  FILE *f = popen(cmd, "r");
  if (!f) {
    printf("torch baseline: not measured (cannot start %s)\n", bench_python());
    return NAN;
  }
  double sec = NAN;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "torch_adamw_s=%lf", &sec) == 1) continue;
    fputs(line, stdout); /* the worker's configuration line */
  }
  int rc = pclose(f);
  if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) || !(sec > 0)) {
    bool missing = WIFEXITED(rc) && WEXITSTATUS(rc) == 3;
    printf("torch baseline: not measured (%s)\n", missing ? "python3-torch is not installed" : "python3 failed");
    return NAN;
  }
  return sec;
}

gt_status bench_offload_adam(size_t n, int threads, double *gt_adam_s, double *torch_s, double *memcpy_gbps,
                             double *cpu_adam_vs_torch, double *cpu_adam_of_bw) {
  if (n == 0) return gt_errorf(GT_EINVAL, "bench_offload_adam: n must be at least 1");
  if (threads < 0) return gt_errorf(GT_EINVAL, "bench_offload_adam: threads must be >= 0, got %d", threads);
  GT_TRY(time_gt_adam(n, threads, gt_adam_s));
  if (threads == 0) threads = omp_get_num_procs();
  GT_TRY(measure_memcpy(n, threads, memcpy_gbps));
  double bound_s = 28.0 * (double)n / (*memcpy_gbps * 1e9);
  *cpu_adam_of_bw = bound_s / *gt_adam_s;
  *torch_s = time_torch_adam(n, threads);
  *cpu_adam_vs_torch = *torch_s / *gt_adam_s;
  return GT_OK;
}
