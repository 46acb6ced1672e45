/* The pipeline cut by measured speed (resilience/mitigate/rebalance.h): each stage's
 * speed is the FLOPs of the layers it holds over its compute time, and the
 * planner cuts the layers again for those speeds. A pure function, so that
 * the ranks alike, or a job's leader from their report, decide the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/planner.h"
#include "resilience/mitigate/rebalance.h"

static void stage_flops(const double *flops, const int *first, int pp, double *f) {
  for (int s = 0; s < pp; s++) {
    f[s] = 0;
    for (int i = first[s]; i < first[s + 1]; i++) f[s] += flops[i];
  }
}

gt_status gt_rebalance_choose_cut(const gt_rebalance_config *cfg, int pp, const int *now, const double *stage_s,
                                  const double *layer_flops, int nlayers, gt_rebalance_cut *out) {
  memset(out, 0, sizeof *out);
  if (!cfg || !now || !stage_s || !layer_flops || pp < 2 || pp > GT_REBALANCE_MAX_STAGES || nlayers < pp ||
      cfg->horizon < 1 || !(cfg->transition_s >= 0) || !(cfg->min_gain >= 0 && cfg->min_gain < 1))
    return gt_errorf(GT_EINVAL,
                     "pipeline cut: wants 2..%d stages, as many layers at least, their FLOPs, the "
                     "stages' times and a config (horizon >= 1, transition_s >= 0, min_gain in [0, 1))",
                     GT_REBALANCE_MAX_STAGES);
  if (now[0] != 0 || now[pp] != nlayers)
    return gt_errorf(GT_EINVAL, "pipeline cut: the cut must start at layer 0 and end at %d", nlayers);
  for (int s = 0; s < pp; s++)
    if (now[s + 1] <= now[s] || !(stage_s[s] > 0) || !isfinite(stage_s[s]))
      return gt_errorf(GT_EINVAL,
                       "pipeline cut: stage %d holds layers %d..%d in %g s; each stage holds a layer "
                       "and takes a positive time",
                       s, now[s], now[s + 1], stage_s[s]);
  out->pp = pp;
  out->layers = nlayers;
  memcpy(out->now, now, (size_t)(pp + 1) * sizeof *now);
  double f[GT_REBALANCE_MAX_STAGES], top = 0, inflight[GT_REBALANCE_MAX_STAGES];
  stage_flops(layer_flops, now, pp, f);
  for (int s = 0; s < pp; s++) {
    if (!(f[s] > 0)) return gt_errorf(GT_EINVAL, "pipeline cut: stage %d's layers have no FLOPs", s);
    out->speed[s] = f[s] / stage_s[s];
    top = fmax(top, out->speed[s]);
    inflight[s] = pp - s; /* what 1F1B keeps on each rank, as gt_plan_cut_stages has it */
  }
  gt_planner_layer *layers = calloc((size_t)nlayers, sizeof *layers);
  if (!layers) return gt_errorf(GT_ENOMEM, "pipeline cut: out of memory");
  for (int i = 0; i < nlayers; i++) layers[i].flops = layer_flops[i];
  for (int s = 0; s < pp; s++) out->speed[s] /= top;
  gt_planner_stages st = {.n = pp, .speed = out->speed, .in_flight = inflight};
  gt_status s = gt_planner_partition(layers, nlayers, &st, out->next);
  free(layers);
  GT_TRY(s);
  double fn[GT_REBALANCE_MAX_STAGES];
  stage_flops(layer_flops, out->next, pp, fn);
  for (int k = 0; k < pp; k++) {
    out->step_now_s = fmax(out->step_now_s, stage_s[k]);
    out->step_new_s = fmax(out->step_new_s, fn[k] / (out->speed[k] * top));
  }
  out->gain_s = (out->step_now_s - out->step_new_s) * cfg->horizon - cfg->transition_s;
  out->change = memcmp(out->next, now, (size_t)(pp + 1) * sizeof *now) && out->gain_s > 0 &&
                out->step_new_s <= (1 - cfg->min_gain) * out->step_now_s;
  if (!out->change) memcpy(out->next, now, (size_t)(pp + 1) * sizeof *now);
  return GT_OK;
}
