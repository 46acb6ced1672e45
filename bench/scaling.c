/* bench/scaling: tokens/s at the same global batch for
 *   one process x 2 threads   (the baseline)
 *   dp=2 x 1 thread           (two processes, half the batch each)
 *   tp=2 x 1 thread           (two processes, every layer split)
 * measured in one run, configurations interleaved round by round, with the
 * efficiency of each against the baseline. Ranks are forked on loopback.
 * Last line: scaling_dp2=<efficiency> scaling_tp2=<efficiency>. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_rank.h"
#include "localkit/ranks.h"
#include "giant/options.h"
#include "giant/engine/trainer.h"

enum { BASE, DP2, TP2, NCONF };
static const char *names[NCONF] = {"1 rank x 2 threads", "dp=2 x 1 thread", "tp=2 x 1 thread"};

typedef struct cfg {
  int L, C, NH, T, B, V, rounds, steps, conf;
  double seconds[NCONF], tokens[NCONF];
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
  CHECK_OK(gt_trainer_step_batches(tr, &b, 1, NULL)); /* warm up */
  double t0 = gt_now();
  for (int s = 0; s < c->steps; s++) CHECK_OK(gt_trainer_step_batches(tr, &b, 1, NULL));
  if (rank == 0) {
    c->seconds[c->conf] += gt_now() - t0;
    c->tokens[c->conf] += (double)c->steps * c->B * c->T; /* the global batch */
  }
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

int main(int argc, char **argv) {
  cfg *c = harness_shared(sizeof *c);
  *c = (cfg){.L = 4, .C = 256, .NH = 4, .T = 128, .B = 8, .V = 8192, .rounds = 3, .steps = 3};
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 1, 1000},      {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},      {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 2, 65536},      {"--vocab", GT_OPT_INT, &c->V, 2, 1 << 22},
      {"--rounds", GT_OPT_INT, &c->rounds, 1, 1000}, {"--steps", GT_OPT_INT, &c->steps, 1, 1000},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_scaling [--layers L --channels C --heads NH --seq T --batch B --vocab V]\n"
                        "                     [--rounds R --steps N]\n",
                        NULL);
  if (rc >= 0) return rc;
  printf("config: GPT L=%d C=%d NH=%d T=%d V=%d, global batch %d, AdamW; %d rounds x %d steps per layout\n", c->L, c->C,
         c->NH, c->T, c->V, c->B, c->rounds, c->steps);
  for (int r = 0; r < c->rounds; r++) {
    for (int k = 0; k < NCONF; k++) {
      c->conf = k;
      int codes[2];
      if (harness_run(k == BASE ? 1 : 2, rank_main, c, 1800, codes)) {
        fprintf(stderr, "bench_scaling: %s failed\n", names[k]);
        return 1;
      }
    }
  }
  double tps[NCONF];
  for (int k = 0; k < NCONF; k++) {
    tps[k] = c->tokens[k] / c->seconds[k];
    printf("%-20s %8.0f tokens/s  efficiency %.2f\n", names[k], tps[k], tps[k] / tps[BASE]);
  }
  printf("scaling_dp2=%.3f scaling_tp2=%.3f\n", tps[DP2] / tps[BASE], tps[TP2] / tps[BASE]);
  return 0;
}
