/* bench/observe: what watching a run costs. The same examples/gpt training
 * run twice per round, once plain and once with everything a user turns on
 * to watch it (--metrics and --tensorboard; not --eval-every: evaluation
 * is work of its own, not watching), in alternating order, its wall time
 * from exec to exit each time. Both runs train the same steps on the same
 * data from the same seed; only the writing differs. Start-up (loading the
 * data, measuring the machine's peak) is taken out: each side also runs a
 * single step, and its training time is the difference, S - 1 steps.
 *
 *   bench_observe [--rounds N] [--steps S] [--layers L] [--channels C] [--seq T] [--batch B]
 *
 * Last line: observe_cost=<median(on) / median(off) - 1> (goal <= 0.01) of
 * the S - 1 steps' time,
 * with the medians and the configuration above it. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 50

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs argv with output to /dev/null; its wall time, or NAN if it failed. */
static double timed_run(char *const argv[]) {
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
    execv(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return NAN;
  return now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  int rounds = 5;
  const char *steps = "200", *layers = "4", *channels = "128", *seq = "128", *batch = "8";
  for (int i = 1; i < argc; i++) {
    const char **s = NULL;
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
      continue;
    }
    if (!strcmp(argv[i], "--steps")) s = &steps;
    if (!strcmp(argv[i], "--layers")) s = &layers;
    if (!strcmp(argv[i], "--channels")) s = &channels;
    if (!strcmp(argv[i], "--seq")) s = &seq;
    if (!strcmp(argv[i], "--batch")) s = &batch;
    if (!s || i + 1 >= argc || atoi(argv[i + 1]) <= 0) {
      fprintf(stderr,
              "usage: bench_observe [--rounds N] [--steps S] [--layers L] [--channels C] [--seq T] [--batch B]\n");
      return 2;
    }
    *s = argv[++i];
  }
  if (rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "bench_observe: --rounds takes 1 to %d\n", MAX_ROUNDS);
    return 2;
  }
  char dir[] = "/tmp/giant-bench-observe-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("bench_observe: mkdtemp");
    return 1;
  }
  char gpt[1024], data[1100], metrics[1100], tb[1100];
  snprintf(gpt, sizeof gpt, "%s/examples/gpt", GIANT_BUILD_DIR);
  snprintf(data, sizeof data, "%s/data.tok", dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
  snprintf(tb, sizeof tb, "%s/tb", dir);
  /* One thread: the machine's noise is smaller on one core, and the cost
   * is per step, whatever the step's threads. */
  setenv("OMP_NUM_THREADS", "1", 1);
  char *plain[] = {gpt,          "--data",         data,    "--steps",   (char *)steps, "--layers",    (char *)layers,
                   "--channels", (char *)channels, "--seq", (char *)seq, "--batch",     (char *)batch, "--sample",
                   "0",          "--print-every",  "0",     NULL};
  enum { NPLAIN = sizeof plain / sizeof *plain - 1 }; /* without the NULL */
  char *on[NPLAIN + 5];
  memcpy(on, plain, sizeof plain);
  on[NPLAIN] = "--metrics";
  on[NPLAIN + 1] = metrics;
  on[NPLAIN + 2] = "--tensorboard";
  on[NPLAIN + 3] = tb;
  on[NPLAIN + 4] = NULL;
  /* The first run tokenizes the corpus into data.tok: not timed. */
  if (isnan(timed_run(plain))) {
    fprintf(stderr, "bench_observe: %s failed (try it by hand)\n", gpt);
    return 1;
  }
  /* The same runs of one step: their start-up. */
  char *plain1[NPLAIN + 1], *on1[NPLAIN + 5];
  memcpy(plain1, plain, sizeof plain1);
  memcpy(on1, on, sizeof on1);
  plain1[4] = on1[4] = "1"; /* --steps */
  double t_off[MAX_ROUNDS], t_on[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    remove(metrics);
    bool on_first = r % 2;
    double t[4];
    char **order[4] = {on_first ? on1 : plain1, on_first ? on : plain, on_first ? plain1 : on1, on_first ? plain : on};
    for (int k = 0; k < 4; k++) {
      t[k] = timed_run(order[k]);
      if (isnan(t[k])) {
        fprintf(stderr, "bench_observe: a run failed in round %d\n", r);
        return 1;
      }
      if (k % 2 == 0) remove(metrics);
    }
    double a = t[1] - t[0], b = t[3] - t[2]; /* the training, start-up taken out */
    t_on[r] = on_first ? a : b;
    t_off[r] = on_first ? b : a;
    printf("round %d: training off %.3f s, on %.3f s (%s first)\n", r, t_off[r], t_on[r], on_first ? "on" : "off");
    fflush(stdout);
  }
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_observe: could not remove %s\n", dir);
  double off = median(t_off, rounds), on_s = median(t_on, rounds);
  printf("examples/gpt, 1 thread: --steps %s --layers %s --channels %s --seq %s --batch %s; %d rounds, alternating\n",
         steps, layers, channels, seq, batch, rounds);
  printf("watching: --metrics FILE --tensorboard DIR (rank 0 writes a metrics line and a TensorBoard event a step)\n");
  printf("median time of steps 2..%s: off %.3f s, on %.3f s\n", steps, off, on_s);
  printf("observe_cost=%.4f\n", on_s / off - 1);
  return 0;
}
