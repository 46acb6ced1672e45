/* bench_comm: all-reduce, all-gather and reduce-scatter between forked
 * ranks on this host, over TCP and shared memory, from 4 KiB up to
 * --max-size (256 MiB by default), with algbw and busbw as nccl-tests
 * define them:
 *   algbw = bytes / time
 *   busbw = algbw * 2(n-1)/n   (all-reduce)
 *   busbw = algbw * (n-1)/n    (all-gather, reduce-scatter; bytes = the
 *                               whole gathered / scattered buffer)
 * next to this machine's memcpy bandwidth measured in the same run, and to
 * two peers' all-reduce on the same sizes and the same fp32 sum, each on
 * the transport it is compared with:
 *   - torch.distributed's Gloo, over TCP on loopback (bench/comm_gloo.py in
 *     a python3 subprocess), when torch is installed;
 *   - OpenMPI's MPI_Allreduce, in place, over its shared-memory transport
 *     (bench/comm_mpi.c under mpirun, in each of mpi_settings, the best
 *     kept), when CMake found MPI; its sums are checked exactly.
 * And, for the 64 MiB two-rank all-reduce, the copy limit (copy_limit.h):
 * an all-reduce of B bytes between two ranks must pass 2B bytes between
 * them at least (each rank receives the other's B/2 of inputs for the half
 * it sums and B/2 of sums for the other half), so its limit is the time a
 * producer and a consumer process take to move 2B bytes through one shared
 * segment, piece by piece, each process with a B-byte private buffer. That
 * moves, reads and writes as many bytes as the all-reduce does, without
 * the additions; of_copy_limit is the all-reduce's throughput over the
 * limit's (B / that time), so 1 means the all-reduce runs as fast as
 * copying alone.
 *
 * Each figure is the best of a few rounds' mean time (see ROUNDS), for
 * Giant, Gloo and MPI alike. TCP runs three times: with frame headers
 * sealed (the default), with payload integrity (GT_COMM_INTEGRITY_MAC) and
 * with payloads encrypted (GT_COMM_ENCRYPT_ON). The last line is
 * machine-readable, every ratio at 64 MiB on two ranks:
 *   allreduce_64MiB_2ranks_GBps=<x> vs_gloo=<r> tcp_vs_gloo=<t> shm_vs_mpi=<s>
 *     of_copy_limit=<c> tcp_mac_vs_headers=<m> hier_vs_flat=<h>
 *     encrypt_cost=<e>
 * x is Giant's faster transport, r that against Gloo; t is Giant over TCP
 * against Gloo (both TCP on loopback); s is Giant's shared memory against
 * MPI's; m is TCP with payload integrity over headers alone (a speed); h is
 * the flat TCP ring's time over the two-level all-reduce's on 2 emulated
 * hosts of 2 ranks each, their links held to 10 Gbit/s (comm_hier.h; as
 * root only, else n/a); e is the encrypted all-reduce's time over the
 * plain one's, both over TCP (a cost: 1 is free).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_torch.h"
#include "comm_hier.h"
#include "copy_limit.h"
#include "giant/engine/comm.h"
#include "giant/log.h"
#include "giant/engine/store.h"

#define MAX_SIZES 32
#define SECRET "bench-comm-secret"

enum { OP_AR, OP_AG, OP_RS, NOPS };
static const char *const op_names[NOPS] = {"allreduce", "allgather", "reducescatter"};

/* The transports measured: TCP (frame headers sealed, the default), shared
 * memory, TCP with payload integrity (every payload's tag too) and TCP with
 * payloads encrypted. */
enum { T_TCP, T_SHM, T_TCP_MAC, T_TCP_ENC, NTRANSPORTS };
static const char *const transport_names[NTRANSPORTS] = {"tcp", "shm", "tcp+mac", "tcp+enc"};

typedef struct result {
  double us[NTRANSPORTS][NOPS][MAX_SIZES]; /* [transport][op][size]: slowest rank's mean */
  int failed;
  char why[256];
} result;

static size_t sizes[MAX_SIZES];
static int nsizes;
static bool quick;
static int store_port;

/* Each size runs in ROUNDS rounds of iters_for() calls; the figure is the
 * best round's mean (for Gloo too), so a burst of load from other processes
 * on a shared machine does not decide the result. */
#define ROUNDS (quick ? 2 : 3)
static int iters_for(size_t bytes) {
  size_t budget = (quick ? 32u : 128u) << 20;
  size_t n = budget / (bytes ? bytes : 1);
  int lo = quick ? 2 : 3;
  return n < (size_t)lo ? lo : n > 200 ? 200 : (int)n;
}

static double memcpy_gbps(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return 0;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int i = 0; i < (quick ? 3 : 8); i++) {
    double t0 = gt_now();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
    double dt = gt_now() - t0;
    if (dt < best) best = dt;
  }
  volatile char sink = a[bytes / 2] + b[bytes / 3];
  (void)sink;
  free(a);
  free(b);
  return bytes / best / 1e9;
}

/* One rank: every op and size on one transport; rank 0 records times. */
static int rank_main(int rank, int n, gt_comm_transport t, int ti, result *res) {
  gt_store_tcp_config sc = {.host = "127.0.0.1", .port = store_port, .secret = SECRET, .timeout_ms = 10000};
  gt_store *s = NULL;
  gt_comm *c = NULL;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "bench/%d/%d", n, ti);
  gt_comm_config cc = {.prefix = prefix,
                       .rank = rank,
                       .size = n,
                       .secret = SECRET,
                       .host = "127.0.0.1",
                       .transport = t,
                       .op_timeout_ms = 120000,
                       .integrity = ti == T_TCP_MAC ? GT_COMM_INTEGRITY_MAC : GT_COMM_INTEGRITY_HEADERS,
                       .encrypt = ti == T_TCP_ENC ? GT_COMM_ENCRYPT_ON : GT_COMM_ENCRYPT_OFF};
  gt_status st = gt_store_tcp_open(&sc, &s);
  if (st == GT_OK) {
    cc.store = s;
    st = gt_comm_init(&cc, &c);
  }
  size_t maxb = sizes[nsizes - 1];
  float *buf = st == GT_OK ? malloc(maxb) : NULL, *out = st == GT_OK ? malloc(maxb) : NULL;
  if (st == GT_OK && (!buf || !out)) st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) {
    memset(buf, 0, maxb);
    memset(out, 0, maxb);
  }
  for (int op = 0; st == GT_OK && op < NOPS; op++) {
    for (int k = 0; st == GT_OK && k < nsizes; k++) {
      size_t bytes = sizes[k], count = bytes / 4, per = count / (size_t)n;
      if (op != OP_AR && per == 0) continue;
      int iters = iters_for(bytes);
      for (int round = 0; st == GT_OK && round < ROUNDS; round++) {
        double t0 = 0;
        for (int i = round ? 0 : -2; st == GT_OK && i < iters; i++) {
          if (i == 0) {
            st = gt_comm_barrier(c);
            t0 = gt_now();
          }
          if (st != GT_OK) break;
          if (op == OP_AR)
            st = gt_comm_allreduce(c, buf, count, GT_F32, GT_COMM_SUM);
          else if (op == OP_AG)
            st = gt_comm_allgather(c, buf, out, per, GT_F32);
          else
            st = gt_comm_reduce_scatter(c, buf, out, per, GT_F32, GT_COMM_SUM);
        }
        float dt = (float)((gt_now() - t0) / iters * 1e6);
        /* The slowest rank's time is the collective's time: gather all, take the max. */
        float parts[64] = {0};
        if (st == GT_OK && n <= 64) {
          parts[rank] = dt;
          st = gt_comm_allreduce(c, parts, (size_t)n, GT_F32, GT_COMM_SUM);
        }
        if (st == GT_OK && rank == 0) {
          float mx = 0;
          for (int r = 0; r < n; r++) mx = parts[r] > mx ? parts[r] : mx;
          if (round == 0 || mx < res->us[ti][op][k]) res->us[ti][op][k] = mx;
        }
      }
    }
  }
  if (st != GT_OK && rank == 0) {
    res->failed = 1;
    snprintf(res->why, sizeof res->why, "%s", gt_last_error());
  }
  free(buf);
  free(out);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return st == GT_OK ? 0 : 1;
}

/* A store process, then n ranks; everything forked from a thread-free
 * parent. */
static int run_ranks(int n, gt_comm_transport t, int ti, result *res) {
  int port_pipe[2], ctl[2];
  if (pipe(port_pipe) || pipe(ctl)) return -1;
  pid_t sp = fork();
  if (sp == 0) {
    close(port_pipe[0]);
    close(ctl[1]);
    gt_store_tcp_config cfg = {.host = "127.0.0.1", .is_host = true, .secret = SECRET};
    gt_store *srv = NULL;
    int port = gt_store_tcp_open(&cfg, &srv) == GT_OK ? gt_store_tcp_port(srv) : -1;
    if (write(port_pipe[1], &port, sizeof port) != sizeof port) _exit(1);
    char b;
    while (read(ctl[0], &b, 1) > 0) {}
    gt_store_destroy(srv);
    _exit(0);
  }
  close(port_pipe[1]);
  close(ctl[0]);
  if (read(port_pipe[0], &store_port, sizeof store_port) != sizeof store_port || store_port <= 0) {
    close(ctl[1]);
    return -1;
  }
  close(port_pipe[0]);
  pid_t pids[64];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(ctl[1]);
      _exit(rank_main(r, n, t, ti, res));
    }
  }
  int bad = 0;
  double deadline = gt_now() + 600;
  for (int r = 0; r < n; r++) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (gt_now() > deadline) {
        for (int q = 0; q < n; q++) kill(pids[q], SIGKILL);
        waitpid(pids[r], &status, 0);
        break;
      }
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  close(ctl[1]);
  waitpid(sp, NULL, 0);
  return bad;
}

/* Gloo: runs bench/comm_gloo.py and reads "bytes=<n> us=<t>" lines. */
static int run_gloo(int n, double *us) {
  const char *script = getenv("GT_BENCH_GLOO");
  if (!script) script = GIANT_BENCH_DIR "/comm_gloo.py";
  const char *py = bench_python();
  char cmd[4096];
  int k = snprintf(cmd, sizeof cmd, "%s -c 'import torch.distributed' 2>/dev/null", py);
  if (system(cmd) != 0) return -1;
  k = snprintf(cmd, sizeof cmd, "%s %s --ranks %d --rounds %d %s --sizes ", py, script, n, ROUNDS,
               quick ? "--quick" : "");
  for (int i = 0; i < nsizes && k < (int)sizeof cmd - 32; i++)
    k += snprintf(cmd + k, sizeof cmd - (size_t)k, "%s%zu", i ? "," : "", sizes[i]);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  char line[256];
  int got = 0;
  while (fgets(line, sizeof line, f)) {
    size_t b;
    double t;
    if (sscanf(line, "gloo allreduce bytes=%zu us=%lf", &b, &t) != 2) continue;
    for (int i = 0; i < nsizes; i++)
      if (sizes[i] == b) {
        us[i] = t;
        got++;
      }
  }
  int rc = pclose(f);
  return rc == 0 && got ? 0 : -1;
}

/* OpenMPI's shared-memory transport (pml ob1, btl vader: single copy by
 * CMA for large messages) in its default, which polls, and set for a shared
 * machine (unbound ranks that yield while they wait); tuned's default
 * choice of algorithm in both. --oversubscribe lets 4 ranks run on fewer
 * cores. */
static const char *const mpi_settings[] = {
    "--mca pml ob1 --mca btl self,vader",
    "--mca pml ob1 --mca btl self,vader --bind-to none --mca mpi_yield_when_idle 1",
};
#define NMPI (int)(sizeof mpi_settings / sizeof mpi_settings[0])

/* MPI: runs bench_comm_mpi under mpirun in every setting and keeps, per
 * size, the best (which[i]: that setting). 0, or -1 with why filled. */
static int run_mpi(int n, double *us, int *which, char *why, size_t whylen) {
#ifndef GIANT_BENCH_MPI
  (void)n;
  (void)us;
  (void)which;
  snprintf(why, whylen, "CMake found no MPI (find_package(MPI COMPONENTS C)) when this was built");
  return -1;
#else
  int got = 0;
  for (int m = 0; m < NMPI; m++) {
    char cmd[4096];
    int k = snprintf(cmd, sizeof cmd, "%s --allow-run-as-root --oversubscribe -np %d %s %s --rounds %d %s --sizes ",
                     GIANT_BENCH_MPIEXEC, n, mpi_settings[m], GIANT_BENCH_MPI, ROUNDS, quick ? "--quick" : "");
    for (int i = 0; i < nsizes && k < (int)sizeof cmd - 32; i++)
      k += snprintf(cmd + k, sizeof cmd - (size_t)k, "%s%zu", i ? "," : "", sizes[i]);
    snprintf(cmd + k, sizeof cmd - (size_t)k, " 2>&1");
    FILE *f = popen(cmd, "r");
    if (!f) continue;
    char line[512], last[256] = "";
    while (fgets(line, sizeof line, f)) {
      size_t b;
      double t;
      int ok;
      if (sscanf(line, "mpi allreduce bytes=%zu us=%lf ok=%d", &b, &t, &ok) != 3) {
        line[strcspn(line, "\n")] = 0;
        if (*line) snprintf(last, sizeof last, "%.200s", line);
        continue;
      }
      if (!ok) {
        snprintf(why, whylen, "MPI_Allreduce of %zu bytes gave a wrong sum (%s)", b, mpi_settings[m]);
        pclose(f);
        return -1;
      }
      for (int i = 0; i < nsizes; i++)
        if (sizes[i] == b && (us[i] <= 0 || t < us[i])) {
          us[i] = t;
          which[i] = m;
          got++;
        }
    }
    if (pclose(f) != 0) snprintf(why, whylen, "mpirun failed (%s): %s", mpi_settings[m], last);
  }
  return got ? 0 : -1;
#endif
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mul = 1;
  if (*end == 'K' || *end == 'k') {
    mul = 1024;
    end++;
  } else if (*end == 'M' || *end == 'm') {
    mul = 1u << 20;
    end++;
  } else if (*end == 'G' || *end == 'g') {
    mul = 1u << 30;
    end++;
  }
  if (*end == 'i') end++;
  if (*end == 'B') end++;
  if (*end || v <= 0) return 0;
  return (size_t)(v * (double)mul);
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_comm [--max-size SIZE (e.g. 64M, default 256M)] [--quick] [--no-gloo] [--no-mpi] "
          "[--ranks 2|4]\n");
}

int main(int argc, char **argv) {
  size_t max_size = 256u << 20;
  bool gloo = true, mpi = true;
  int only_ranks = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = true;
    else if (!strcmp(argv[i], "--no-gloo"))
      gloo = false;
    else if (!strcmp(argv[i], "--no-mpi"))
      mpi = false;
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
      only_ranks = atoi(argv[++i]);
      if (only_ranks != 2 && only_ranks != 4) {
        fprintf(stderr, "bench_comm: --ranks must be 2 or 4, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) {
      max_size = parse_size(argv[++i]);
      if (max_size < 4096 || max_size > (4ull << 30)) {
        fprintf(stderr, "bench_comm: --max-size must be between 4K and 4G, got '%s'\n", argv[i]);
        return 2;
      }
    } else {
      usage();
      return 2;
    }
  }
  for (size_t s = 4096; s <= max_size && nsizes < MAX_SIZES; s *= quick ? 16 : 4) sizes[nsizes++] = s;
  /* 64 MiB is the headline size: always include it when in range. */
  if (max_size >= (64u << 20)) {
    bool have = false;
    for (int i = 0; i < nsizes; i++) have |= sizes[i] == (64u << 20);
    if (!have && nsizes < MAX_SIZES) {
      int i = nsizes++;
      while (i > 0 && sizes[i - 1] > (64u << 20)) {
        sizes[i] = sizes[i - 1];
        i--;
      }
      sizes[i] = 64u << 20;
    }
  }
  double mc = memcpy_gbps(max_size < (64u << 20) ? max_size : 64u << 20);
  printf("# bench_comm: %d sizes 4 KiB .. %zu MiB%s, memcpy %.2f GB/s (same run), %ld cores\n", nsizes,
         sizes[nsizes - 1] >> 20, quick ? " (quick)" : "", mc, sysconf(_SC_NPROCESSORS_ONLN));
  printf("# algbw = bytes/time; busbw = algbw*2(n-1)/n (allreduce), algbw*(n-1)/n (others)\n");
  printf("%-14s %5s %-8s %12s %12s %10s %10s %9s\n", "op", "ranks", "alg", "bytes", "time_us", "algbw_GBs", "busbw_GBs",
         "vs_memcpy");
  double headline = 0, headline_gloo = 0, tcp64 = 0, tcp_mac64 = 0, tcp_enc64 = 0, shm64 = 0, mpi64 = 0, limit64 = 0;
  const int ranks[2] = {2, 4};
  const gt_comm_transport tr[NTRANSPORTS] = {GT_COMM_TCP, GT_COMM_SHM, GT_COMM_TCP, GT_COMM_TCP};
  const char *const *trn = transport_names;
  for (int ri = 0; ri < 2; ri++) {
    int n = ranks[ri];
    if (only_ranks && n != only_ranks) continue;
    result *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return 1;
    memset(res, 0, sizeof *res);
    for (int ti = 0; ti < NTRANSPORTS; ti++) {
      fflush(stdout);
      if (run_ranks(n, tr[ti], ti, res) != 0 || res->failed) {
        fprintf(stderr, "bench_comm: %d ranks over %s failed: %s\n", n, trn[ti], res->why);
        return 1;
      }
    }
    /* The copy limit of the headline, right after the ranks it bounds. */
    size_t piece = 0;
    bool stream = false;
    double lim =
        n == 2 && max_size >= (64u << 20) ? bench_copy_limit(128u << 20, 64u << 20, ROUNDS, &piece, &stream) : -1;
    if (lim > 0) {
      limit64 = (64u << 20) / lim / 1e9;
      printf(
          "# copy limit, 64 MiB all-reduce of 2 ranks: 128 MiB through a shared segment in %.1f us (%zu KiB "
          "pieces, copied out %s), %.3f GB/s of all-reduce\n",
          lim * 1e6, piece >> 10, stream ? "with streaming stores" : "by memcpy", limit64);
    }
    for (int op = 0; op < NOPS; op++) {
      for (int k = 0; k < nsizes; k++) {
        for (int ti = 0; ti < NTRANSPORTS; ti++) {
          double us = res->us[ti][op][k];
          if (us <= 0) continue;
          double alg = sizes[k] / (us * 1e-6) / 1e9;
          double bus = alg * (op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
          printf("%-14s %5d %-8s %12zu %12.1f %10.3f %10.3f %9.2f\n", op_names[op], n, trn[ti], sizes[k], us, alg, bus,
                 bus / mc);
          bool head = op == OP_AR && n == 2 && sizes[k] == (64u << 20);
          if (head && (ti == T_TCP || ti == T_SHM) && alg > headline) headline = alg;
          if (head && ti == T_TCP) tcp64 = alg;
          if (head && ti == T_SHM) shm64 = alg;
          if (head && ti == T_TCP_MAC) tcp_mac64 = alg;
          if (head && ti == T_TCP_ENC) tcp_enc64 = alg;
        }
      }
    }
    if (gloo) {
      double gus[MAX_SIZES] = {0};
      fflush(stdout);
      if (run_gloo(n, gus) == 0) {
        for (int k = 0; k < nsizes; k++) {
          if (gus[k] <= 0) continue;
          double alg = sizes[k] / (gus[k] * 1e-6) / 1e9;
          double best = 0;
          for (int ti = 0; ti < T_TCP_MAC; ti++)
            if (res->us[ti][OP_AR][k] > 0 && sizes[k] / (res->us[ti][OP_AR][k] * 1e-6) / 1e9 > best)
              best = sizes[k] / (res->us[ti][OP_AR][k] * 1e-6) / 1e9;
          printf("%-14s %5d %-8s %12zu %12.1f %10.3f %10.3f %9.2f  giant/gloo=%.2f\n", "allreduce", n, "gloo", sizes[k],
                 gus[k], alg, alg * 2.0 * (n - 1) / n, alg * 2.0 * (n - 1) / n / mc, best / alg);
          if (n == 2 && sizes[k] == (64u << 20)) headline_gloo = alg;
        }
      } else {
        printf("# gloo baseline unavailable (python3 with torch.distributed not found)\n");
        gloo = false;
      }
    }
    if (mpi) {
      double mus[MAX_SIZES] = {0};
      int which[MAX_SIZES] = {0};
      char why[512] = "no result";
      fflush(stdout);
      if (run_mpi(n, mus, which, why, sizeof why) == 0) {
        for (int m = 0; m < NMPI; m++) printf("# mpi setting %d: mpirun %s\n", m, mpi_settings[m]);
        for (int k = 0; k < nsizes; k++) {
          if (mus[k] <= 0) continue;
          double alg = sizes[k] / (mus[k] * 1e-6) / 1e9, shm = 0;
          if (res->us[T_SHM][OP_AR][k] > 0) shm = sizes[k] / (res->us[T_SHM][OP_AR][k] * 1e-6) / 1e9;
          printf("%-14s %5d %-8s %12zu %12.1f %10.3f %10.3f %9.2f  giant_shm/mpi=%.2f setting=%d\n", "allreduce", n,
                 "mpi", sizes[k], mus[k], alg, alg * 2.0 * (n - 1) / n, alg * 2.0 * (n - 1) / n / mc, shm / alg,
                 which[k]);
          if (n == 2 && sizes[k] == (64u << 20)) mpi64 = alg;
        }
      } else {
        printf("# mpi baseline unavailable: %s\n", why);
        mpi = false;
      }
    }
    munmap(res, sizeof *res);
  }
  /* What payload integrity costs: TCP's 64 MiB all-reduce with every
   * payload's tag against headers alone, in the same run. */
  char mac[64] = "n/a";
  if (tcp64 > 0 && tcp_mac64 > 0) snprintf(mac, sizeof mac, "%.2f", tcp_mac64 / tcp64);
  /* Across hosts: 2 emulated hosts x 2 ranks, two levels against the flat
   * TCP ring (comm_hier.h); needs root. A veth pair moves bytes as fast as
   * memory, so the hosts' links are also held to 10 Gbit/s (a token
   * bucket), as a cluster's Ethernet would be: the headline. */
  char hv[64] = "n/a";
  const int links[2] = {0, 10000};
  for (int l = 0; l < 2; l++) {
    char hwhy[256] = "";
    double hier_s = 0, flat_s = 0;
    fflush(stdout);
    if (bench_comm_hier((size_t)64 << 20, quick ? 3 : 9, links[l], &hier_s, &flat_s, hwhy, sizeof hwhy) == 0) {
      printf(
          "# allreduce 64 MiB, 2 emulated hosts x 2 ranks (network namespaces, veth on a bridge, %s): two levels "
          "(shm + tcp between leaders) %.1f ms, flat tcp ring %.1f ms (medians): x%.2f\n",
          links[l] ? "links held to 10 Gbit/s" : "links unlimited", hier_s * 1e3, flat_s * 1e3, flat_s / hier_s);
      if (links[l]) snprintf(hv, sizeof hv, "%.2f", flat_s / hier_s);
    } else {
      printf("# allreduce across emulated hosts not measured: %s\n", hwhy);
      break;
    }
  }
  /* What encryption costs: the same all-reduce's time encrypted over plain. */
  char enc[64] = "n/a";
  if (tcp64 > 0 && tcp_enc64 > 0) snprintf(enc, sizeof enc, "%.2f", tcp64 / tcp_enc64);
  char vs[64] = "n/a", tg[64] = "n/a", sm[64] = "n/a", cl[64] = "n/a";
  if (headline_gloo > 0) snprintf(vs, sizeof vs, "%.2f", headline / headline_gloo);
  if (headline_gloo > 0 && tcp64 > 0) snprintf(tg, sizeof tg, "%.2f", tcp64 / headline_gloo);
  if (mpi64 > 0 && shm64 > 0) snprintf(sm, sizeof sm, "%.2f", shm64 / mpi64);
  if (limit64 > 0 && shm64 > 0) snprintf(cl, sizeof cl, "%.2f", shm64 / limit64);
  printf(
      "allreduce_64MiB_2ranks_GBps=%.3f vs_gloo=%s tcp_vs_gloo=%s shm_vs_mpi=%s of_copy_limit=%s "
      "tcp_mac_vs_headers=%s hier_vs_flat=%s encrypt_cost=%s\n",
      headline, vs, tg, sm, cl, mac, hv, enc);
  return 0;
}
