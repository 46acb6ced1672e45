/* Layouts, plans, and the checks that reject a plan before training. */
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "parallel/planner.h"
#include "giant/protocol.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "parallel/plan_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The factors a layout text gives: f[0..2] = dp, tp, pp, 0 where it is
 * silent. "auto" and no text give none. */
static gt_status parse_factors(const char *text, int f[3], bool *automatic) {
  f[0] = f[1] = f[2] = 0;
  *automatic = !text || !*text || !strcmp(text, "auto");
  if (*automatic) return GT_OK;
  const char *p = text;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) return gt_errorf(GT_EINVAL, "plan '%s': expected key=value pairs like dp=2,tp=2,pp=1", text);
    size_t klen = (size_t)(eq - p);
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || (*end && *end != ',') || v < 1 || v > 1 << 20)
      return gt_errorf(GT_EINVAL, "plan '%s': '%.*s' needs a positive integer", text, (int)klen, p);
    int k = klen != 2 ? -1 : !strncmp(p, "dp", 2) ? 0 : !strncmp(p, "tp", 2) ? 1 : !strncmp(p, "pp", 2) ? 2 : -1;
    if (k < 0) return gt_errorf(GT_EINVAL, "plan '%s': unknown factor '%.*s' (use dp, tp, pp)", text, (int)klen, p);
    f[k] = (int)v;
    p = *end ? end + 1 : end;
  }
  return GT_OK;
}

gt_status gt_plan_parse(const char *text, int world, gt_grid_layout *out, bool *automatic) {
  int f[3];
  GT_TRY(parse_factors(text, f, automatic));
  gt_grid_layout l = {.dp = f[0], .tp = f[1] ? f[1] : 1, .pp = f[2] ? f[2] : 1};
  if (!l.dp) {
    /* Each factor is at most 2^20, so their product needs 64 bits. */
    long long tp_pp = (long long)l.tp * l.pp;
    if (world % tp_pp)
      return gt_errorf(GT_EINVAL, "plan '%s': tp*pp = %lld does not divide the world size %d", text ? text : "auto",
                       tp_pp, world);
    l.dp = (int)(world / tp_pp);
  }
  *out = l;
  return GT_OK;
}

const char *gt_plan_source_name(gt_plan_source s) {
  return s == GT_FROM_FLAG ? "flag" : s == GT_FROM_ANNOTATION ? "annotation" : "planner";
}

static const char *const factor_name[3] = {"dp", "tp", "pp"};

/* Flag, then annotation: the value of each factor either fixes (0 where
 * the planner chooses), and where it came from. */
static gt_status fixed_factors(const gt_plan_config *cfg, int chunks, int f[3], gt_plan_source src[3],
                               bool *automatic) {
  const char *text = cfg->layout ? cfg->layout : getenv(GT_ENV_PLAN);
  GT_TRY(parse_factors(text, f, automatic));
  const gt_annotations *a = cfg->annotations;
  int ann[3] = {0, 0, 0};
  if (a && cfg->world > 1) {
    ann[0] = a->dp;
    ann[1] = a->tp ? a->tp : a->region_ways;
    if (a->stages > 1 && a->stages % chunks)
      return gt_errorf(GT_EINVAL, "the %d stage scopes (from layer '%s') do not make %d chunks per pipeline rank",
                       a->stages, a->stage_at, chunks);
    ann[2] = a->stages > 1 ? a->stages / chunks : 0;
  }
  for (int k = 0; k < 3; k++) {
    src[k] = f[k] ? GT_FROM_FLAG : ann[k] ? GT_FROM_ANNOTATION : GT_FROM_PLANNER;
    if (!f[k]) f[k] = ann[k];
  }
  return GT_OK;
}

gt_status gt_plan_preview(const gt_plan_config *cfg, gt_grid_layout *fixed) {
  int f[3], chunks = cfg->schedule == GT_PP_INTERLEAVED ? (cfg->chunks > 0 ? cfg->chunks : 2) : 1;
  gt_plan_source src[3];
  bool automatic;
  GT_TRY(fixed_factors(cfg, chunks, f, src, &automatic));
  *fixed = (gt_grid_layout){.dp = f[0], .tp = f[1], .pp = f[2]};
  return GT_OK;
}

/* "dp=2 (annotation), tp=4 (flag), pp=1 (planner)", for messages. */
static const char *describe(const int f[3], const gt_plan_source src[3], char *buf, size_t n) {
  snprintf(buf, n, "dp=%d (%s), tp=%d (%s), pp=%d (%s)", f[0], gt_plan_source_name(src[0]), f[1],
           gt_plan_source_name(src[1]), f[2], gt_plan_source_name(src[2]));
  return buf;
}

gt_status gt_plan_resolve(const gt_plan_config *cfg, gt_plan *out) {
  memset(out, 0, sizeof *out);
  int W = cfg->world;
  if (cfg->rank < 0 || cfg->rank >= W) return gt_errorf(GT_EINVAL, "rank %d is outside the world of %d", cfg->rank, W);
  if (cfg->schedule != GT_PP_INTERLEAVED && cfg->chunks > 1)
    return gt_errorf(GT_EINVAL, "%d chunks per pipeline rank need the interleaved schedule", cfg->chunks);
  out->chunks = cfg->schedule == GT_PP_INTERLEAVED ? (cfg->chunks > 0 ? cfg->chunks : 2) : 1;
  int f[3];
  gt_plan_source src[3];
  GT_TRY(fixed_factors(cfg, out->chunks, f, src, &out->automatic));
  const char *text = cfg->layout ? cfg->layout : getenv(GT_ENV_PLAN);
  /* The planner's choice, for what is left open. */
  const gt_grid_layout *pl = cfg->planner;
  int planned[3] = {pl ? pl->dp : 0, pl ? pl->tp : 1, pl ? pl->pp : 1};
  for (int k = 1; k < 3; k++)
    if (!f[k]) f[k] = planned[k];
  char buf[160];
  if (!f[0]) {
    long long tp_pp = (long long)f[1] * f[2]; /* factors up to 2^20 each */
    if (pl)
      f[0] = planned[0];
    else if (W % tp_pp)
      return gt_errorf(GT_EINVAL, "plan '%s': tp*pp = %lld does not divide the world size %d", text ? text : "auto",
                       tp_pp, W);
    else
      f[0] = (int)(W / tp_pp);
  }
  for (int k = 0; pl && k < 3; k++)
    if (src[k] != GT_FROM_PLANNER && planned[k] != f[k] && planned[k])
      return gt_errorf(GT_EINVAL, "the planner's layout dp=%d,tp=%d,pp=%d changes %s, which the %s fixed at %d", pl->dp,
                       pl->tp, pl->pp, factor_name[k], gt_plan_source_name(src[k]), f[k]);
  if ((long long)f[0] * f[1] * f[2] != W)
    return gt_errorf(GT_EINVAL, "plan '%s': the layout %s makes %lld ranks, but the world has %d%s",
                     text ? text : "auto", describe(f, src, buf, sizeof buf), (long long)f[0] * f[1] * f[2], W,
                     src[0] == GT_FROM_ANNOTATION || src[1] == GT_FROM_ANNOTATION || src[2] == GT_FROM_ANNOTATION
                         ? ": change the annotations' counts (0 leaves one to the plan) or give the factor as a flag"
                         : "");
  out->layout = (gt_grid_layout){.dp = f[0], .tp = f[1], .pp = f[2]};
  out->from_dp = src[0];
  out->from_tp = src[1];
  out->from_pp = src[2];
  gt_status s = gt_grid_check(&out->layout, W);
  if (s != GT_OK) return gt_error_context(s, "plan '%s'", text ? text : "auto");
  const gt_annotations *a = cfg->annotations;
  if (cfg->seq_parallel && out->layout.tp < 2)
    return gt_errorf(GT_EINVAL, "sequence parallelism needs tensor parallelism (tp > 1); the plan has tp=%d",
                     out->layout.tp);
  out->world = W;
  out->rank = cfg->rank;
  /* ZeRO: the flag's stage, else zero(stage) around the model, else off. */
  int zero = cfg->zero < 0 ? 0 : cfg->zero ? cfg->zero : cfg->zero1 ? 1 : a ? a->zero : 0;
  out->from_zero = cfg->zero || cfg->zero1 ? GT_FROM_FLAG : a && a->zero ? GT_FROM_ANNOTATION : GT_FROM_PLANNER;
  if (zero > 3)
    return gt_errorf(GT_EINVAL,
                     "ZeRO stage %d: the stages are 0 (off), 1 (optimizer state), 2 (and gradients), 3 (and "
                     "parameters)",
                     zero);
  out->zero = zero;
  out->zero1 = zero >= 1;
  out->seq_parallel = cfg->seq_parallel;
  out->bucket_bytes = cfg->bucket_bytes ? cfg->bucket_bytes : (size_t)4 << 20;
  out->schedule = cfg->schedule;
  /* Micro-batches and offloading: flag, else annotation, else off. */
  out->micro_batches = cfg->micro_batches > 0 ? cfg->micro_batches : a ? a->micro_batches : 0;
  out->from_micro_batches = cfg->micro_batches > 0 ? GT_FROM_FLAG
                            : out->micro_batches   ? GT_FROM_ANNOTATION
                                                   : GT_FROM_PLANNER;
  out->offload_window = cfg->offload_window ? (cfg->offload_window > 0 ? cfg->offload_window : 0)
                        : a                 ? a->offload_window
                                            : 0;
  out->from_offload = cfg->offload_window ? GT_FROM_FLAG : out->offload_window ? GT_FROM_ANNOTATION : GT_FROM_PLANNER;
  if (out->zero >= 2 && out->offload_window > 0)
    return gt_errorf(GT_EUNSUPPORTED,
                     "ZeRO-%d with offloading (a window of %d layers, from %s) is not supported: offloading "
                     "keeps the %s in host memory already; use ZeRO-1 with offloading, or ZeRO-%d "
                     "without it",
                     out->zero, out->offload_window, gt_plan_source_name(out->from_offload),
                     out->zero >= 3 ? "parameters and gradients" : "gradients", out->zero);
  return gt_grid_coords_of(&out->layout, cfg->rank, &out->me);
}

gt_status gt_plan_check_model(const gt_plan *p, const gt_model *m) {
  if (p->layout.pp > 1 && gt_model_num_pipeline_stages(m) != p->layout.pp * p->chunks)
    return gt_errorf(GT_EINVAL,
                     "plan has pp=%d with %d chunks, but the model was built for %d stages; "
                     "set its parallel context from the plan before adding layers",
                     p->layout.pp, p->chunks, gt_model_num_pipeline_stages(m));
  /* Stage annotations at pp=1 are fine: every stage runs on this rank. */
  if (p->layout.tp > 1) {
    bool any = false;
    for (int i = 0; i < gt_model_num_layers(m); i++) any |= gt_model_layer(m, i)->tp != NULL;
    if (!any)
      return gt_errorf(GT_EINVAL,
                       "plan has tp=%d, but no layer of the model is split: annotate the layers to shard with "
                       "gt_model_scope_begin(m, GT_SCOPE_SPLIT, 0) or use tp=1",
                       p->layout.tp);
  }
  return GT_OK;
}

gt_status gt_plan_cut_stages(const gt_plan *p, gt_model *m, int B, int T, const double *stage_speed) {
  int P = p->layout.pp, S = P * p->chunks;
  if (P < 2) return GT_OK;
  gt_planner_layer *layers = NULL;
  int n = 0;
  GT_TRY(gt_planner_layers_from_model(m, B, T, &layers, &n));
  double speed[GT_PLANNER_MAX_STAGES], inflight[GT_PLANNER_MAX_STAGES];
  int first[GT_PLANNER_MAX_STAGES + 1];
  gt_status s =
      S <= GT_PLANNER_MAX_STAGES ? GT_OK : gt_errorf(GT_EINVAL, "at most %d pipeline stages", GT_PLANNER_MAX_STAGES);
  for (int v = 0; v < S && s == GT_OK; v++) {
    speed[v] = stage_speed ? stage_speed[v % P] : 1.0;
    if (!(speed[v] > 0))
      s = gt_errorf(GT_EINVAL, "pipeline rank %d has speed %g; speeds must be positive", v % P, speed[v]);
    inflight[v] = P - v % P; /* what 1F1B keeps on that rank */
  }
  gt_planner_stages st = {.n = S, .speed = speed, .in_flight = inflight};
  if (s == GT_OK) s = gt_planner_partition(layers, n, &st, first);
  if (s == GT_OK) s = gt_model_set_stage_cut(m, first, S);
  free(layers);
  return s;
}
