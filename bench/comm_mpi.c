/* Baseline for bench/comm.c: OpenMPI's MPI_Allreduce (fp32 sum, in place,
 * as Giant's) between the ranks mpirun starts on this host, over the sizes
 * given. bench_comm runs it under mpirun with the shared-memory transport
 * and keeps the best of the settings it tries. Prints one line per size for
 * the C bench to parse:
 *   mpi allreduce bytes=<n> us=<mean microseconds per call> ok=<0|1>
 * ok=1 when a checked all-reduce after the timed ones gave the exact sum.
 * The timing follows bench_comm: the same call budget per size, two
 * warm-up calls, the slowest rank's mean per round, the best round. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters_for(size_t bytes, int quick) {
  size_t budget = (quick ? 32u : 128u) << 20;
  size_t n = budget / (bytes ? bytes : 1);
  int lo = quick ? 2 : 3;
  return n < (size_t)lo ? lo : n > 200 ? 200 : (int)n;
}

/* Rank r holds (i % 1000) + r: every partial sum is an exact integer, so
 * the result is checked exactly whatever order MPI adds in. */
static int check(float *x, size_t count, int rank, int n) {
  for (size_t i = 0; i < count; i++) x[i] = (float)(i % 1000) + (float)rank;
  if (MPI_Allreduce(MPI_IN_PLACE, x, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) return 0;
  int ok = 1;
  for (size_t i = 0; ok && i < count; i++) ok = x[i] == (float)n * (float)(i % 1000) + (float)(n * (n - 1) / 2);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int quick = 0, rounds = 3;
  const char *list = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
      list = argv[++i];
  }
  if (!list || rounds < 1) {
    if (rank == 0) fprintf(stderr, "usage: bench_comm_mpi --sizes N[,N...] [--rounds R] [--quick]\n");
    MPI_Finalize();
    return 2;
  }
  size_t sizes[64], maxb = 0;
  int ns = 0;
  for (const char *p = list; *p && ns < 64;) {
    char *end;
    sizes[ns] = strtoull(p, &end, 10);
    if (sizes[ns] > maxb) maxb = sizes[ns];
    ns++;
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  float *x = NULL;
  if (posix_memalign((void **)&x, 4096, maxb ? maxb : 4)) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int k = 0; k < ns; k++) {
    size_t count = sizes[k] / 4;
    int iters = iters_for(sizes[k], quick);
    memset(x, 0, count * 4);
    double best = 0;
    for (int round = 0; round < rounds; round++) {
      double t0 = 0;
      for (int i = round ? 0 : -2; i < iters; i++) {
        if (i == 0) {
          MPI_Barrier(MPI_COMM_WORLD);
          t0 = MPI_Wtime();
        }
        MPI_Allreduce(MPI_IN_PLACE, x, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      double dt = (MPI_Wtime() - t0) / iters, mx = 0;
      /* The slowest rank's time is the collective's time. */
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (round == 0 || mx < best) best = mx;
    }
    int ok = check(x, count, rank, n);
    if (rank == 0) {
      printf("mpi allreduce bytes=%zu us=%.1f ok=%d\n", sizes[k], best * 1e6, ok);
      fflush(stdout);
    }
  }
  free(x);
  MPI_Finalize();
  return 0;
}
