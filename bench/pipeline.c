/* bench/pipeline: the measured bubble of pipeline schedules against the
 * theoretical (p-1)/(m+p-1), and the planner's predicted step time against
 * the measured one.
 *
 * p = 2 pipeline ranks (one process and one thread each, so the two cores
 * are not oversubscribed and a waiting rank is really idle) train GPT with
 * GPipe and 1F1B at m = 4, 8 and 16 micro-batches, its layers cut into
 * stages by the planner. A rank's bubble is the
 * share of the pipeline run it spent not computing (waiting for the other
 * stage, or for its own transfers); the figure is the mean over ranks. The
 * run is the schedule itself, from its first step to its last transfer:
 * what follows it in a step (the loss's broadcast, the tied embedding's
 * gradient sum, the update) is in "step ms", not in the bubble.
 *
 * The theory assumes equal stages. These are not: the first stage holds the
 * embedding and three blocks, the last one block, the tied LM head over
 * V = 4096 and the loss, and the planner's cut at layer granularity is the
 * best there is. "stages" is the bubble the schedule has on a clock with
 * the forward and backward times each stage measured here and transfers
 * that take no time (gt_pp_simulate): stages - theory is the share of the
 * imbalance, bubble - stages that of the transfers and the executor's
 * overhead (and, on shared cores, of other processes' load). The last
 * stage's fastest forward and backward of a micro-batch take 6-11% longer
 * than the first's; for p = 2 the bubble of stage times t0 < t1 is
 * 1 - m (t0 + t1) / (2 (t0 + m t1)), so at 1F1B m = 8 that imbalance alone
 * adds 0.02-0.035 to the theory's 0.111. Under load the measured stage
 * times swing from run to run with what the cores give each process.
 * The cost model predicts the step from layer FLOPs and a speed calibrated
 * on one single-rank step of the same model, measured in the same run.
 * Last line: pipeline_bubble_1f1b_m8=<measured> theory=<(p-1)/(m+p-1)>. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_rank.h"
#include "localkit/ranks.h"
#include "giant/engine/grid.h"
#include "giant/options.h"
#include "giant/engine/plan.h"
#include "parallel/planner.h"
#include "parallel/pp_exec.h"
#include "gpt.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/trainer.h"
#include "giant/group.h"
#include "optim/trainer/trainer_engine.h"

typedef struct cfg {
  int L, C, NH, T, B, V, steps;
  gt_pp_kind kind;
  int m;
  double run[2], busy[2], fwd[2], bwd[2], step, predicted;
} cfg;

static gpt_config gpt_of(const cfg *c) {
  return (gpt_config){.vocab_size = c->V, .T_max = c->T, .C = c->C, .NH = c->NH, .L = c->L, .tie_weights = true};
}

static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  bench_rank r; /* the planner cuts the stages: the cut the cost model assumes */
  bench_rank_setup(&r, rank, world,
                   &(bench_rank_config){.layout = "pp=2",
                                        .threads = 1,
                                        .gpt = gpt_of(c),
                                        .B = c->B,
                                        .micro_batches = c->m,
                                        .schedule = c->kind,
                                        .cut_stages = true});
  int32_t *tok = bench_tokens((size_t)c->B * c->T + 1, c->V, 0);
  gt_batch *b = calloc((size_t)c->m, sizeof *b);
  for (int k = 0; k < c->m; k++) b[k] = (gt_batch){.B = c->B, .T = c->T, .inputs = tok, .targets = tok + 1};
  CHECK_OK(gt_trainer_step_batches(r.tr, b, c->m, NULL)); /* warm up */
  double run = 0, busy = 0, fwd = 0, bwd = 0, t0 = gt_now();
  for (int s = 0; s < c->steps; s++) {
    CHECK_OK(gt_trainer_step_batches(r.tr, b, c->m, NULL));
    double rs, us, fs, bs;
    gt_pp_exec_timing(gt_trainer_pp_exec(r.tr), &rs, &us);
    gt_pp_exec_busy_split(gt_trainer_pp_exec(r.tr), &fs, &bs);
    run += rs;
    busy += us;
    fwd += fs;
    bwd += bs;
  }
  c->run[rank] = run;
  c->busy[rank] = busy;
  c->fwd[rank] = fwd / ((double)c->m * c->steps); /* per micro-batch */
  c->bwd[rank] = bwd / ((double)c->m * c->steps);
  if (rank == 0) c->step = (gt_now() - t0) / c->steps;
  free(b);
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

/* One process: time a training step of the same model, and what the cost
 * model predicts for the pipeline from that calibration. */
static int calibrate(int rank, int world, void *arg) {
  cfg *c = arg;
  bench_rank r;
  gpt_config gc = gpt_of(c);
  bench_rank_setup(&r, rank, world, &(bench_rank_config){.threads = 1, .gpt = gc, .B = c->B});
  int32_t *tok = bench_tokens((size_t)c->B * c->T + 1, c->V, 0);
  gt_batch b = {.B = c->B, .T = c->T, .inputs = tok, .targets = tok + 1};
  CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL));
  double t0 = gt_now();
  for (int s = 0; s < 3; s++) CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL));
  double one = (gt_now() - t0) / 3; /* seconds per micro-batch, forward + backward + update */
  gt_planner_layer *layers;
  int nl;
  CHECK_OK(gt_planner_layers_from_model(r.m, c->B, c->T, &layers, &nl));
  double flops = 3.0 * gt_model_flops(r.m, c->B, c->T);
  gt_planner_hw hw = {.world = 2,
                      .peak_flops = flops / one,
                      .p2p_bandwidth = 2e9,
                      .p2p_latency = 50e-6,
                      .ar_bandwidth = 2e9,
                      .ar_latency = 50e-6,
                      .dp_overlap = 0.5};
  gt_planner_job job = {.layers = layers, .nlayers = nl, .micro_batches = c->m, .schedule = c->kind, .chunks = 1};
  gt_planner_result est;
  CHECK_OK(gt_planner_estimate(&hw, &job, (gt_grid_layout){1, 1, 2}, NULL, &est));
  c->predicted = est.step_seconds;
  free(layers);
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

/* The bubble of the schedule on a clock with the stage times measured in
 * the run and transfers that take no time. */
static double stages_bubble(const cfg *c) {
  gt_pp_schedule *s;
  CHECK_OK(gt_pp_schedule_build(c->kind, 2, c->m, 1, &s));
  gt_pp_sim_result sim;
  CHECK_OK(gt_pp_simulate(s, &(gt_pp_costs){.fwd = c->fwd, .bwd = c->bwd}, &sim));
  double bubble = sim.bubble;
  gt_pp_sim_free(&sim);
  gt_pp_schedule_free(s);
  return bubble;
}

int main(int argc, char **argv) {
  cfg *c = harness_shared(sizeof *c);
  *c = (cfg){.L = 4, .C = 128, .NH = 4, .T = 64, .B = 2, .V = 4096, .steps = 3};
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 2, 1000},    {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},    {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 1, 65536},    {"--vocab", GT_OPT_INT, &c->V, 2, 1 << 22},
      {"--steps", GT_OPT_INT, &c->steps, 1, 1000},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_pipeline [--layers L --channels C --heads NH --seq T --batch B --vocab V "
                        "--steps N]\n",
                        NULL);
  if (rc >= 0) return rc;
  printf(
      "config: pp=2 (2 processes x 1 thread, loopback), GPT L=%d C=%d NH=%d T=%d V=%d, micro-batch %d rows, "
      "%d steps per point\n",
      c->L, c->C, c->NH, c->T, c->V, c->B, c->steps);
  printf("%-6s %4s %10s %10s %10s %12s %12s\n", "sched", "m", "bubble", "stages", "theory", "step ms", "predicted ms");
  double last = 0, last_stages = 0;
  const int ms[3] = {4, 8, 16};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 3; i++) {
      c->kind = k ? GT_PP_1F1B : GT_PP_GPIPE;
      c->m = ms[i];
      int codes[2];
      if (harness_run(1, calibrate, c, 600, codes) || harness_run(2, rank_main, c, 1800, codes)) {
        fprintf(stderr, "bench_pipeline: a run failed\n");
        return 1;
      }
      double bubble = 0;
      for (int r = 0; r < 2; r++) bubble += 0.5 * (1.0 - c->busy[r] / c->run[r]);
      double theory = 1.0 / (c->m + 1.0), stages = stages_bubble(c);
      printf("%-6s %4d %10.3f %10.3f %10.3f %12.1f %12.1f\n", gt_pp_name(c->kind), c->m, bubble, stages, theory,
             c->step * 1e3, c->predicted * 1e3);
      if (c->kind == GT_PP_1F1B && c->m == 8) {
        last = bubble;
        last_stages = stages;
        printf("  1f1b m=8 stage times per micro-batch: first %.2f+%.2f ms, last %.2f+%.2f ms (fwd+bwd)\n",
               c->fwd[0] * 1e3, c->bwd[0] * 1e3, c->fwd[1] * 1e3, c->bwd[1] * 1e3);
      }
    }
  }
  printf("1f1b m=8: bubble %.3f = theory %.3f + stage imbalance %.3f + transfers and overhead %.3f\n", last, 1.0 / 9.0,
         last_stages - 1.0 / 9.0, last - last_stages);
  printf("pipeline_bubble_1f1b_m8=%.3f theory=%.3f\n", last, 1.0 / 9.0);
  return 0;
}
