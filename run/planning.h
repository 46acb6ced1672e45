/* The run's use of the planner: choosing a layout for --plan auto, and
 * predicting a plan's step time, bubble and memory for --print-plan. */
#ifndef GIANT_RUN_PLANNING_H
#define GIANT_RUN_PLANNING_H

#include <stdio.h>

#include "giant/engine/plan.h"
#include "parallel/planner.h"
#include "giant/run.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "giant/group.h"

/* What the cost model needs of the hardware: the peak measured on one rank,
 * round numbers for the links of one machine. */
gt_planner_hw run_planner_hw(int world, double peak_flops);

/* The budget a rank plans under: --mem-mib, else --device-mem-mib (0: none). */
double run_plan_budget(const gt_run_options *o);

/* The fastest layout for `world` ranks whose expected peak of device
 * memory fits in mem_bytes per rank (0: no limit) and keeps the factors `fixed` gives (NULL, or 0 in a
 * factor: free), written as "dp=..,tp=..,pp=..". */
gt_status run_choose_layout(gt_backend *be, const gt_run_model *model, int B, int T, int world, int micro_batches,
                            double peak_flops, double mem_bytes, gt_pp_kind schedule, int chunks, int zero,
                            int offload_window, gt_precision precision, int optim_states, const gt_grid_layout *fixed,
                            char *layout, size_t n);

/* The annotations of the model, read from its layers declared
 * on a model that is never built (nothing is allocated for it). */
gt_status run_annotations_of(gt_backend *be, const gt_run_model *model, int T, gt_annotations *out);

/* The plan's predicted step, with the model's actual stage cut. */
gt_status run_print_prediction(gt_backend *be, const gt_run_model *model, const gt_plan *plan, const gt_model *m, int B,
                               int T, int micro_batches, double peak_flops, int offload_window, gt_precision precision,
                               int optim_states, FILE *f);

/* Where the model's state lives, the expected peak of device memory on
 * this rank by category (gt_model_device_estimate_ex) against the
 * backend's budget, and, offloaded, the window and the bytes a step
 * moves with their time at this machine's copy bandwidth. */
gt_status run_print_memory(gt_backend *be, const gt_model *m, const gt_estimate_config *ec, int micro_batches, FILE *f);

#endif
