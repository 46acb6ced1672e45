/* What the stage cut is decided on (recut.h). */
#include "recut.h"

#include <stdlib.h>
#include <string.h>

#include "giant/engine/grid.h"
#include "giant/layer.h"
#include "parallel/planner.h"
#include "giant/engine/plan.h"
#include "resilience/mitigate/rebalance.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Stage s's compute in each step (its slowest rank's), median over the steps. */
static gt_status stage_times(const gt_plan *plan, const gt_step_telemetry *tel, int nsteps, double *t) {
  int P = plan->layout.pp, world = plan->world;
  double *v = malloc((size_t)nsteps * sizeof *v);
  if (!v) return gt_errorf(GT_ENOMEM, "out of memory judging the pipeline cut");
  gt_status s = GT_OK;
  for (int p = 0; p < P && s == GT_OK; p++) {
    for (int k = 0; k < nsteps; k++) {
      v[k] = 0;
      for (int r = 0; r < world && s == GT_OK; r++) {
        gt_grid_coords c;
        s = gt_grid_coords_of(&plan->layout, r, &c);
        double x = tel[(size_t)k * world + r].compute_s;
        if (s == GT_OK && c.pp == p && x > v[k]) v[k] = x;
      }
    }
    qsort(v, (size_t)nsteps, sizeof *v, cmp_double);
    t[p] = nsteps % 2 ? v[nsteps / 2] : (v[nsteps / 2 - 1] + v[nsteps / 2]) / 2;
  }
  free(v);
  return s;
}

void run_recut_now(const gt_model *m, int pp, int *now) {
  int L = gt_model_num_layers(m);
  for (int s = 0, i = 0; s <= pp; s++) { /* the first layer of each stage */
    while (i < L && gt_model_layer(m, i)->stage < s) i++;
    now[s] = s == pp ? L : i;
  }
}

gt_status run_recut_inputs_of(const gt_plan *plan, const gt_model *m, int B, int T, const gt_step_telemetry *tel,
                              int nsteps, run_recut_inputs *out) {
  memset(out, 0, sizeof *out);
  int P = plan->layout.pp, L = gt_model_num_layers(m);
  if (P > GT_REBALANCE_MAX_STAGES || L > RUN_RECUT_MAX_LAYERS || nsteps < 1)
    return gt_errorf(GT_EUNSUPPORTED, "re-cutting is judged for at most %d stages and %d layers (this job: %d, %d)",
                     GT_REBALANCE_MAX_STAGES, RUN_RECUT_MAX_LAYERS, P, L);
  out->pp = P;
  out->layers = L;
  run_recut_now(m, P, out->now);
  gt_planner_layer *layers = NULL;
  int n = 0;
  GT_TRY(gt_planner_layers_from_model(m, B, T, &layers, &n));
  gt_status s = n == L ? GT_OK : gt_errorf(GT_EINVAL, "the planner sees %d layers, the model %d", n, L);
  for (int i = 0; s == GT_OK && i < L; i++) out->flops[i] = layers[i].flops;
  free(layers);
  return s == GT_OK ? stage_times(plan, tel, nsteps, out->stage_s) : s;
}
