/* How many of a process's threads did the work: per-thread CPU time from
 * /proc, read before and after a timed region. A setting such as
 * OPENBLAS_NUM_THREADS says what a library may use; this says what it did. */
#ifndef GIANT_BENCH_THREADS_H
#define GIANT_BENCH_THREADS_H

#include <sys/types.h>

#define BENCH_MAX_THREADS 256

typedef struct bench_cpu_times {
  int n;
  pid_t tid[BENCH_MAX_THREADS];
  long long ticks[BENCH_MAX_THREADS]; /* user + system, in clock ticks */
} bench_cpu_times;

/* The CPU time so far of each thread of process pid (0: this process). */
void bench_cpu_times_read(pid_t pid, bench_cpu_times *out);
/* The threads that were busy between two readings: those whose CPU time
 * grew by at least a quarter of the busiest one's (and by 2 ticks or
 * more), so that a thread that only woke now and then is not counted. */
int bench_cpu_times_busy(const bench_cpu_times *before, const bench_cpu_times *after);
/* openblas_get_num_threads() of the OpenBLAS this process linked, or -1. */
int bench_openblas_threads(void);

#endif
