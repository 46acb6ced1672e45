/* bench/dp_overlap: how much of the gradient all-reduce backward hides.
 *
 * Two data-parallel ranks (one thread each, forked on loopback) train GPT
 * and alternate, round by round, between overlapping the bucketed
 * all-reduce with backward and holding every bucket back until backward
 * ends. From the timestamps the trainer's gradient sync records:
 *   exposed = time spent waiting for gradients after backward ended
 *   comm    = that wait when nothing overlaps (all of the communication)
 *   hidden  = 1 - exposed(overlap on) / comm(overlap off)
 * (With overlap on, the communication also slows the backward it shares
 * the two cores with, which the step times show.)
 * and the step times with overlap on and off, measured in the same run.
 * With --zero1 the gradients are reduce-scattered (each bucket reduced to
 * the rank whose shard holds it) instead of all-reduced.
 * Last line: dp_overlap_hidden=<fraction> speedup=<off/on step time>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_rank.h"
#include "localkit/ranks.h"
#include "parallel/dp_sync.h"
#include "giant/options.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"

typedef struct cfg {
  int L, C, NH, T, B, V, rounds, steps, bucket_kib;
  bool zero1;
  double results[2][3]; /* [overlap off, on] x {step s, exposed s, samples} */
} cfg;

static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  gpt_config gc = {.vocab_size = c->V, .T_max = c->T, .C = c->C, .NH = c->NH, .L = c->L, .tie_weights = true};
  bench_rank r;
  bench_rank_setup(&r, rank, world,
                   &(bench_rank_config){.layout = "dp=2",
                                        .threads = 1,
                                        .gpt = gc,
                                        .B = 2 * c->B,
                                        .bucket_bytes = (size_t)c->bucket_kib << 10,
                                        .zero1 = c->zero1});
  gt_trainer *tr = r.tr;
  int32_t *tok = bench_tokens((size_t)c->B * c->T + 1, c->V, 97u * (unsigned)rank);
  gt_batch b = {.B = c->B, .T = c->T, .inputs = tok, .targets = tok + 1};
  CHECK_OK(gt_trainer_step_batches(tr, &b, 1, NULL)); /* warm up */
  for (int r = 0; r < c->rounds; r++) {
    for (int k = 0; k < 2; k++) {
      gt_trainer_set_overlap(tr, k == 1);
      for (int s = 0; s < c->steps; s++) {
        gt_step_stats st;
        CHECK_OK(gt_trainer_step_batches(tr, &b, 1, &st));
        const gt_dp_sync_stats *ds = gt_dp_sync_last(gt_trainer_dp_sync(tr));
        if (rank == 0) {
          c->results[k][0] += st.seconds;
          c->results[k][1] += ds->wait_seconds;
          c->results[k][2] += 1;
        }
      }
    }
  }
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

int main(int argc, char **argv) {
  cfg defaults = {.L = 4, .C = 256, .NH = 4, .T = 128, .B = 4, .V = 8192, .rounds = 3, .steps = 3, .bucket_kib = 1024};
  cfg *c = harness_shared(sizeof *c);
  *c = defaults;
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 1, 1000},
      {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},
      {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 1, 65536},
      {"--vocab", GT_OPT_INT, &c->V, 2, 1 << 22},
      {"--rounds", GT_OPT_INT, &c->rounds, 1, 1000},
      {"--steps", GT_OPT_INT, &c->steps, 1, 1000},
      {"--bucket-kib", GT_OPT_INT, &c->bucket_kib, 1, 1 << 20},
      {"--zero1", GT_OPT_FLAG, &c->zero1, 0, 0},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_dp_overlap [--layers L --channels C --heads NH --seq T --batch B --vocab V]\n"
                        "                        [--rounds R --steps N --bucket-kib K --zero1]\n",
                        NULL);
  if (rc >= 0) return rc;
  printf(
      "config: dp=2 (2 processes x 1 thread, loopback), GPT L=%d C=%d NH=%d T=%d V=%d, B=%d per rank, "
      "AdamW, buckets %d KiB, %s, %d rounds x %d steps per mode\n",
      c->L, c->C, c->NH, c->T, c->V, c->B, c->bucket_kib, c->zero1 ? "ZeRO-1 (bucketed reduce-scatter)" : "all-reduce",
      c->rounds, c->steps);
  int codes[2];
  if (harness_run(2, rank_main, c, 1800, codes)) {
    fprintf(stderr, "bench_dp_overlap: a rank failed (codes %d %d)\n", codes[0], codes[1]);
    return 1;
  }
  double step[2], exposed[2];
  for (int k = 0; k < 2; k++) {
    double nn = c->results[k][2];
    step[k] = c->results[k][0] / nn;
    exposed[k] = c->results[k][1] / nn;
  }
  double hidden = exposed[0] > 0 ? 1.0 - exposed[1] / exposed[0] : 0;
  printf("overlap off: %.1f ms/step, gradient all-reduce %.1f ms, all of it after backward\n", step[0] * 1e3,
         exposed[0] * 1e3);
  printf("overlap on:  %.1f ms/step, %.1f ms of all-reduce left after backward\n", step[1] * 1e3, exposed[1] * 1e3);
  printf("hidden behind backward: %.0f%%, step time off/on: %.3f\n", 100 * hidden, step[0] / step[1]);
  printf("dp_overlap_hidden=%.3f speedup=%.3f\n", hidden, step[0] / step[1]);
  return 0;
}
