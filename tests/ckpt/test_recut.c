/* Re-cutting pipeline stages on the fly (gt_trainer_move_state): after 6
 * of 12 steps at pp=2 and at dp=2,pp=2, the model is cut again for a
 * second stage at 0.3 of the first's speed, so layers move from stage 1 to
 * stage 0 with their AdamW moments, through the pipeline communicator, and
 * training goes on in the new model. Every layer computes as before; only
 * the gradient norm's sum over the stages is associated differently (each
 * stage adds its own layers' squares first), which moves the clipping
 * factor in its last bits when clipping is on. So the parameters, both
 * moments and every loss match a run that kept the first cut within the
 * hybrid tests' 1e-5 (relative), and bit for bit where that sum came out
 * the same. Offloaded (a window of one layer), the state moves in host
 * memory, and the slots of the layers that arrive are fetched anew. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "localkit/ranks.h"

enum { STEPS = 12, RECUT = 6 };

static void recut_case(const char *plan, int world, int window) {
  static const double speed[2] = {0.3, 1.0};
  char dir[4200];
  snprintf(dir, sizeof dir, "%s.recut", cr_fx.data);
  cr_state kept = cr_state_new(cr_fx.layout), recut = cr_state_new(cr_fx.layout);
  cr_cfg a = {.layout = plan, .data = cr_fx.data, .dir = dir, .s1 = STEPS, .final = kept, .offload_window = window};
  cr_run(world, &a);
  int *moved = harness_shared(sizeof(int));
  cr_cfg b = {.layout = plan,
              .data = cr_fx.data,
              .dir = dir,
              .s1 = STEPS,
              .final = recut,
              .recut_at = RECUT,
              .recut_speed = speed,
              .moved = moved,
              .offload_window = window};
  cr_run(world, &b);
  /* The largest difference in each buffer, relative to its largest value
   * (AdamW's second moments run to 1e-10 and less, where a relative
   * difference per element says nothing). */
  double worst = 0;
  const train_result *x[3] = {kept.p, kept.m, kept.v}, *y[3] = {recut.p, recut.m, recut.v};
  for (int k = 0; k < 3; k++) {
    double top = 0, diff = 0;
    for (size_t i = 0; i < cr_fx.layout->nparams; i++) {
      top = fmax(top, fabs((double)x[k]->params[i]));
      diff = fmax(diff, fabs((double)x[k]->params[i] - y[k]->params[i]));
    }
    worst = fmax(worst, diff / top);
  }
  double worst_loss = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs((double)kept.p->losses[s] - recut.p->losses[s]) / fabs((double)kept.p->losses[s]);
    worst_loss = d > worst_loss ? d : worst_loss;
  }
  print_message(
      "%s%s: re-cut before step %d moved %d layer(s); state within %.2e, losses within %.2e of the kept "
      "cut's\n",
      plan, window ? ", offloaded" : "", RECUT, *moved, worst, worst_loss);
  assert_true(*moved >= 1);
  assert_true(worst <= 1e-5);
  assert_true(worst_loss <= 1e-5);
  for (int s = 0; s < RECUT; s++) assert_memory_equal(&kept.p->losses[s], &recut.p->losses[s], sizeof(float));
  cr_rmtree(dir);
}

static void test_recut_pp2(void **state) {
  (void)state;
  recut_case("pp=2", 2, 0);
}
static void test_recut_dp2_pp2(void **state) {
  (void)state;
  recut_case("dp=2,pp=2", 4, 0);
}
static void test_recut_pp2_offloaded(void **state) {
  (void)state;
  recut_case("pp=2", 2, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_recut_pp2), cmocka_unit_test(test_recut_dp2_pp2),
                                     cmocka_unit_test(test_recut_pp2_offloaded)};
  return cmocka_run_group_tests(tests, cr_fixture_setup, cr_fixture_teardown);
}
