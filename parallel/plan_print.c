/* The plan as a table for --print-plan: the layout, where each decision
 * came from, and what every layer and parameter looks like on this rank. */
#include <stdio.h>
#include <string.h>

#include "giant/engine/plan.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "parallel/plan_engine.h"

static const char *shape_str(const int64_t *s, int n, char *buf, size_t len) {
  int off = 0;
  buf[0] = 0;
  for (int i = 0; i < n && (size_t)off < len; i++)
    off += snprintf(buf + off, len - (size_t)off, "%s%lld", i ? "x" : "", (long long)s[i]);
  return buf;
}

/* One "decide" line per decision: its value, its source and, for an
 * annotation, the scope that gave it. */
static void print_decisions(const gt_plan *p, const gt_model *m, FILE *f) {
  gt_annotations a;
  if (gt_model_annotations(m, &a) != GT_OK) memset(&a, 0, sizeof a);
  char why[160];
  const gt_plan_source src[3] = {p->from_dp, p->from_tp, p->from_pp};
  const int val[3] = {p->layout.dp, p->layout.tp, p->layout.pp};
  const char *name[3] = {"dp", "tp", "pp"};
  for (int k = 0; k < 3; k++) {
    why[0] = 0;
    if (src[k] == GT_FROM_ANNOTATION && k == 0) snprintf(why, sizeof why, " (replicate(%d) around the model)", a.dp);
    if (src[k] == GT_FROM_ANNOTATION && k == 1) {
      if (a.tp)
        snprintf(why, sizeof why, " (split(%d) from '%s')", a.tp, a.tp_at);
      else
        snprintf(why, sizeof why, " (replicate(%d) from '%s')", a.region_ways, a.region_at);
    }
    if (src[k] == GT_FROM_ANNOTATION && k == 2)
      snprintf(why, sizeof why, " (%d stage scopes from '%s')", a.stages, a.stage_at);
    if (src[k] == GT_FROM_PLANNER && p->automatic) snprintf(why, sizeof why, " (auto)");
    fprintf(f, "decide %s=%d from %s%s\n", name[k], val[k], gt_plan_source_name(src[k]), why);
  }
  why[0] = 0;
  if (p->from_micro_batches == GT_FROM_ANNOTATION)
    snprintf(why, sizeof why, " (pipeline(%d) from '%s')", a.micro_batches, a.pipeline_at);
  if (p->micro_batches)
    fprintf(f, "decide micro-batches=%d from %s%s\n", p->micro_batches, gt_plan_source_name(p->from_micro_batches),
            why);
  else
    fprintf(f, "decide micro-batches=default from planner\n");
  /* The stage cut: the stage scopes when they make exactly the stages, else
   * the planner's (by cost, or even). */
  int S = gt_model_num_pipeline_stages(m);
  if (S > 1 || a.stages) {
    char cut[256] = "";
    int off = 0;
    for (int s = 0; s < S && off < (int)sizeof cut; s++) {
      int lo = 0, hi = 0;
      if (gt_model_stage_layers(m, s, &lo, &hi) != GT_OK) break;
      off += snprintf(cut + off, sizeof cut - (size_t)off, "%s%d-%d", s ? "|" : "", lo, hi);
    }
    bool ann = gt_model_stages_annotated(m);
    why[0] = 0;
    if (ann)
      snprintf(why, sizeof why, " (stage scopes from '%s')", a.stage_at);
    else if (a.stages)
      snprintf(why, sizeof why, " (the %d stage scopes do not make the %d stages)", a.stages, S);
    fprintf(f, "decide stages=%s from %s%s\n", cut, ann ? "annotation" : "planner", why);
  }
  why[0] = 0;
  if (p->from_offload == GT_FROM_ANNOTATION)
    snprintf(why, sizeof why, " (offload(%d) from '%s')", a.offload_window, a.offload_at);
  if (p->offload_window)
    fprintf(f, "decide offload=%d from %s%s\n", p->offload_window, gt_plan_source_name(p->from_offload), why);
  else
    fprintf(f, "decide offload=off from %s\n", gt_plan_source_name(p->from_offload));
  why[0] = 0;
  if (p->from_zero == GT_FROM_ANNOTATION) snprintf(why, sizeof why, " (zero(%d) from '%s')", a.zero, a.zero_at);
  if (p->zero && p->layout.dp < 2) snprintf(why + strlen(why), sizeof why - strlen(why), " (dp=1: nothing to shard)");
  fprintf(f, "decide zero=%d from %s%s\n", p->zero, gt_plan_source_name(p->from_zero), why);
  if (a.regions)
    fprintf(f, "decide replicate=%s..%s over %d ranks from annotation%s\n", a.region_at, a.region_end, p->layout.tp,
            a.regions > 1 ? " (and the other regions)" : "");
}

void gt_plan_print(const gt_plan *p, const gt_model *m, FILE *f) {
  fprintf(f, "plan: world %d = dp %d x tp %d x pp %d%s; rank %d is dp %d, tp %d, pp %d\n", p->world, p->layout.dp,
          p->layout.tp, p->layout.pp, p->automatic ? " (auto)" : "", p->rank, p->me.dp, p->me.tp, p->me.pp);
  fprintf(f, "      ZeRO-%d%s, sequence parallel %s, gradient buckets %zu KiB\n", p->zero ? p->zero : 1,
          p->zero ? " on" : " off", p->seq_parallel ? "on" : "off", p->bucket_bytes >> 10);
  print_decisions(p, m, f);
  if (p->layout.pp > 1)
    fprintf(f, "      pipeline: %s, %d stages (%d per rank)\n", gt_pp_name(p->schedule), p->layout.pp * p->chunks,
            p->chunks);
  fprintf(f, "%-4s %-16s %-12s %-6s %-6s %-22s %-20s %s\n", "#", "layer", "type", "stage", "split", "parameter",
          "held here", "whole");
  for (int i = 0; i < gt_model_num_layers(m); i++) {
    gt_layer *l = gt_model_layer(m, i);
    char split[16];
    if (gt_model_layer_replicas(m, i) > 1)
      snprintf(split, sizeof split, "rows/%d", gt_model_layer_replicas(m, i));
    else
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
      else
        snprintf(local, sizeof local, "%s", a);
      const char *nm = strchr(q->name, '.') ? strchr(q->name, '.') + 1 : q->name;
      char idx[16] = "", stage[16] = "";
      if (k == 0) {
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(stage, sizeof stage, "%d", l->stage);
      }
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
  if (p->zero >= 2 && dp > 1)
    fprintf(f,
            "gradients: the same floats of the flat buffer, plus two layers' staging and the tied parameters' "
            "whole gradients (ZeRO-%d, docs/memory.md)\n",
            p->zero);
  if (p->zero >= 3 && dp > 1)
    fprintf(f,
            "parameters: the same floats again, plus two slots that hold whole layers, gathered before each "
            "layer's forward and backward (ZeRO-3, docs/memory.md)\n");
  if (gt_model_offloaded(m))
    fprintf(f,
            "offloaded: parameters, gradients and optimizer state live in host memory; the device holds the "
            "weights of %d layers at a time (docs/offload.md)\n",
            gt_model_offload_stats(m).window);
}
