/* bench/failslow: fail-slow detection in a running job.
 *
 * examples/gpt on four ranks (giantrun --standalone, dp=4, one thread
 * each) with --failslow, rank 2 slowed x2 from step 30 (GT_FAULT). From
 * the metrics files (every rank's, --metrics with %r): the detection delay
 * (steps from onset to the verdict), false alarms over the clean phase
 * (verdicts before step 30, or on another rank), the predictor's MAPE over
 * the clean phase (steps 10 to 29: the mean over ranks of |1 - predicted x
 * job factor / observed|, the job factor forecast from the steps before,
 * the monitor's ape_raw: a forecast's error; the same with the step's own
 * job factor applied, ape, is printed as the spread among ranks, which
 * is not a forecast), the job's throughput before (steps 10-29) and
 * during (40 on), and the telemetry all-gather's share of a step: rank 0's
 * time in it as the monitor reports it (which is mostly waiting for the
 * last rank to end its step, a skew the next collective would wait out
 * anyway), and its own cost, timed apart on four forked ranks already in
 * step (the median of 2000 all-gathers of the record), against the run's
 * median step.
 *
 * The job's throughput over steps a..b is every rank's tokens of those
 * steps (rank_tokens summed over ranks: the global batch) over the wall
 * time from the end of step a-1 to the end of step b (a step ends when its
 * last rank writes its line, unix_s): not the step lines' tokens_per_s
 * averaged over steps (the job's tokens over one rank's step, a mean of
 * rates that also leaves out the time between steps).
 *
 * The same run is made again with --rebalance (data-parallel shares moved
 * away from the slow rank, as giantrun's leading agent decides); where the
 * example refuses the flag, the mitigation figures are nan and the reason
 * is printed.
 * Last line: failslow_detect_steps=<d> false_alarms=<n> mape=<m>
 *            mitigated_ratio=<r> vs_no_mitigation=<x>
 * r: the job's throughput during the slowdown with --rebalance over the
 * ideal for the capacity actually left in that run (capacity_ideal below);
 * x: the job's throughput during with --rebalance / without. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_stats.h"
#include "giant/metrics.h"
#include "localkit/ranks.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

enum { ONSET = 30, STEPS = 120, SLOW_RANK = 2, RANKS = 4, DURING = ONSET + 10 };

/* One rank's step, from its metrics line. */
typedef struct rank_step {
  bool seen;
  double tokens, rows; /* this rank's share of the step: rank_tokens, and rows (rank_tokens / seq_len) */
  double busy_s;       /* its step's wall time less its waits on other ranks and on the loader */
  double end_s;        /* when it wrote the line, unix_s */
} rank_step;

typedef struct outcome {
  int exit_code;
  int detect_step; /* first flag of SLOW_RANK at or after ONSET; -1: none */
  int false_alarms;
  double mape, spread, gather_share, step_median;
  double tps_before, tps_during;          /* the job's tokens per second of wall time */
  double speed[RANKS];                    /* rows per busy second during the slowdown */
  double jitter, ideal_step_s, ideal_tps; /* capacity_ideal's */
  double step_s[STEPS];
  rank_step st[STEPS][RANKS];
  char reason[1024];
} outcome;

static double json_num(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(line, k);
  return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* The end of step s: its last rank's line. NAN unless every rank wrote it. */
static double step_end(const outcome *o, int s) {
  double end = -INFINITY;
  for (int r = 0; r < RANKS; r++) {
    if (s < 0 || s >= STEPS || !o->st[s][r].seen) return NAN;
    end = fmax(end, o->st[s][r].end_s);
  }
  return end;
}

/* The job's tokens per second over steps a..b (see the top). */
static double job_tps(const outcome *o, int a, int b) {
  double tokens = 0;
  for (int s = a; s <= b; s++)
    for (int r = 0; r < RANKS; r++) tokens += o->st[s][r].tokens;
  return tokens / (step_end(o, b) - step_end(o, a - 1));
}

/* What a phase (steps a..b) shows of the ranks' speeds. Each rank's speed
 * is its rows over its busy wall time (its step less its waits on the
 * others and on the loader; the fault's sleep counts, as a slow device's
 * time would). */
typedef struct phase {
  double speed[RANKS]; /* rows per busy second */
  double rows, tokens; /* the global batch, per step */
  double balanced_s;   /* each rank's busy time were the rows split in proportion to the speeds */
  double busiest_s;    /* the busiest rank's busy time, per step */
  double rest_s;       /* the step's wall time less its busiest rank's busy time, per step */
} phase;

static phase phase_of(const outcome *o, int a, int b) {
  phase p = {0};
  double rows[RANKS] = {0}, busy[RANKS] = {0}, speeds = 0;
  int n = b - a + 1;
  for (int s = a; s <= b; s++) {
    double most = 0;
    for (int r = 0; r < RANKS; r++) {
      const rank_step *x = &o->st[s][r];
      rows[r] += x->rows;
      busy[r] += x->busy_s;
      p.rows += x->rows / n;
      p.tokens += x->tokens / n;
      most = fmax(most, x->busy_s);
    }
    p.busiest_s += most / n;
  }
  for (int r = 0; r < RANKS; r++) speeds += p.speed[r] = rows[r] / busy[r];
  p.balanced_s = p.rows / speeds;
  p.rest_s = (step_end(o, b) - step_end(o, a - 1)) / n - p.busiest_s;
  return p;
}

/* The ideal for the capacity actually left during the slowdown: measured,
 * not assumed. The four ranks share two cores, so a rank's speed is what
 * its core gave it, and the slowed rank, asleep, lends its core to the
 * others (with a core each, the capacity left would be (3 + 1/2) / 4 of
 * the clean job's). Split in proportion to the ranks' speeds during the
 * slowdown, the global batch keeps every rank busy `balanced_s` a step.
 * No split does better than the noise allows: in the clean phase (an even
 * split, ranks alike) a step's busiest rank was `jitter` times the
 * balance, and the ideal keeps that factor. The rest of the step (the
 * gradients' reduction once the last rank is done, the update's tail, the
 * exchanges between steps) is taken as it was measured during the
 * slowdown. The ideal is the global batch's tokens over that step. */
static void capacity_ideal(outcome *o) {
  phase before = phase_of(o, 10, ONSET - 1), during = phase_of(o, DURING, STEPS - 1);
  memcpy(o->speed, during.speed, sizeof o->speed);
  o->jitter = before.busiest_s / before.balanced_s;
  o->ideal_step_s = o->jitter * during.balanced_s + during.rest_s;
  o->ideal_tps = during.tokens / o->ideal_step_s;
}

/* Every rank's step lines. */
static void read_steps(const char *dir, bool rebalance, outcome *o) {
  static char line[1 << 16];
  for (int r = 0; r < RANKS; r++) {
    char path[600];
    snprintf(path, sizeof path, "%s/m%d.%d.jsonl", dir, rebalance, r);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      if (strncmp(line, "{\"step\":", 8)) continue;
      int s = (int)json_num(line, "step");
      if (s < 0 || s >= STEPS) continue;
      double tokens = json_num(line, "rank_tokens"), waits = 0;
      const char *wait_keys[] = {"data_s", "dp_wait_s", "pp_wait_s", "tp_wait_s"};
      for (int k = 0; k < 4; k++) waits += json_num(line, wait_keys[k]);
      o->st[s][r] = (rank_step){.seen = true,
                                .tokens = tokens,
                                .rows = tokens / json_num(line, "seq_len"),
                                .busy_s = json_num(line, "step_time_s") - waits,
                                .end_s = json_num(line, "unix_s")};
      if (r == 0 && s >= 10 && s < ONSET) o->step_s[s - 10] = json_num(line, "step_time_s");
    }
    if (f) fclose(f);
  }
  o->tps_before = job_tps(o, 10, ONSET - 1);
  o->tps_during = job_tps(o, DURING, STEPS - 1);
  capacity_ideal(o);
}

/* Rank 0's metrics: the monitor's lines. */
static void read_monitor(const char *path, outcome *o) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  static char line[1 << 16];
  double ape = 0, raw = 0, gather[STEPS];
  int na = 0, ng = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "{\"failslow_step\":", 17)) continue;
    int s = (int)json_num(line, "failslow_step");
    if (s >= 10 && s < ONSET) {
      ape += json_num(line, "ape");
      raw += json_num(line, "ape_raw");
      na++;
    }
    if (s >= 10 && ng < STEPS) gather[ng++] = json_num(line, "gather_s");
    for (const char *v = strstr(line, "{\"rank\":"); v; v = strstr(v + 1, "{\"rank\":")) {
      int rank = (int)json_num(v, "rank");
      bool slow = strstr(v, "\"state\":\"slow\"") && strstr(v, "\"state\":\"slow\"") < strchr(v, '}');
      if (!slow) continue;
      if (rank == SLOW_RANK && s >= ONSET && o->detect_step < 0)
        o->detect_step = s;
      else if (rank != SLOW_RANK || s < ONSET)
        o->false_alarms++;
    }
  }
  fclose(f);
  o->mape = na ? raw / na : NAN;
  o->spread = na ? ape / na : NAN;
  int ns = ONSET - 10;
  if (ng) {
    bench_sort(gather, ng);
    bench_sort(o->step_s, ns);
    o->step_median = o->step_s[ns / 2];
    o->gather_share = gather[ng / 2] / o->step_median;
  }
}

/* The all-gather alone: four ranks in step, the record's size, over the
 * transport a job on one machine uses. */
static int gather_rank(int rank, int n, void *arg) {
  double *out = arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "fsg", rank, n, GT_COMM_AUTO, 60000);
  gt_step_telemetry mine = {.rank = rank}, all[4];
  enum { ROUNDS = 2000 };
  static double t[ROUNDS];
  for (int i = 0; i < 50; i++) CHECK_OK(gt_comm_allgather(c, &mine, all, sizeof mine / sizeof(float), GT_F32));
  for (int i = 0; i < ROUNDS; i++) {
    CHECK_OK(gt_comm_barrier(c));
    double t0 = gt_now();
    CHECK_OK(gt_comm_allgather(c, &mine, all, sizeof mine / sizeof(float), GT_F32));
    t[i] = gt_now() - t0;
  }
  bench_sort(t, ROUNDS);
  if (rank == 0) *out = t[ROUNDS / 2];
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static outcome run(const char *dir, const char *build, bool rebalance) {
  outcome o = {.detect_step = -1, .gather_share = NAN};
  char metrics[512], log[512], cmd[4096];
  /* Every rank's own file (giantrun's %r); rank 0's holds the monitor's lines too. */
  snprintf(metrics, sizeof metrics, "%s/m%d.%%r.jsonl", dir, rebalance);
  snprintf(log, sizeof log, "%s/log%d.txt", dir, rebalance);
  snprintf(
      cmd, sizeof cmd,
      "OMP_NUM_THREADS=1 GT_FAULT='slow:rank=%d,factor=2,from=%d' '%s/launch/giantrun' --standalone "
      "--nproc-per-node 4 --plan dp=4 '%s/examples/gpt' --data '%s/fortunes.tok' --steps %d --layers 2 "
      "--channels 64 --heads 4 --seq 64 --batch 8 --accum 2 --sample 0 --print-every 0 --failslow --failslow-clock cpu "
      "--metrics '%s'%s > '%s' 2>&1",
      SLOW_RANK, ONSET, build, build, dir, STEPS, metrics, rebalance ? " --rebalance" : "", log);
  int st = system(cmd);
  o.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (o.exit_code != 0) {
    FILE *f = fopen(log, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
      if (strstr(line, "rebalance") || strstr(line, "gpt:")) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(o.reason, sizeof o.reason, "%s", line);
        break;
      }
    if (f) fclose(f);
    if (!o.reason[0]) snprintf(o.reason, sizeof o.reason, "exit %d, see %s", o.exit_code, log);
    return o;
  }
  snprintf(metrics, sizeof metrics, "%s/m%d.0.jsonl", dir, rebalance);
  read_steps(dir, rebalance, &o); /* first: the monitor's figures use its clean steps */
  read_monitor(metrics, &o);
  return o;
}

int main(void) {
  char dir[] = "/tmp/giant-bench-failslow-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  const char *build = GIANT_BUILD_DIR;
  printf(
      "bench_failslow: examples/gpt, 4 ranks dp=4 on one machine, L=2 C=64 T=64 B=8x2, --failslow defaults;\n"
      "rank %d slowed x2 from step %d, %d steps; before: steps 10-%d, during: steps %d-%d.\n"
      "Throughput: the job's, every rank's tokens over the wall time of the steps. The ideal for the capacity left:\n"
      "each rank's rows per second of its busy wall time (its step less its waits; the ranks share the cores,\n"
      "and the slowed rank's sleep lends its core to the others), the global batch split in proportion to these,\n"
      "times the clean phase's busiest rank over its balance (the noise no split avoids), plus the rest of a step\n"
      "(its wall time less its busiest rank's busy time) as measured during.\n",
      SLOW_RANK, ONSET, STEPS, ONSET - 1, DURING, STEPS - 1);
  outcome a = run(dir, build, false);
  if (a.exit_code != 0) {
    printf("the run failed: %s\n", a.reason);
    return 1;
  }
  int delay = a.detect_step >= 0 ? a.detect_step - ONSET : -1;
  printf("detection: rank %d flagged at step %d, %d steps after onset; %d false alarm(s)\n", SLOW_RANK, a.detect_step,
         delay, a.false_alarms);
  printf(
      "predictor MAPE over steps 10-%d: %.4f (the job factor forecast from the steps before); spread among ranks "
      "%.4f (the same with the step's own job factor applied: not a forecast)\n",
      ONSET - 1, a.mape, a.spread);
  printf(
      "job throughput: %.0f tokens/s before, %.0f during (x%.2f) = %.3f of the ideal for the capacity left; rank "
      "speeds during %.0f %.0f %.0f %.0f rows/s\n",
      a.tps_before, a.tps_during, a.tps_during / a.tps_before, a.tps_during / a.ideal_tps, a.speed[0], a.speed[1],
      a.speed[2], a.speed[3]);
  printf("telemetry all-gather, as rank 0 waits in it: %.2f%% of a step (medians; mostly the ranks' skew)\n",
         100 * a.gather_share);
  double *shared = harness_shared(sizeof *shared), g = NAN;
  int codes[4];
  if (harness_run(4, gather_rank, shared, 120, codes) == 0) g = *shared;
  printf(
      "telemetry all-gather alone (4 ranks in step, %zu bytes each): %.1f us = %.2f%% of the median clean step (%.2f "
      "ms)\n",
      sizeof(gt_step_telemetry), g * 1e6, 100 * g / a.step_median, a.step_median * 1e3);
  outcome b = run(dir, build, true);
  double r = NAN, x = NAN;
  if (b.exit_code != 0) {
    printf("with --rebalance: not measured (%s)\n", b.reason);
  } else {
    r = b.tps_during / b.ideal_tps;
    x = b.tps_during / a.tps_during;
    printf(
        "with --rebalance: %.0f tokens/s before, %.0f during (x%.3f the run without); rank speeds during %.0f %.0f "
        "%.0f %.0f rows/s\n",
        b.tps_before, b.tps_during, x, b.speed[0], b.speed[1], b.speed[2], b.speed[3]);
    /* For comparison only: the ideal if every rank had a core of its own,
     * three at full speed and one at half. */
    printf(
        "  = %.3f of the ideal for the capacity left (%.0f tokens/s: a %.1f ms step, noise x%.3f); with a core a "
        "rank that ideal would be %.0f tokens/s\n",
        r, b.ideal_tps, 1e3 * b.ideal_step_s, b.jitter, b.tps_before * (3 + 1.0 / 2) / 4);
  }
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("failslow_detect_steps=%d false_alarms=%d mape=%.4f mitigated_ratio=%.3f vs_no_mitigation=%.3f\n", delay,
         a.false_alarms, a.mape, r, x);
  return 0;
}
