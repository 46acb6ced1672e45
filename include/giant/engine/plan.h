/* Plans and distributed training.
 *
 * A plan resolves a layout (dp x tp x pp, from `giantrun --plan` or the
 * GT_PLAN environment variable: "dp=2,tp=2" or "auto") against the world
 * size and the model's annotations: which layers each rank holds, how each
 * is split, which slice of every parameter and of the optimizer state each
 * rank owns. Every rank computes the same plan from the same inputs.
 * (The running state built from a plan is giant/engine/dist.h.)
 */
#ifndef GIANT_PLAN_H
#define GIANT_PLAN_H

#include <stdio.h>

#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"

GT_API_BEGIN

/* Where a decision of a plan came from, strongest first: a flag (the
 * layout text, the caller's explicit settings), the model's annotations,
 * or the planner (its choice under "auto", else its defaults: tp = pp = 1
 * and dp filling the world). */
typedef enum gt_plan_source { GT_FROM_PLANNER = 0, GT_FROM_ANNOTATION = 1, GT_FROM_FLAG = 2 } gt_plan_source;

typedef struct gt_plan {
  gt_grid_layout layout;
  int world, rank;
  gt_grid_coords me;
  bool zero1; /* optimizer state sharded over the data-parallel group (zero >= 1) */
  int zero;   /* ZeRO stage: 0, 1 (optimizer state), 2 (and gradients) */
  gt_plan_source from_zero;
  bool seq_parallel;   /* sequence parallelism in split layers */
  size_t bucket_bytes; /* gradient all-reduce bucket size */
  bool automatic;      /* the layout was chosen by "auto" */
  gt_pp_kind schedule; /* pipeline schedule (pp > 1) */
  int chunks;          /* virtual stages per pipeline rank (interleaved), >= 1 */
  int micro_batches;   /* per step: the flag, else pipeline(m), else 0 (the caller's default) */
  int offload_window;  /* the flag, else offload(w), else 0 (not offloaded) */
  gt_plan_source from_dp, from_tp, from_pp, from_micro_batches, from_offload;
} gt_plan;

/* "dp=2,tp=2,pp=1" (missing factors are 1, except dp, which fills the world
 * when omitted), or "auto". Unknown keys and malformed numbers are errors. */
gt_status gt_plan_parse(const char *text, int world, gt_grid_layout *out, bool *automatic);

typedef struct gt_plan_config {
  int world, rank;
  const char *layout; /* NULL: $GT_PLAN, else "auto" */
  bool zero1, seq_parallel;
  /* The ZeRO stage a flag gave: 1..3, or < 0 for off; 0: not given
   * (zero1, else the annotation's zero(stage), else off). */
  int zero;
  size_t bucket_bytes; /* 0: 4 MiB */
  gt_pp_kind schedule; /* GT_PP_GPIPE (0), GT_PP_1F1B or GT_PP_INTERLEAVED */
  int chunks;          /* virtual stages per rank for interleaved (0: 2); 1 otherwise */
  /* The model's annotations (gt_model_annotations of the model declared,
   * not yet built), or NULL: they decide what the layout text leaves open. */
  const gt_annotations *annotations;
  /* The planner's layout for what the text and the annotations leave open
   * (gt_plan_preview says which), or NULL: tp = pp = 1, dp fills the world. */
  const gt_grid_layout *planner;
  int micro_batches;  /* a flag's micro-batches per step, or 0: not given */
  int offload_window; /* a flag's offload window: > 0 on, < 0 off, 0: not given */
} gt_plan_config;

/* Decides each factor of the layout, flag first, then annotation, then
 * planner (docs/annotations.md), checks that they make the world and that
 * the annotations fit it, and fills the plan. A text of "auto" (or none)
 * fixes nothing. On one process every factor is 1, whatever the
 * annotations ask. */
gt_status gt_plan_resolve(const gt_plan_config *cfg, gt_plan *out);

GT_API_END
#endif
