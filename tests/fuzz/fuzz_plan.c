/* Fuzz target: the layout text of a plan ("dp=2,tp=2", "auto"), through
 * gt_plan_parse and gt_plan_resolve at a few world sizes, ranks and
 * schedules. A layout that is accepted must make the world. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "giant/engine/plan.h"
#include "giant/engine/pipeline.h"
#include "giant/group.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  return 0;
}

/* An accepted layout that does not make the world is a parser bug. */
static void check_layout(const gt_grid_layout *l, int world) {
  if (l->dp < 1 || l->tp < 1 || l->pp < 1) abort();
  if ((long long)l->dp * l->tp * l->pp != world) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  static const int worlds[] = {1, 2, 4, 6, 8, 12, 64, 1 << 20};
  static const gt_pp_kind schedules[] = {GT_PP_GPIPE, GT_PP_1F1B, GT_PP_INTERLEAVED};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    int world = worlds[i];
    gt_grid_layout parsed;
    bool automatic = false;
    /* gt_plan_parse fills dp only when the text leaves it out: a text
     * that names all three factors may disagree with the world. */
    if (gt_plan_parse(text, world, &parsed, &automatic) == GT_OK && !automatic &&
        (parsed.dp < 1 || parsed.tp < 1 || parsed.pp < 1))
      abort();
    gt_plan_config cfg = {.world = world,
                          .rank = (int)(i * 7 % (size_t)world),
                          .layout = text,
                          .schedule = schedules[i % 3],
                          .seq_parallel = i % 2 == 1};
    gt_plan plan;
    if (gt_plan_resolve(&cfg, &plan) == GT_OK) check_layout(&plan.layout, world);
  }
  free(text);
  return 0;
}
