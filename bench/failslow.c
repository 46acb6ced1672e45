/* bench/failslow: fail-slow detection in a running job.
 *
 * examples/gpt on four ranks (giantrun --standalone, dp=4, one thread
 * each) with --failslow, rank 2 slowed x2 from step 30 (GT_FAULT). From
 * rank 0's metrics file: the detection delay (steps from onset to the
 * verdict), false alarms over the clean phase (verdicts before step 30, or
 * on another rank), the predictor's MAPE over the clean phase (steps 10 to
 * 29: the mean over ranks of |1 - predicted x job factor / observed|, the
 * step's job-wide factor applied; the raw figure, without it, is printed
 * too), throughput before (steps 10-29) and during (40 on), and the
 * telemetry all-gather's share of a step: rank 0's time in it as the
 * monitor reports it (which is mostly waiting for the last rank to end its
 * step, a skew the next collective would wait out anyway), and its own
 * cost, timed apart on four forked ranks already in step (the median of
 * 2000 all-gathers of the record), against the run's median step.
 *
 * The same run is made again with --rebalance (data-parallel shares moved
 * away from the slow rank, as giantrun's leading agent decides); where the
 * example refuses the flag, the mitigation figures are nan and the reason
 * is printed.
 * Last line: failslow_detect_steps=<d> false_alarms=<n> mape=<m>
 *            mitigated_ratio=<r> vs_no_mitigation=<x>
 * r: throughput during the slowdown with --rebalance over the ideal for
 * the capacity left (the same run's throughput before, times
 * (3 + 1/2) / 4: three ranks at full speed and one at half); x: throughput
 * during with --rebalance / without. */
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

enum { ONSET = 30, STEPS = 120, SLOW_RANK = 2 };

typedef struct outcome {
  int exit_code;
  int detect_step; /* first flag of SLOW_RANK at or after ONSET; -1: none */
  int false_alarms;
  double mape, mape_raw, tps_before, tps_during, gather_share, step_median;
  double step_s[STEPS];
  char reason[1024];
} outcome;

static double json_num(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(line, k);
  return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* Rank 0's metrics: step lines and the monitor's lines. */
static void read_metrics(const char *path, outcome *o) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  static char line[1 << 16];
  double tb = 0, td = 0, ape = 0, raw = 0, gather[STEPS];
  int nb = 0, nd = 0, na = 0, ng = 0, ns = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "{\"step\":", 8)) {
      int s = (int)json_num(line, "step");
      double tps = json_num(line, "tokens_per_s");
      if (s >= 10 && s < ONSET) {
        tb += tps;
        nb++;
      }
      if (s >= ONSET + 10) {
        td += tps;
        nd++;
      }
      if (s >= 10 && s < ONSET) o->step_s[ns++] = json_num(line, "step_time_s");
      continue;
    }
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
  o->tps_before = nb ? tb / nb : NAN;
  o->tps_during = nd ? td / nd : NAN;
  o->mape = na ? ape / na : NAN;
  o->mape_raw = na ? raw / na : NAN;
  if (ng && ns) {
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
  snprintf(metrics, sizeof metrics, "%s/m%d.jsonl", dir, rebalance);
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
  read_metrics(metrics, &o);
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
      "rank %d slowed x2 from step %d, %d steps\n",
      SLOW_RANK, ONSET, STEPS);
  outcome a = run(dir, build, false);
  if (a.exit_code != 0) {
    printf("the run failed: %s\n", a.reason);
    return 1;
  }
  int delay = a.detect_step >= 0 ? a.detect_step - ONSET : -1;
  printf("detection: rank %d flagged at step %d, %d steps after onset; %d false alarm(s)\n", SLOW_RANK, a.detect_step,
         delay, a.false_alarms);
  printf("predictor MAPE over steps 10-%d: %.4f with the step's job-wide factor applied, %.4f raw\n", ONSET - 1, a.mape,
         a.mape_raw);
  printf("throughput: %.0f tokens/s before, %.0f during (x%.2f)\n", a.tps_before, a.tps_during,
         a.tps_during / a.tps_before);
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
    double capacity = (3 + 1.0 / 2) / 4; /* four replicas, one at half speed */
    r = b.tps_during / (b.tps_before * capacity);
    x = b.tps_during / a.tps_during;
    printf(
        "with --rebalance: %.0f tokens/s before, %.0f during = %.3f of the ideal for the capacity left "
        "(%.0f tokens/s)\n",
        b.tps_before, b.tps_during, r, b.tps_before * capacity);
  }
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("failslow_detect_steps=%d false_alarms=%d mape=%.4f mitigated_ratio=%.3f vs_no_mitigation=%.3f\n", delay,
         a.false_alarms, a.mape, r, x);
  return 0;
}
