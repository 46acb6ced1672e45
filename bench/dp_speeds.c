/* bench/dp_speeds: data parallelism on ranks of unequal speed.
 *
 * Two data-parallel ranks (one thread each) where rank 1 is made half as
 * fast: it is pinned to core 1 together with a process that only spins,
 * while rank 0 has core 0 to itself. Each step trains the same global batch
 * of 8 rows either split evenly (4 + 4) or as the planner sizes it for
 * speeds 1.0 and 0.5 (gt_planner_batch_split: 5 + 3), alternating round by
 * round, and the step times are compared. Needs 2 cores.
 * Last line: dp_speeds_even_ms=<x> planned_ms=<y> speedup=<x/y>. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_stats.h"
#include "bench_rank.h"
#include "localkit/ranks.h"
#include "giant/engine/plan.h"
#include "parallel/planner.h"
#include "gpt.h"
#include "giant/engine/trainer.h"

enum { GLOBAL_ROWS = 8, STEPS = 3 };

typedef struct cfg {
  int share0; /* rows of rank 0; rank 1 takes the rest */
  double step_ms;
} cfg;

static void pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  pin(rank);
  int rows = rank == 0 ? c->share0 : GLOBAL_ROWS - c->share0, row0 = rank == 0 ? 0 : c->share0;
  gpt_config gc = {.vocab_size = 4096, .T_max = 128, .C = 128, .NH = 4, .L = 4, .tie_weights = true};
  bench_rank r;
  bench_rank_setup(&r, rank, world, &(bench_rank_config){.layout = "dp=2", .threads = 1, .gpt = gc, .rows = rows});
  int32_t *tok = bench_tokens(GLOBAL_ROWS * 128 + 1, 4096, 0);
  gt_batch b = {.B = rows, .T = 128, .inputs = tok + row0 * 128, .targets = tok + row0 * 128 + 1};
  CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL));
  double t0 = gt_now();
  for (int s = 0; s < STEPS; s++) CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL));
  if (rank == 0) c->step_ms = (gt_now() - t0) / STEPS * 1e3;
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

int main(void) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    fprintf(stderr, "bench_dp_speeds needs 2 cores\n");
    return 1;
  }
  int share[2];
  const double speeds[2] = {1.0, 0.5};
  if (gt_planner_batch_split(GLOBAL_ROWS, 2, speeds, share) != GT_OK) return 1;
  printf(
      "config: dp=2, GPT L=4 C=128 NH=4 T=128 V=4096, global batch %d rows; rank 1 shares its core with a "
      "spinning process (half speed); planner split for speeds 1.0/0.5: %d + %d rows\n",
      GLOBAL_ROWS, share[0], share[1]);
  pid_t hog = fork();
  if (hog == 0) {
    pin(1);
    for (volatile unsigned long x = 0;; x++) {}
  }
  cfg *c = harness_shared(sizeof *c);
  double even[3], planned[3];
  for (int r = 0; r < 3; r++) {
    for (int k = 0; k < 2; k++) {
      c->share0 = k ? share[0] : GLOBAL_ROWS / 2;
      int codes[2];
      if (harness_run(2, rank_main, c, 600, codes)) {
        kill(hog, SIGKILL);
        waitpid(hog, NULL, 0);
        fprintf(stderr, "bench_dp_speeds: a rank failed\n");
        return 1;
      }
      (k ? planned : even)[r] = c->step_ms;
    }
    printf("round %d: even %.1f ms/step, planned %.1f ms/step\n", r, even[r], planned[r]);
  }
  kill(hog, SIGKILL);
  waitpid(hog, NULL, 0);
  bench_sort(even, 3);
  bench_sort(planned, 3);
  printf("dp_speeds_even_ms=%.1f planned_ms=%.1f speedup=%.3f\n", even[1], planned[1], even[1] / planned[1]);
  return 0;
}
