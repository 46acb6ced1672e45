/* The stage cut by measured speed (recut.h). */
#include "recut.h"

#include <stdlib.h>
#include <string.h>

#include "giant/grid.h"
#include "giant/layer.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Stage s's compute in each step (its slowest rank's), median over the steps. */
static gt_status stage_times(const gt_plan *plan, const gt_step_telemetry *tel, int nsteps, double *t) {
  int P = plan->layout.pp, world = plan->world;
  double *v = malloc((size_t)nsteps * sizeof *v);
  if (!v) return gt_errorf(GT_ENOMEM, "out of memory judging the pipeline cut");
  for (int s = 0; s < P; s++) {
    for (int k = 0; k < nsteps; k++) {
      v[k] = 0;
      for (int r = 0; r < world; r++) {
        gt_grid_coords c;
        GT_TRY(gt_grid_coords_of(&plan->layout, r, &c));
        if (c.pp == s && tel[(size_t)k * world + r].compute_s > v[k]) v[k] = tel[(size_t)k * world + r].compute_s;
      }
    }
    qsort(v, (size_t)nsteps, sizeof *v, cmp_double);
    t[s] = nsteps % 2 ? v[nsteps / 2] : (v[nsteps / 2 - 1] + v[nsteps / 2]) / 2;
  }
  free(v);
  return GT_OK;
}

static void stage_flops(const gt_planner_layer *layers, const int *first, int P, double *f) {
  for (int s = 0; s < P; s++) {
    f[s] = 0;
    for (int i = first[s]; i < first[s + 1]; i++) f[s] += layers[i].flops;
  }
}

gt_status gpt_recut_propose(const gt_plan *plan, const gt_model *m, int B, int T, const gt_step_telemetry *tel,
                            int nsteps, double min_gain, gpt_recut *out) {
  memset(out, 0, sizeof *out);
  int P = plan->layout.pp, L = gt_model_num_layers(m);
  if (P < 2 || plan->chunks > 1 || P > GT_PLANNER_MAX_STAGES || nsteps < 1) return GT_OK;
  for (int s = 0, i = 0; s <= P; s++) { /* the model's cut: the first layer of each stage */
    while (i < L && gt_model_layer(m, i)->stage < s) i++;
    out->now[s] = s == P ? L : i;
  }
  gt_planner_layer *layers = NULL;
  int n = 0;
  GT_TRY(gt_planner_layers_from_model(m, B, T, &layers, &n));
  double t[GT_PLANNER_MAX_STAGES], f[GT_PLANNER_MAX_STAGES], inflight[GT_PLANNER_MAX_STAGES], top = 0;
  gt_status s = n == L ? stage_times(plan, tel, nsteps, t) : gt_errorf(GT_EINVAL, "the planner sees %d layers, "
                                                                        "the model %d", n, L);
  if (s == GT_OK) stage_flops(layers, out->now, P, f);
  for (int k = 0; s == GT_OK && k < P; k++) {
    if (!(t[k] > 0) || !(f[k] > 0)) s = gt_errorf(GT_EINVAL, "pipeline stage %d has no measured compute", k);
    else out->speed[k] = f[k] / t[k];
    top = out->speed[k] > top ? out->speed[k] : top;
    inflight[k] = P - k; /* what 1F1B keeps on that rank, as gt_plan_cut_stages has it */
  }
  for (int k = 0; s == GT_OK && k < P; k++) out->speed[k] /= top;
  gt_planner_stages st = {.n = P, .speed = out->speed, .in_flight = inflight};
  if (s == GT_OK) s = gt_planner_partition(layers, n, &st, out->first);
  if (s == GT_OK) {
    double fn[GT_PLANNER_MAX_STAGES];
    stage_flops(layers, out->first, P, fn);
    for (int k = 0; k < P; k++) {
      double now = t[k], next = fn[k] / (out->speed[k] * top);
      out->step_now_s = now > out->step_now_s ? now : out->step_now_s;
      out->step_new_s = next > out->step_new_s ? next : out->step_new_s;
    }
    out->change = memcmp(out->first, out->now, (size_t)(P + 1) * sizeof(int)) != 0 &&
                  out->step_new_s < out->step_now_s * (1 - min_gain);
  }
  free(layers);
  return s;
}
