/* bench_offload_adam: Giant's CPU AdamW, memcpy, the update's own stream
 * and PyTorch's AdamW, round by round in one run so they see the same
 * machine. */
#include "offload_adam.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_peer.h"
#include "bench_stats.h"
#include "core/backend_engine.h"

enum { WARMUP = 2, MAX_ROUNDS = 1000, KINDS = 4 };

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

/* Everything a round touches. */
typedef struct adam_run {
  gt_backend *be;
  int nt;
  size_t n, nf;         /* parameters; floats of each memcpy buffer */
  float *p, *g, *m, *v; /* the update's state, also the stream's */
  float *src, *dst;     /* memcpy's */
  bench_peer *torch;    /* NULL: not measured */
  gt_adamw_args a;
} adam_run;

static gt_status run_gt(adam_run *r, double *sec) {
  r->a.step++;
  double t0 = now();
  GT_TRY(gt_op_adamw_update(r->be, r->p, r->g, r->m, r->v, r->n, &r->a));
  *sec = now() - t0;
  return GT_OK;
}

static gt_status run_memcpy(adam_run *r, double *sec) {
  double t0 = now();
  copy_parallel((char *)r->dst, (const char *)r->src, r->nf * sizeof(float), r->nt);
  *sec = now() - t0;
  return GT_OK;
}

/* The update's traffic without its arithmetic: reads p, g, m, v and
 * writes p, m, v, each store to a line just read as the update's are (so
 * no read for ownership, which memcpy's stores may pay), split over the
 * threads as the kernel splits it. A few multiply-adds an element keep it
 * bound by memory; the values stay where AdamW runs on them (v positive,
 * no denormals), since the update runs on the same buffers. */
static gt_status run_stream(adam_run *r, double *sec) {
  float *p = r->p, *m = r->m, *v = r->v;
  const float *g = r->g;
  double t0 = now();
#pragma omp parallel for simd num_threads(r->nt) schedule(simd : static)
  for (size_t i = 0; i < r->n; i++) {
    float gi = g[i], mi = 0.5f * (m[i] + gi), vi = 0.5f * (v[i] + gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] -= 1e-6f * (mi - vi);
  }
  *sec = now() - t0;
  return GT_OK;
}

static gt_status run_torch(adam_run *r, double *sec) {
  char line[256];
  GT_TRY(bench_peer_ask(r->torch, "step", line, sizeof line));
  if (sscanf(line, "s=%lf", sec) != 1) return gt_errorf(GT_EFORMAT, "the torch peer answered '%s'", line);
  return GT_OK;
}

static void nap_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Each round runs each kind once, starting one further along each round,
 * so no kind always follows the same other; a short pause between them
 * lets the last one's idle threads (OpenMP's, torch's) stop spinning. */
static gt_status rounds_run(adam_run *r, int rounds, double t[KINDS][MAX_ROUNDS]) {
  gt_status (*kind[KINDS])(adam_run *, double *) = {run_gt, run_memcpy, run_stream, run_torch};
  for (int i = 0; i < WARMUP + rounds; i++)
    for (int j = 0; j < KINDS; j++) {
      int k = (i + j) % KINDS;
      double sec = NAN;
      if (k == 3 && !r->torch) continue;
      GT_TRY(kind[k](r, &sec));
      if (i >= WARMUP) t[k][i - WARMUP] = sec;
      nap_ms(10);
    }
  return GT_OK;
}

static void run_free(adam_run *r) {
  bench_peer_stop(r->torch);
  free(r->p);
  free(r->g);
  free(r->m);
  free(r->v);
  free(r->src);
  free(r->dst);
  gt_backend_destroy(r->be);
}

gt_status bench_offload_adam(size_t n, int threads, int rounds, bench_adam_result *out) {
  if (n == 0) return gt_errorf(GT_EINVAL, "bench_offload_adam: n must be at least 1");
  if (threads < 0) return gt_errorf(GT_EINVAL, "bench_offload_adam: threads must be >= 0, got %d", threads);
  if (rounds < 1 || rounds > MAX_ROUNDS)
    return gt_errorf(GT_EINVAL, "bench_offload_adam: rounds must be in 1..%d, got %d", MAX_ROUNDS, rounds);
  adam_run r = {
      .n = n,
      .a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .grad_scale = 1.0f}};
  GT_TRY(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = threads}, &r.be));
  r.nt = gt_backend_num_threads(r.be);
  printf("giant cpu backend: %d threads, kernels %s\n", r.nt, gt_backend_kernels(r.be));
  /* memcpy over 4 n floats (what AdamW streams), at most 1 GiB, so it
   * stays far beyond any cache. */
  size_t bytes = 4 * n * sizeof(float);
  if (bytes > ((size_t)1 << 30)) bytes = (size_t)1 << 30;
  if (bytes < ((size_t)64 << 20)) bytes = (size_t)64 << 20;
  r.nf = bytes / sizeof(float);
  r.p = host_floats(n, 0.5f, r.nt);
  r.g = host_floats(n, 1e-3f, r.nt);
  r.m = host_floats(n, 0.0f, r.nt);
  r.v = host_floats(n, 0.0f, r.nt);
  r.src = host_floats(r.nf, 1.0f, r.nt);
  r.dst = host_floats(r.nf, 0.0f, r.nt);
  if (!r.p || !r.g || !r.m || !r.v || !r.src || !r.dst) {
    run_free(&r);
    return gt_errorf(GT_ENOMEM,
                     "cannot allocate 4 x %zu MiB of AdamW state and 2 x %zu MiB to copy; try a smaller --params",
                     (n * 4) >> 20, bytes >> 20);
  }
  char ns[32], ts[16];
  snprintf(ns, sizeof ns, "%zu", n);
  snprintf(ts, sizeof ts, "%d", r.nt);
  fflush(stdout); /* the peer's configuration lines come after ours */
  if (bench_peer_start("cpu_adam_torch.py", (const char *[]){ns, ts, NULL}, stdout, &r.torch) != GT_OK) {
    printf("torch baseline: not measured (%s)\n", gt_last_error());
    r.torch = NULL;
  }
  double t[KINDS][MAX_ROUNDS];
  gt_status s = rounds_run(&r, rounds, t);
  if (s == GT_OK) {
    *out = (bench_adam_result){.threads = r.nt,
                               .gt_s = bench_median(t[0], rounds),
                               .memcpy_gbps = 2.0 * (double)bytes / bench_median(t[1], rounds) / 1e9,
                               .stream_gbps = 28.0 * (double)n / bench_median(t[2], rounds) / 1e9,
                               .torch_s = r.torch ? bench_median(t[3], rounds) : NAN};
    out->vs_torch = out->torch_s / out->gt_s;
    out->of_bw = 28.0 * (double)n / (out->stream_gbps * 1e9) / out->gt_s;
    printf(
        "%d rounds after %d of warm-up, each running once Giant's update, memcpy, the stream%s; medians over the "
        "rounds\n",
        rounds, WARMUP, r.torch ? " and torch's step" : "");
    printf("memcpy %.2f GB/s (read + written); the update's stream (reads p, g, m, v, writes p, m, v) %.2f GB/s\n",
           out->memcpy_gbps, out->stream_gbps);
  }
  run_free(&r);
  return s;
}
