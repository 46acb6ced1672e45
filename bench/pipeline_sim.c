/* bench_pipeline_sim: pipeline schedules on a simulated clock. Nothing is
 * executed and nothing is timed: each schedule's step lists run through
 * gt_pp_simulate with equal stages (forward 1, backward 2 per rank, split
 * evenly over its chunks, no p2p delay). Measured pipelines come with the
 * executor.
 *
 * For p = 4 and m in {4, 8, 16}: GPipe, 1F1B and interleaved 1F1B (v = 2),
 * the simulated bubble (idle share of the makespan) next to the closed
 * forms, (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(v m + p - 1) for
 * interleaved (Megatron-LM's bubble-to-ideal ratio (p-1)/(v m)), and the
 * peak of micro-batches in flight on the first stage (for interleaved,
 * (micro-batch, chunk) pairs, each holding one chunk's activations; the
 * last column converts to whole micro-batches of the rank's activations).
 * The last line is machine-readable:
 *   pipeline_sim_p4_m8 gpipe=<bubble> 1f1b=<bubble> interleaved2=<bubble> peak_1f1b=<n> peak_gpipe=<n>
 */
#include <stdio.h>
#include <stdlib.h>

#include "giant/engine/pipeline.h"

static int run(gt_pp_kind kind, int p, int m, int v, gt_pp_sim_result *r) {
  gt_pp_schedule *s;
  double f[64], b[64];
  for (int i = 0; i < p * v; i++) {
    f[i] = 1.0 / v;
    b[i] = 2.0 / v;
  }
  if (gt_pp_schedule_build(kind, p, m, v, &s) || gt_pp_schedule_check(s) ||
      gt_pp_simulate(s, &(gt_pp_costs){.fwd = f, .bwd = b}, r)) {
    fprintf(stderr, "bench_pipeline_sim: %s\n", gt_last_error());
    gt_pp_schedule_free(s);
    return -1;
  }
  gt_pp_schedule_free(s);
  return 0;
}

int main(void) {
  const int p = 4, v = 2, ms[] = {4, 8, 16};
  double line[3] = {0};
  int peaks[2] = {0};
  printf("# simulated schedules: p=%d stages, forward 1 + backward 2 per rank per micro-batch, no p2p delay\n", p);
  printf("%-12s %3s %3s %10s %12s %10s %9s %14s %10s\n", "schedule", "m", "v", "makespan", "bubble(sim)", "theory",
         "sim/theo", "peak in flight", "as whole");
  for (int i = 0; i < 3; i++) {
    int m = ms[i];
    for (int k = 0; k < 3; k++) {
      int vv = k == GT_PP_INTERLEAVED ? v : 1;
      gt_pp_sim_result r;
      if (run((gt_pp_kind)k, p, m, vv, &r)) return 1;
      double theory = (double)(p - 1) / (vv * m + p - 1);
      printf("%-12s %3d %3d %10.3f %12.6f %10.6f %9.4f %14d %10.2f\n", gt_pp_name((gt_pp_kind)k), m, vv, r.makespan,
             r.bubble, theory, r.bubble / theory, r.peak_in_flight[0], (double)r.peak_in_flight[0] / vv);
      if (m == 8) {
        line[k] = r.bubble;
        if (k < 2) peaks[k] = r.peak_in_flight[0];
      }
      gt_pp_sim_free(&r);
    }
  }
  printf("pipeline_sim_p4_m8 gpipe=%.6f 1f1b=%.6f interleaved2=%.6f peak_1f1b=%d peak_gpipe=%d\n", line[0], line[1],
         line[2], peaks[1], peaks[0]);
  return 0;
}
