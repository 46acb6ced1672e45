/* Per-thread CPU time from /proc (bench_threads.h). */
#include "bench_threads.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* utime and stime are fields 14 and 15 of /proc/PID/task/TID/stat; the
 * command name (field 2) may hold spaces, so count from its closing ')'. */
static long long thread_ticks(pid_t pid, pid_t tid) {
  char path[96], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  long long utime = 0, stime = 0;
  /* After ')': state(3) ppid(4) ... utime(14) stime(15). */
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime) != 2) return -1;
  return utime + stime;
}

void bench_cpu_times_read(pid_t pid, bench_cpu_times *out) {
  out->n = 0;
  if (pid == 0) pid = getpid();
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && out->n < BENCH_MAX_THREADS) {
    if (e->d_name[0] == '.') continue;
    pid_t tid = (pid_t)atoi(e->d_name);
    long long t = thread_ticks(pid, tid);
    if (t < 0) continue;
    out->tid[out->n] = tid;
    out->ticks[out->n++] = t;
  }
  closedir(d);
}

int bench_cpu_times_busy(const bench_cpu_times *before, const bench_cpu_times *after) {
  long long delta[BENCH_MAX_THREADS], most = 0;
  for (int i = 0; i < after->n; i++) {
    long long was = 0; /* a thread started in between counts from zero */
    for (int j = 0; j < before->n; j++)
      if (before->tid[j] == after->tid[i]) was = before->ticks[j];
    delta[i] = after->ticks[i] - was;
    if (delta[i] > most) most = delta[i];
  }
  int busy = 0;
  for (int i = 0; i < after->n; i++)
    if (delta[i] >= 2 && 4 * delta[i] >= most) busy++;
  return busy;
}

int bench_openblas_threads(void) {
  int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
  return get ? get() : -1;
}
