/* bench/scaling: tokens/s at the same global batch for
 *   one process x 2 threads   (the baseline)
 *   dp=2 x 1 thread           (two processes, half the batch each)
 *   tp=2 x 1 thread           (two processes, every layer split)
 * measured in one run, configurations interleaved round by round, with the
 * efficiency of each against the baseline. Ranks are forked on loopback.
 *
 * dp=2 is also measured against PyTorch DistributedDataParallel on Gloo,
 * two processes x 1 thread (bench/scaling_ddp.py): the same model from
 * Giant's initial weights, the same global batch, AdamW and clipping. Its
 * losses over the first steps must agree with Giant's dp=2 before any
 * timing; DDP's bucket settings are tried and the fastest kept; its steps
 * are timed in every round, after Giant's.
 * Last line: scaling_dp2=<efficiency> scaling_tp2=<efficiency>
 * vs_ddp=<DDP ms/step over Giant dp=2 ms/step> (nan without torch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ddp.h"
#include "bench_rank.h"
#include "bench_stats.h"
#include "bench_torch.h"
#include "localkit/ranks.h"
#include "giant/options.h"
#include "giant/engine/trainer.h"

enum { BASE, DP2, TP2, NCONF };
static const char *names[NCONF] = {"1 rank x 2 threads", "dp=2 x 1 thread", "tp=2 x 1 thread"};

enum { MAX_ROUNDS = 100, MAX_CHECK = 8 };

typedef struct cfg {
  int L, C, NH, T, B, V, rounds, steps, conf, round, check;
  bool no_ddp;
  double seconds[NCONF], tokens[NCONF];
  double dp2_ms[MAX_ROUNDS]; /* Giant dp=2, ms/step per round */
  /* The loss check (check > 0): rank 0 exports the initial weights and
   * the tokens to dir, then records the first steps' losses. */
  char dir[64];
  float losses[MAX_CHECK];
} cfg;

static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  gpt_config gc = {.vocab_size = c->V, .T_max = c->T, .C = c->C, .NH = c->NH, .L = c->L, .tie_weights = true};
  static const char *layouts[NCONF] = {NULL, "dp=2", "tp=2"};
  bench_rank r;
  bench_rank_setup(
      &r, rank, world,
      &(bench_rank_config){.layout = layouts[c->conf], .threads = c->conf == BASE ? 2 : 1, .gpt = gc, .B = c->B});
  gt_trainer *tr = r.tr;
  int rows = r.rows;
  int32_t *tok = bench_tokens((size_t)c->B * c->T + 1, c->V, 0);
  int row0 = c->conf == DP2 ? rank * rows : 0;
  gt_batch b = {.B = rows, .T = c->T, .inputs = tok + row0 * c->T, .targets = tok + row0 * c->T + 1};
  if (c->check) {
    if (rank == 0) CHECK_OK(bench_torch_export(r.m, tok, (size_t)c->B * c->T + 1, c->dir));
    for (int s = 0; s < c->check; s++) {
      gt_step_stats st;
      CHECK_OK(gt_trainer_step_batches(tr, &b, 1, &st));
      if (rank == 0) c->losses[s] = st.loss; /* the global batch's loss */
    }
    free(tok);
    bench_rank_teardown(&r);
    return RANK_OK;
  }
  CHECK_OK(gt_trainer_step_batches(tr, &b, 1, NULL)); /* warm up */
  double t0 = gt_now();
  for (int s = 0; s < c->steps; s++) CHECK_OK(gt_trainer_step_batches(tr, &b, 1, NULL));
  if (rank == 0) {
    c->seconds[c->conf] += gt_now() - t0;
    c->tokens[c->conf] += (double)c->steps * c->B * c->T; /* the global batch */
    if (c->conf == DP2) c->dp2_ms[c->round] = (gt_now() - t0) / c->steps * 1e3;
  }
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

/* Giant's dp=2 losses from its initial weights, exported for DDP, which
 * must reach the same losses; then DDP's settings are tried. Torch
 * missing: Giant alone (0, *out NULL). Losses that disagree: 3. */
static int start_ddp(cfg *c, bench_ddp **out) {
  *out = NULL;
  snprintf(c->dir, sizeof c->dir, "/tmp/giant-scaling-XXXXXX");
  if (!mkdtemp(c->dir)) {
    perror("bench_scaling: mkdtemp");
    return 1;
  }
  c->conf = DP2;
  int codes[2], rc = 0;
  if (harness_run(2, rank_main, c, 1800, codes)) {
    fprintf(stderr, "bench_scaling: the dp=2 loss check failed\n");
    rc = 1;
  }
  bench_ddp *d = NULL;
  if (!rc &&
      bench_ddp_start(c->dir, &(bench_torch_shape){.B = c->B, .T = c->T, .V = c->V, .C = c->C, .NH = c->NH, .L = c->L},
                      2, &d) != GT_OK)
    printf("pytorch DDP: not available (%s); Giant alone\n", gt_last_error());
  float tl[MAX_CHECK];
  if (d && bench_ddp_losses(d, c->check, tl) != GT_OK) {
    fprintf(stderr, "bench_scaling: DDP losses: %s\n", gt_last_error());
    rc = 1;
  }
  /* fp32 on both sides: the same arithmetic up to summation order. */
  const double tol = 1e-4;
  double worst = 0;
  for (int i = 0; d && !rc && i < c->check; i++) {
    double rel = fabs((double)c->losses[i] - tl[i]) / fabs((double)tl[i]);
    if (!(rel <= worst)) worst = rel; /* NaN counts as the worst */
    printf("check step %d: giant dp=2 loss %.6f, pytorch DDP loss %.6f\n", i, c->losses[i], tl[i]);
  }
  if (d && !rc) {
    printf("losses over %d steps from identical weights: max relative difference %.2e (%s %.0e)\n", c->check, worst,
           worst <= tol ? "agree within" : "DISAGREE beyond", tol);
    if (!(worst <= tol)) {
      fprintf(stderr, "bench_scaling: Giant dp=2 and PyTorch DDP disagree: the comparison means nothing\n");
      rc = 3;
    }
  }
  char best[160];
  if (d && !rc) {
    if (bench_ddp_tune(d, c->steps, best, sizeof best) == GT_OK)
      printf("pytorch DDP: gloo, 2 processes x torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1, %s (fastest)\n", best);
    else {
      fprintf(stderr, "bench_scaling: DDP settings: %s\n", gt_last_error());
      rc = 1;
    }
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", c->dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", c->dir);
  if (rc) {
    bench_ddp_stop(d);
    return rc;
  }
  *out = d;
  return 0;
}

int main(int argc, char **argv) {
  cfg *c = harness_shared(sizeof *c);
  *c = (cfg){.L = 4, .C = 256, .NH = 4, .T = 128, .B = 8, .V = 8192, .rounds = 3, .steps = 3, .check = 3};
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 1, 1000},
      {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},
      {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 2, 65536},
      {"--vocab", GT_OPT_INT, &c->V, 2, 1 << 22},
      {"--rounds", GT_OPT_INT, &c->rounds, 1, MAX_ROUNDS},
      {"--steps", GT_OPT_INT, &c->steps, 1, 1000},
      {"--check-steps", GT_OPT_INT, &c->check, 1, MAX_CHECK},
      {"--no-ddp", GT_OPT_FLAG, &c->no_ddp, 0, 0},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_scaling [--layers L --channels C --heads NH --seq T --batch B --vocab V]\n"
                        "                     [--rounds R --steps N --check-steps K --no-ddp]\n",
                        NULL);
  if (rc >= 0) return rc;
  printf("config: GPT L=%d C=%d NH=%d T=%d V=%d, global batch %d, AdamW; %d rounds x %d steps per layout\n", c->L, c->C,
         c->NH, c->T, c->V, c->B, c->rounds, c->steps);
  bench_ddp *ddp = NULL;
  int rc2 = c->no_ddp ? 0 : start_ddp(c, &ddp);
  if (rc2) return rc2;
  c->check = 0;
  double ddp_ms[MAX_ROUNDS];
  for (int r = 0; r < c->rounds; r++) {
    c->round = r;
    for (int k = 0; k < NCONF; k++) {
      c->conf = k;
      int codes[2];
      if (harness_run(k == BASE ? 1 : 2, rank_main, c, 1800, codes)) {
        fprintf(stderr, "bench_scaling: %s failed\n", names[k]);
        return 1;
      }
    }
    if (ddp && bench_ddp_time(ddp, c->steps, &ddp_ms[r]) != GT_OK) {
      fprintf(stderr, "bench_scaling: DDP timing: %s\n", gt_last_error());
      return 1;
    }
    printf("round %d: giant dp=2 %.1f ms/step", r, c->dp2_ms[r]);
    if (ddp) printf(" | ddp %.1f ms/step", ddp_ms[r]);
    printf("\n");
  }
  double tps[NCONF];
  for (int k = 0; k < NCONF; k++) {
    tps[k] = c->tokens[k] / c->seconds[k];
    printf("%-20s %8.0f tokens/s  efficiency %.2f\n", names[k], tps[k], tps[k] / tps[BASE]);
  }
  double vs_ddp = NAN;
  if (ddp) {
    double g = bench_median(c->dp2_ms, c->rounds), d = bench_median(ddp_ms, c->rounds);
    vs_ddp = d / g;
    printf("giant dp=2: %.1f ms/step, pytorch DDP: %.1f ms/step (median of %d rounds x %d steps)\n", g, d, c->rounds,
           c->steps);
  }
  bench_ddp_stop(ddp);
  printf("scaling_dp2=%.3f scaling_tp2=%.3f vs_ddp=%.3f\n", tps[DP2] / tps[BASE], tps[TP2] / tps[BASE], vs_ddp);
  return 0;
}
