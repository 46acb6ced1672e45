/* Layouts, plans, and the checks that reject a plan before training. */
#include "giant/grid.h"
#include "giant/plan.h"
#include "giant/planner.h"

#include <stdlib.h>
#include <string.h>

gt_status gt_plan_parse(const char *text, int world, gt_grid_layout *out, bool *automatic) {
  *automatic = false;
  if (!text || !*text || !strcmp(text, "auto")) {
    *automatic = true;
    *out = (gt_grid_layout){.dp = world, .tp = 1, .pp = 1};
    return GT_OK;
  }
  gt_grid_layout l = {0, 1, 1};
  bool dp_given = false;
  const char *p = text;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) return gt_errorf(GT_EINVAL, "plan '%s': expected key=value pairs like dp=2,tp=2,pp=1", text);
    size_t klen = (size_t)(eq - p);
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || (*end && *end != ',') || v < 1 || v > 1 << 20)
      return gt_errorf(GT_EINVAL, "plan '%s': '%.*s' needs a positive integer", text, (int)klen, p);
    if (klen == 2 && !strncmp(p, "dp", 2)) {
      l.dp = (int)v;
      dp_given = true;
    } else if (klen == 2 && !strncmp(p, "tp", 2)) {
      l.tp = (int)v;
    } else if (klen == 2 && !strncmp(p, "pp", 2)) {
      l.pp = (int)v;
    } else {
      return gt_errorf(GT_EINVAL, "plan '%s': unknown factor '%.*s' (use dp, tp, pp)", text, (int)klen, p);
    }
    p = *end ? end + 1 : end;
  }
  if (!dp_given) {
    if (world % (l.tp * l.pp))
      return gt_errorf(GT_EINVAL, "plan '%s': tp*pp = %d does not divide the world size %d", text, l.tp * l.pp,
                       world);
    l.dp = world / (l.tp * l.pp);
  }
  *out = l;
  return GT_OK;
}

gt_status gt_plan_resolve(const gt_plan_config *cfg, gt_plan *out) {
  memset(out, 0, sizeof *out);
  const char *text = cfg->layout ? cfg->layout : getenv("GT_PLAN");
  GT_TRY(gt_plan_parse(text, cfg->world, &out->layout, &out->automatic));
  gt_status s = gt_grid_check(&out->layout, cfg->world);
  if (s != GT_OK) return gt_error_context(s, "plan '%s'", text ? text : "auto");
  if (cfg->rank < 0 || cfg->rank >= cfg->world)
    return gt_errorf(GT_EINVAL, "rank %d is outside the world of %d", cfg->rank, cfg->world);
  if (cfg->seq_parallel && out->layout.tp < 2)
    return gt_errorf(GT_EINVAL, "sequence parallelism needs tensor parallelism (tp > 1); the plan has tp=%d",
                     out->layout.tp);
  out->world = cfg->world;
  out->rank = cfg->rank;
  out->zero1 = cfg->zero1;
  out->seq_parallel = cfg->seq_parallel;
  out->bucket_bytes = cfg->bucket_bytes ? cfg->bucket_bytes : (size_t)4 << 20;
  out->schedule = cfg->schedule;
  out->chunks = cfg->schedule == GT_PP_INTERLEAVED ? (cfg->chunks > 0 ? cfg->chunks : 2) : 1;
  if (cfg->schedule != GT_PP_INTERLEAVED && cfg->chunks > 1)
    return gt_errorf(GT_EINVAL, "%d chunks per pipeline rank need the interleaved schedule", cfg->chunks);
  return gt_grid_coords_of(&out->layout, cfg->rank, &out->me);
}

gt_status gt_plan_check_model(const gt_plan *p, const gt_model *m) {
  if (p->layout.pp > 1 && gt_model_num_pipeline_stages(m) != p->layout.pp * p->chunks)
    return gt_errorf(GT_EINVAL, "plan has pp=%d with %d chunks, but the model was built for %d stages; "
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

static const char *shape_str(const int64_t *s, int n, char *buf, size_t len) {
  int off = 0;
  for (int i = 0; i < n && (size_t)off < len; i++) off += snprintf(buf + off, len - (size_t)off, "%s%lld", i ? "x" : "", (long long)s[i]);
  return buf;
}

void gt_plan_print(const gt_plan *p, const gt_model *m, FILE *f) {
  fprintf(f, "plan: world %d = dp %d x tp %d x pp %d%s; rank %d is dp %d, tp %d, pp %d\n", p->world, p->layout.dp,
          p->layout.tp, p->layout.pp, p->automatic ? " (auto)" : "", p->rank, p->me.dp, p->me.tp, p->me.pp);
  fprintf(f, "      ZeRO-1 %s, sequence parallel %s, gradient buckets %zu KiB\n", p->zero1 ? "on" : "off",
          p->seq_parallel ? "on" : "off", p->bucket_bytes >> 10);
  if (p->layout.pp > 1)
    fprintf(f, "      pipeline: %s, %d stages (%d per rank)\n", gt_pp_name(p->schedule), p->layout.pp * p->chunks,
            p->chunks);
  fprintf(f, "%-4s %-16s %-12s %-6s %-6s %-22s %-20s %s\n", "#", "layer", "type", "stage", "split", "parameter",
          "held here", "whole");
  for (int i = 0; i < gt_model_num_layers(m); i++) {
    gt_layer *l = gt_model_layer(m, i);
    char split[16];
    snprintf(split, sizeof split, "%d-way", l->tp ? l->tp->size : 1);
    if (l->nparams == 0) fprintf(f, "%-4d %-16s %-12s %-6d %-6s\n", i, l->name, l->type->name, l->stage, split);
    for (int k = 0; k < l->nparams; k++) {
      const gt_param *q = gt_layer_param_info(l, k);
      char a[48], b[48], local[80];
      shape_str(q->shape, q->ndim, a, sizeof a);
      shape_str(q->global_shape, q->ndim, b, sizeof b);
      if (!l->local && gt_model_num_pipeline_stages(m) > 1)
        snprintf(local, sizeof local, "- (pipeline rank %d)", l->stage % p->layout.pp);
      else if (q->split_dim >= 0)
        snprintf(local, sizeof local, "%s (part %d/%d)", a, q->split_rank + 1, q->split_parts);
      else snprintf(local, sizeof local, "%s", a);
      const char *nm = strchr(q->name, '.') ? strchr(q->name, '.') + 1 : q->name;
      char idx[16] = "", stage[16] = "";
      if (k == 0) snprintf(idx, sizeof idx, "%d", i), snprintf(stage, sizeof stage, "%d", l->stage);
      /* Offloaded, a tensor's master copy (and its gradient and optimizer
       * state) is in host memory and it visits the device in its layer's
       * window slot. */
      bool here = l->local || gt_model_num_pipeline_stages(m) == 1;
      fprintf(f, "%-4s %-16s %-12s %-6s %-6s %-22s %-20s %s%s%s\n", idx, k ? "" : l->name, k ? "" : l->type->name,
              stage, k ? "" : split, nm, local, b, q->tied_to >= 0 ? " (tied)" : "",
              here && gt_model_offloaded(m) ? "  [host; device in a window slot]" : "");
    }
  }
  size_t n = gt_model_buffer_floats(m);
  int dp = p->layout.dp;
  size_t shard = (n + (size_t)dp - 1) / (size_t)dp;
  fprintf(f, "parameters held here: %zu floats (%zu trainable); ", n, gt_model_param_count(m));
  if (p->zero1)
    fprintf(f, "optimizer state: floats [%zu, %zu) of the flat buffer (shard %d of %d)\n", shard * (size_t)p->me.dp,
            shard * (size_t)(p->me.dp + 1) < n ? shard * (size_t)(p->me.dp + 1) : n, p->me.dp + 1, dp);
  else
    fprintf(f, "optimizer state: all of it (replicated over dp)\n");
  if (gt_model_offloaded(m))
    fprintf(f, "offloaded: parameters, gradients and optimizer state live in host memory; the device holds the "
               "weights of %d layers at a time (docs/offload.md)\n",
            gt_model_offload_stats(m).window);
}

gt_status gt_plan_cut_stages(const gt_plan *p, gt_model *m, int B, int T, const double *stage_speed) {
  int P = p->layout.pp, S = P * p->chunks;
  if (P < 2) return GT_OK;
  gt_planner_layer *layers = NULL;
  int n = 0;
  GT_TRY(gt_planner_layers_from_model(m, B, T, &layers, &n));
  double speed[GT_PLANNER_MAX_STAGES], inflight[GT_PLANNER_MAX_STAGES];
  int first[GT_PLANNER_MAX_STAGES + 1];
  gt_status s = S <= GT_PLANNER_MAX_STAGES ? GT_OK : gt_errorf(GT_EINVAL, "at most %d pipeline stages", GT_PLANNER_MAX_STAGES);
  for (int v = 0; v < S && s == GT_OK; v++) {
    speed[v] = stage_speed ? stage_speed[v % P] : 1.0;
    if (!(speed[v] > 0)) s = gt_errorf(GT_EINVAL, "pipeline rank %d has speed %g; speeds must be positive", v % P, speed[v]);
    inflight[v] = P - v % P; /* what 1F1B keeps on that rank */
  }
  gt_planner_stages st = {.n = S, .speed = speed, .in_flight = inflight};
  if (s == GT_OK) s = gt_planner_partition(layers, n, &st, first);
  if (s == GT_OK) s = gt_model_set_stage_cut(m, first, S);
  free(layers);
  return s;
}
