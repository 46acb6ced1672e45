/* bench_attention: tiled causal attention (FlashAttention-2 order, a
 * log-sum-exp saved per row) against the full-matrix kernels (the T x T
 * probabilities saved), forward + backward on the CPU backend.
 *
 *   bench_attention [--threads N (default 2)] [--heads NH (default 12)]
 *                   [--head-size hs (default 64)] [--batch B (default 1)]
 *                   [--rounds R (default 5)] [--max-t T (default 4096)]
 *
 * For T = 1024, 2048, 4096 (up to --max-t) both run once each in every
 * round, alternating; each time is the median over the rounds. Bytes are
 * what each keeps between forward and backward plus its backward scratch
 * beyond the operands (q, k, v, out and their gradients, the same for
 * both); not the tiled kernels' per-call tiles, which do not grow with T
 * (512 KiB a thread on the CPU). The last line: attn_time_ratio_<T>=<tiled / full time> for each T,
 * attn_mem_ratio_<largest T>=<tiled / full bytes>, and the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_cpu.h"
#include "bench_stats.h"
#include "giant/giant.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_attention [--threads N (default 2)] [--heads NH (default 12)] [--head-size hs (default 64)]\n"
          "                       [--batch B (default 1)] [--rounds R (default 5)] [--max-t T (default 4096)]\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void fill(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 40) / 16777216.0 * 2.0 - 1.0);
  }
}

#define CHECK(expr)                                                         \
  do {                                                                      \
    if ((expr) != GT_OK) {                                                  \
      fprintf(stderr, "bench_attention: %s: %s\n", #expr, gt_last_error()); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

int main(int argc, char **argv) {
  int threads = 2, NH = 12, hs = 64, B = 1, rounds = 5, max_t = 4096;
  for (int i = 1; i < argc; i++) {
    int *dst = !strcmp(argv[i], "--threads")     ? &threads
               : !strcmp(argv[i], "--heads")     ? &NH
               : !strcmp(argv[i], "--head-size") ? &hs
               : !strcmp(argv[i], "--batch")     ? &B
               : !strcmp(argv[i], "--rounds")    ? &rounds
               : !strcmp(argv[i], "--max-t")     ? &max_t
                                                 : NULL;
    if (!dst || i + 1 >= argc || parse_int(argv[++i], 1, 1 << 20, dst)) {
      usage();
      return 2;
    }
  }
  gt_backend_config cfg = {.kind = GT_DEVICE_CPU, .num_threads = threads};
  gt_backend *be = NULL;
  CHECK(gt_backend_create(&cfg, &be));
  int C = NH * hs;
  char cpu[256];
  bench_cpu_features(cpu, sizeof cpu);
  printf("bench_attention: B=%d NH=%d hs=%d (C=%d), %d threads, kernels %s, %d rounds (median), cpu %s\n", B, NH, hs, C,
         threads, gt_backend_kernels(be), rounds, cpu);
  printf("%6s %12s %12s %8s %14s %14s %8s\n", "T", "tiled_s", "full_s", "ratio", "tiled_bytes", "full_bytes", "ratio");
  char last[1024] = "";
  size_t used = 0;
  double mem_ratio = 0;
  int last_t = 0;
  for (int T = 1024; T <= max_t; T *= 2) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T, na = nl * (size_t)T;
    float *qkv = malloc(nq * 4), *dy = malloc(no * 4), *out = malloc(no * 4), *dqkv = malloc(nq * 4);
    float *lse = malloc(nl * 4), *att = malloc(na * 4), *datt = malloc(na * 4);
    if (!qkv || !dy || !out || !dqkv || !lse || !att || !datt) {
      fprintf(stderr, "bench_attention: out of memory at T=%d (%.1f GB of probabilities)\n", T, 8.0 * (double)na / 1e9);
      return 1;
    }
    fill(qkv, nq, 1);
    fill(dy, no, 2);
    double *tt = malloc(sizeof(double) * (size_t)rounds), *tf = malloc(sizeof(double) * (size_t)rounds);
    /* A warm-up of each, then the rounds. */
    for (int r = -1; r < rounds; r++) {
      memset(dqkv, 0, nq * 4);
      double t0 = now();
      CHECK(gt_op_attention_tiled_forward(be, out, lse, qkv, B, T, C, NH));
      CHECK(gt_op_attention_tiled_backward(be, dqkv, dy, qkv, out, lse, B, T, C, NH));
      double t1 = now();
      memset(dqkv, 0, nq * 4);
      double t2 = now();
      CHECK(gt_op_attention_full_forward(be, out, att, qkv, B, T, C, NH));
      CHECK(gt_op_attention_full_backward(be, dqkv, datt, dy, qkv, att, B, T, C, NH));
      double t3 = now();
      if (r >= 0) {
        tt[r] = t1 - t0;
        tf[r] = t3 - t2;
      }
    }
    double mt = bench_median(tt, rounds), mf = bench_median(tf, rounds);
    double bt = 4.0 * (double)nl, bf = 4.0 * 2.0 * (double)na;
    printf("%6d %12.4f %12.4f %8.3f %14.0f %14.0f %8.5f\n", T, mt, mf, mt / mf, bt, bf, bt / bf);
    used += (size_t)snprintf(last + used, sizeof last - used, "attn_time_ratio_%d=%.3f ", T, mt / mf);
    mem_ratio = bt / bf;
    last_t = T;
    free(tt);
    free(tf);
    float *fs[] = {qkv, dy, out, dqkv, lse, att, datt};
    for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
  }
  printf("%sattn_mem_ratio_%d=%.5f cpu=%s\n", last, last_t, mem_ratio, cpu);
  gt_backend_destroy(be);
  return 0;
}
