/* A worker for the launcher tests. It calls gt_init, passes a barrier on
 * the job's store with every rank, writes what it saw to
 * $LW_DIR/gen<G>.rank<R>.env, records its pid in $LW_DIR/pids, then follows
 * its arguments:
 *   sleep=S[@gG][@rR]   sleep S seconds (in generation G / at rank R only)
 *   exit=C[@gG][@rR]    then exit with C
 *   child=1[@gG][@rR]   first fork a child that sleeps in the same group
 *   allreduce=1         form a communicator over the job's store (TCP) and
 *                       record the sum of rank+1 over the world
 *   steps=N             report steps 1..N to the agent (gt_job_step), one
 *                       every steptime=S seconds (default 0.05), each with a
 *                       "step K" line on stdout that is not flushed by hand
 *   stop=1              then stop itself with SIGSTOP
 *   gate=1              then wait (at most 120 s, far past any test's wait
 *                       for it) for the file $LW_DIR/go
 *   spam=N              then write N lines of 100 bytes to stdout
 * A later matching argument overrides an earlier one. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "giant/engine/init.h"
#include "giant/log.h"
#include "giant/engine/store.h"

static int matches(const char *q, long gen, int rank) {
  while (q && *q == '@') {
    char kind = q[1];
    long v = strtol(q + 2, (char **)&q, 10);
    if (kind == 'g' && v != gen) return 0;
    if (kind == 'r' && v != rank) return 0;
  }
  return 1;
}

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void record_pid(const char *dir, long pid) {
  char path[512], line[64];
  snprintf(path, sizeof path, "%s/pids", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  int n = snprintf(line, sizeof line, "%ld\n", pid);
  if (write(fd, line, (size_t)n) != n) perror("pids");
  close(fd);
}

int main(int argc, char **argv) {
  const char *dir = getenv("LW_DIR");
  if (!dir) {
    fprintf(stderr, "launch_worker: set LW_DIR\n");
    return 2;
  }
  gt_job *job;
  if (gt_init(&job) != GT_OK) {
    fprintf(stderr, "launch_worker: gt_init: %s\n", gt_last_error());
    return 3;
  }
  record_pid(dir, (long)getpid());
  double sleep_s = 0;
  int code = 0, child = 0, allreduce = 0, steps = 0, stop = 0, gate = 0, spam = 0;
  double steptime = 0.05;
  for (int i = 1; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    if (!eq) continue;
    char *end;
    double v = strtod(eq + 1, &end);
    if (!matches(end, job->generation, job->rank)) continue;
    if (!strncmp(argv[i], "sleep=", 6))
      sleep_s = v;
    else if (!strncmp(argv[i], "exit=", 5))
      code = (int)v;
    else if (!strncmp(argv[i], "child=", 6))
      child = (int)v;
    else if (!strncmp(argv[i], "allreduce=", 10))
      allreduce = (int)v;
    else if (!strncmp(argv[i], "steps=", 6))
      steps = (int)v;
    else if (!strncmp(argv[i], "steptime=", 9))
      steptime = v;
    else if (!strncmp(argv[i], "stop=", 5))
      stop = (int)v;
    else if (!strncmp(argv[i], "gate=", 5))
      gate = (int)v;
    else if (!strncmp(argv[i], "spam=", 5))
      spam = (int)v;
  }
  /* Every rank reaches the store: the barrier proves they share one. The
   * ranks of a generation start within 0.1-0.5 s of each other on busy
   * cores: 30 s is > 60x. */
  if (gt_store_barrier(job->store, "launch_worker", job->rank, job->world_size, 30000) != GT_OK) {
    fprintf(stderr, "launch_worker: barrier: %s\n", gt_last_error());
    gt_job_destroy(job);
    return 4;
  }
  double started = gt_now();
  float sum = -1;
  if (allreduce) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s/world", job->generation_name);
    gt_comm_config cc = {.store = job->store,
                         .prefix = prefix,
                         .rank = job->rank,
                         .size = job->world_size,
                         .secret = job->secret,
                         .transport = GT_COMM_TCP,
                         .init_timeout_ms = 30000,
                         .op_timeout_ms = 30000}; /* as the barrier's */
    gt_comm *comm;
    if (gt_comm_init(&cc, &comm) != GT_OK) {
      fprintf(stderr, "launch_worker: communicator: %s\n", gt_last_error());
      gt_job_destroy(job);
      return 5;
    }
    sum = (float)(job->rank + 1);
    gt_status st = gt_comm_allreduce(comm, &sum, 1, GT_F32, GT_COMM_SUM);
    gt_comm_destroy(comm);
    if (st != GT_OK) {
      fprintf(stderr, "launch_worker: allreduce: %s\n", gt_last_error());
      gt_job_destroy(job);
      return 6;
    }
  }
  if (child) {
    pid_t c = fork();
    if (c == 0) {
      execl("/bin/sleep", "sleep", "60", (char *)NULL);
      _exit(127);
    }
    if (c > 0) record_pid(dir, (long)c);
  }
  char path[512], tmp[540];
  snprintf(path, sizeof path, "%s/gen%ld.rank%d.env", dir, job->generation, job->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f) {
    static const char *const vars[] = {"GT_RANK",         "GT_LOCAL_RANK",
                                       "GT_WORLD_SIZE",   "GT_LOCAL_WORLD_SIZE",
                                       "GT_NODE_RANK",    "GT_NNODES",
                                       "GT_GENERATION",   "GT_RESTART_COUNT",
                                       "GT_JOB_ID",       "GT_STORE",
                                       "GT_STORE_CACERT", "GT_STORE_CERT",
                                       "GT_STORE_KEY",    "GT_JOB_SECRET",
                                       "GT_PLAN",         "GT_COMM_HOST",
                                       "GT_NODE_ID",      NULL};
    for (int i = 0; vars[i]; i++) fprintf(f, "%s=%s\n", vars[i], getenv(vars[i]) ? getenv(vars[i]) : "");
    fprintf(f, "pid=%ld\nppid=%ld\npgid=%ld\nstarted=%.6f\nallreduce=%g\n", (long)getpid(), (long)getppid(),
            (long)getpgrp(), started, sum);
    fprintf(f, "job.rank=%d\njob.world=%d\njob.generation=%s\n", job->rank, job->world_size, job->generation_name);
    fclose(f);
    rename(tmp, path);
  }
  printf("worker rank %d of %d in %s up\n", job->rank, job->world_size, job->generation_name);
  fflush(stdout);
  for (int k = 1; k <= steps; k++) {
    nap(steptime);
    gt_job_step(job, k);
    printf("step %d\n", k); /* gt_init made stdout line-buffered */
  }
  if (stop) raise(SIGSTOP);
  if (gate) {
    snprintf(path, sizeof path, "%s/go", dir);
    for (double end = gt_now() + 120; access(path, F_OK) != 0 && gt_now() < end;) nap(0.02);
  }
  char fill[88];
  memset(fill, '.', sizeof fill - 1);
  fill[sizeof fill - 1] = 0;
  for (int k = 0; k < spam; k++) printf("spam %06d %s\n", k, fill); /* 100 bytes a line */
  gt_job_destroy(job);
  nap(sleep_s);
  return code;
}
