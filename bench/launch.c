/* bench_launch: how fast giantrun gets workers running.
 *
 *  1. start: from running `giantrun --standalone --nproc-per-node 4` to all
 *     4 workers running (process started; and after gt_init and a barrier on
 *     the job's etcd store). Baseline in the same run: the same 4 workers
 *     forked and exec'ed directly, each a job of one (no etcd, no
 *     rendezvous), so the ratio is what the launcher adds.
 *  2. re-form: 2 agents against a local etcd; one is killed with SIGKILL;
 *     the time until the survivor's workers run again at the next
 *     generation. It is bounded below by the lease expiry (2/3 to all of the
 *     TTL after the kill: renewals come every third of it) plus the settle
 *     time (MIN=1 < MAX=2); that floor is printed next to it.
 *
 * The program is its own worker (bench_launch --worker DIR). The last line
 * is key=value pairs for scripts. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "localkit/etcd_server.h"
#include "giant/engine/init.h"
#include "giant/log.h"
#include "giant/engine/store.h"

#define REPS 5
#define TTL_S "2"
#define SETTLE_S "0.5"

static char self[4096], giantrun[4096];

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Worker: record when the process started and when gt_init + a barrier
 * were done; hold generation 0 when asked (killed by the agent). */
static int worker(const char *dir, int hold_gen0) {
  double started = gt_now();
  gt_job *job;
  if (gt_init(&job) != GT_OK) {
    fprintf(stderr, "bench_launch worker: %s\n", gt_last_error());
    return 3;
  }
  if (gt_store_barrier(job->store, "bench", job->rank, job->world_size, 30000) != GT_OK) {
    fprintf(stderr, "bench_launch worker: barrier: %s\n", gt_last_error());
    return 4;
  }
  double ready = gt_now();
  char path[600], tmp[620];
  snprintf(path, sizeof path, "%s/gen%ld.rank%d", dir, job->generation, job->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f) {
    fprintf(f, "%.6f %.6f %d\n", started, ready, job->world_size);
    fclose(f);
    rename(tmp, path);
  }
  long gen = job->generation;
  gt_job_destroy(job);
  if (hold_gen0 && gen == 0) nap(120);
  return 0;
}

/* Latest start and ready times over ranks 0..n-1 of gen, waiting up to
 * timeout_s for their files. Returns 0 when all came. */
static int collect(const char *dir, int gen, int n, double timeout_s, double *start, double *ready, int *world) {
  double end = gt_now() + timeout_s;
  *start = *ready = 0;
  for (int r = 0; r < n; r++) {
    char path[600];
    snprintf(path, sizeof path, "%s/gen%d.rank%d", dir, gen, r);
    FILE *f;
    while (!(f = fopen(path, "r"))) {
      if (gt_now() > end) return -1;
      nap(0.005);
    }
    double s = 0, rd = 0;
    if (fscanf(f, "%lf %lf %d", &s, &rd, world) != 3) {
      fclose(f);
      return -1;
    }
    fclose(f);
    if (s > *start) *start = s;
    if (rd > *ready) *ready = rd;
  }
  return 0;
}

static pid_t spawn(const char *const *argv, const char *log) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

static int reap(pid_t pid, double timeout_s) {
  double end = gt_now() + timeout_s;
  int st;
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (gt_now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    nap(0.01);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void fresh_dir(char *buf, size_t n) {
  snprintf(buf, n, "/tmp/giant-bench-launch-XXXXXX");
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    exit(1);
  }
}

static void rm_dir(const char *d) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  if (system(cmd) != 0) fprintf(stderr, "bench_launch: could not remove %s\n", d);
}

/* 1. giantrun --standalone with 4 workers, and the direct-spawn baseline. */
static void bench_start(double *gr_start, double *gr_ready, double *base_start) {
  double a[REPS], b[REPS], c[REPS];
  for (int i = 0; i < REPS; i++) {
    char dir[256], log[300];
    fresh_dir(dir, sizeof dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    const char *argv[] = {giantrun, "--standalone", "--nproc-per-node", "4", self, "--worker", dir, NULL};
    double t0 = gt_now();
    pid_t pid = spawn(argv, log);
    double s, r;
    int world;
    if (collect(dir, 0, 4, 60, &s, &r, &world) != 0 || world != 4 || reap(pid, 60) != 0) {
      fprintf(stderr, "bench_launch: the standalone job failed; see %s\n", log);
      exit(1);
    }
    a[i] = s - t0;
    b[i] = r - t0;
    rm_dir(dir);

    /* Baseline: the same workers, each a job of one, spawned directly. */
    fresh_dir(dir, sizeof dir);
    pid_t kids[4];
    unsetenv("GT_WORLD_SIZE");
    t0 = gt_now();
    double last = 0;
    for (int k = 0; k < 4; k++) {
      char sub[300];
      snprintf(sub, sizeof sub, "%s/w%d", dir, k);
      mkdir(sub, 0755);
      const char *wargv[] = {self, "--worker", sub, NULL};
      snprintf(log, sizeof log, "%s/w%d.log", dir, k);
      kids[k] = spawn(wargv, log);
    }
    for (int k = 0; k < 4; k++) {
      char sub[300];
      snprintf(sub, sizeof sub, "%s/w%d", dir, k);
      if (collect(sub, 0, 1, 60, &s, &r, &world) != 0 || reap(kids[k], 60) != 0) {
        fprintf(stderr, "bench_launch: a baseline worker failed (%s)\n", sub);
        exit(1);
      }
      if (s > last) last = s;
    }
    c[i] = last - t0;
    rm_dir(dir);
  }
  *gr_start = bench_median(a, REPS);
  *gr_ready = bench_median(b, REPS);
  *base_start = bench_median(c, REPS);
}

/* 2. Two agents, one SIGKILLed: time to the survivor's workers at gen1. */
static double bench_reform(const etcd_fixture *fx, int nproc, double *ready_out) {
  double v[REPS], w[REPS];
  char np[16];
  snprintf(np, sizeof np, "%d", nproc);
  for (int i = 0; i < REPS; i++) {
    char dir[256], job[64], log0[300], log1[300];
    fresh_dir(dir, sizeof dir);
    snprintf(job, sizeof job, "reform%d", i);
    snprintf(log0, sizeof log0, "%s/a.log", dir);
    snprintf(log1, sizeof log1, "%s/b.log", dir);
    const char *a0[] = {giantrun,
                        "--nnodes",
                        "1:2",
                        "--nproc-per-node",
                        np,
                        "--rdzv-endpoint",
                        fx->endpoint,
                        "--job-id",
                        job,
                        "--node-id",
                        "a",
                        "--rdzv-ttl",
                        TTL_S,
                        "--rdzv-settle",
                        SETTLE_S,
                        "--max-restarts",
                        "3",
                        "--stop-grace",
                        "2",
                        self,
                        "--worker",
                        dir,
                        "--hold-gen0",
                        NULL};
    const char *a1[] = {giantrun,
                        "--nnodes",
                        "1:2",
                        "--nproc-per-node",
                        np,
                        "--rdzv-endpoint",
                        fx->endpoint,
                        "--job-id",
                        job,
                        "--node-id",
                        "b",
                        "--rdzv-ttl",
                        TTL_S,
                        "--rdzv-settle",
                        SETTLE_S,
                        "--max-restarts",
                        "3",
                        "--stop-grace",
                        "2",
                        self,
                        "--worker",
                        dir,
                        "--hold-gen0",
                        NULL};
    pid_t p0 = spawn(a0, log0), p1 = spawn(a1, log1);
    double s, r;
    int world = 0;
    if (collect(dir, 0, 2 * nproc, 60, &s, &r, &world) != 0 || world != 2 * nproc) {
      fprintf(stderr, "bench_launch: generation 0 did not form with 2 nodes (world %d); see %s\n", world, dir);
      exit(1);
    }
    double t_kill = gt_now();
    kill(p1, SIGKILL);
    reap(p1, 10);
    if (collect(dir, 1, nproc, 60, &s, &r, &world) != 0 || world != nproc) {
      fprintf(stderr, "bench_launch: no re-form after the kill; see %s\n", log0);
      exit(1);
    }
    v[i] = s - t_kill;
    w[i] = r - t_kill;
    if (reap(p0, 60) != 0) {
      fprintf(stderr, "bench_launch: the surviving agent failed; see %s\n", log0);
      exit(1);
    }
    rm_dir(dir);
  }
  *ready_out = bench_median(w, REPS);
  return bench_median(v, REPS);
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "--worker")) return worker(argv[2], argc >= 4 && !strcmp(argv[3], "--hold-gen0"));
  if (!realpath("/proc/self/exe", self)) {
    perror("bench_launch: /proc/self/exe");
    return 1;
  }
  snprintf(giantrun, sizeof giantrun, "%s", self);
  char *slash = strrchr(giantrun, '/');
  snprintf(slash + 1, sizeof giantrun - (size_t)(slash + 1 - giantrun), "../launch/giantrun");
  if (argc >= 3 && !strcmp(argv[1], "--giantrun")) snprintf(giantrun, sizeof giantrun, "%s", argv[2]);
  if (access(giantrun, X_OK) != 0) {
    fprintf(stderr, "bench_launch: giantrun not found at %s (pass --giantrun PATH)\n", giantrun);
    return 1;
  }
  if (!etcd_fixture_available()) {
    fprintf(stderr, "bench_launch: needs etcd on PATH (Debian: etcd-server)\n");
    return 1;
  }
  setenv("GT_LOG_LEVEL", "warn", 1);
  printf("bench_launch: giantrun %s, %d repetitions each, medians; cores online %ld\n", giantrun, REPS,
         sysconf(_SC_NPROCESSORS_ONLN));
  double gs, gr, bs;
  bench_start(&gs, &gr, &bs);
  printf("start (standalone, private etcd, 4 workers on 1 node):\n");
  printf("  giantrun to 4 workers started        %8.1f ms\n", gs * 1e3);
  printf("  giantrun to 4 workers past gt_init+barrier %8.1f ms\n", gr * 1e3);
  printf("  baseline: 4 workers spawned directly %8.1f ms (each a job of one, no etcd)\n", bs * 1e3);
  printf("  ratio giantrun / direct spawn        %8.1fx\n", gs / bs);

  /* Most of the start is etcd's own (it elects itself leader): time it
   * alone, started the same way. */
  etcd_fixture fx;
  double es[REPS];
  for (int i = 0; i < REPS; i++) {
    double e0 = gt_now();
    if (etcd_fixture_start(&fx, NULL) != 0) return 1;
    es[i] = gt_now() - e0;
    if (i < REPS - 1) etcd_fixture_destroy(&fx);
  }
  double etcd_s = bench_median(es, REPS);
  printf("  of which etcd start-up (alone)       %8.1f ms\n", etcd_s * 1e3);
  double rr, rs = bench_reform(&fx, 2, &rr);
  etcd_fixture_destroy(&fx);
  /* The lease was last renewed up to a third of the TTL before the kill. */
  double floor_s = atof(TTL_S) + atof(SETTLE_S), floor_lo = atof(TTL_S) * 2 / 3 + atof(SETTLE_S);
  printf("re-form (2 agents x 2 workers, local etcd, --rdzv-ttl %s --rdzv-settle %s --nnodes 1:2):\n", TTL_S, SETTLE_S);
  printf("  SIGKILL of one agent to survivor's workers started  %8.1f ms\n", rs * 1e3);
  printf("  ... past gt_init+barrier                           %8.1f ms\n", rr * 1e3);
  printf("  floor: lease expiry + settle, between            %8.1f and %.1f ms\n", floor_lo * 1e3, floor_s * 1e3);
  printf(
      "start_ms=%.1f start_ready_ms=%.1f baseline_ms=%.1f ratio=%.2f etcd_start_ms=%.1f reform_ms=%.1f "
      "reform_ready_ms=%.1f floor_ms=%.1f\n",
      gs * 1e3, gr * 1e3, bs * 1e3, gs / bs, etcd_s * 1e3, rs * 1e3, rr * 1e3, floor_s * 1e3);
  return 0;
}
