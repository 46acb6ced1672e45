/* The planner in the GPT example. Costs come from the model's layers before
 * any memory is allocated: a model that is only declared (layers added,
 * not built) is enough. */
#include "planning.h"

#include <stdlib.h>

gt_planner_hw gpt_planner_hw(int world, double peak_flops) {
  gt_planner_hw hw = {.world = world, .peak_flops = peak_flops, .p2p_bandwidth = 2e9, .p2p_latency = 50e-6,
                      .ar_bandwidth = 2e9, .ar_latency = 50e-6, .dp_overlap = 0.4};
  return hw;
}

/* The layers of the whole model (no tensor parallelism), declared only. */
static gt_status whole_layers(gt_backend *be, const gpt_config *gc, int B, int T, gt_planner_layer **out, int *n) {
  gt_model *m;
  GT_TRY(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = T, .seed = 1}, &m));
  gt_status s = gpt_add_layers(m, gc);
  if (s == GT_OK) s = gt_planner_layers_from_model(m, B, T, out, n);
  gt_model_destroy(m);
  return s;
}

/* Tensor-parallel sizes GPT can take: they divide the heads, the MLP width
 * and the vocabulary. */
static int tp_sizes(const gpt_config *gc, int world, int *out) {
  int n = 0;
  for (int t = 1; t <= world && n < 32; t++)
    if (world % t == 0 && gc->NH % t == 0 && (4 * gc->C) % t == 0 && gc->vocab_size % t == 0) out[n++] = t;
  return n;
}

gt_status gpt_choose_layout(gt_backend *be, const gpt_config *gc, int B, int T, int world, int micro_batches,
                            double peak_flops, double mem_bytes, gt_pp_kind schedule, int chunks, bool zero1,
                            char *layout, size_t n) {
  gt_planner_layer *layers;
  int nl, tp[32];
  double *budget = mem_bytes > 0 ? malloc((size_t)world * sizeof *budget) : NULL;
  if (mem_bytes > 0 && !budget) return gt_errorf(GT_ENOMEM, "out of memory");
  for (int r = 0; budget && r < world; r++) budget[r] = mem_bytes;
  gt_status st = whole_layers(be, gc, B, T, &layers, &nl);
  if (st != GT_OK) {
    free(budget);
    return st;
  }
  gt_planner_hw hw = gpt_planner_hw(world, peak_flops);
  hw.mem_bytes = budget;
  gt_planner_job job = {.layers = layers, .nlayers = nl, .micro_batches = micro_batches, .schedule = schedule,
                        .chunks = schedule == GT_PP_INTERLEAVED ? chunks : 1, .zero1 = zero1, .tp_allowed = tp,
                        .ntp_allowed = tp_sizes(gc, world, tp)};
  gt_planner_result r;
  gt_status s = gt_planner_choose(&hw, &job, &r);
  if (s == GT_OK) snprintf(layout, n, "dp=%d,tp=%d,pp=%d", r.layout.dp, r.layout.tp, r.layout.pp);
  free(layers);
  free(budget);
  return s;
}

gt_status gpt_print_prediction(gt_backend *be, const gpt_config *gc, const gt_plan *plan, const gt_model *m, int B,
                               int T, int micro_batches, double peak_flops, FILE *f) {
  gt_planner_layer *layers;
  int nl, tp[32];
  GT_TRY(whole_layers(be, gc, B, T, &layers, &nl));
  int S = gt_model_num_pipeline_stages(m), first[GT_PLANNER_MAX_STAGES + 1] = {0};
  gt_status s = GT_OK;
  for (int v = 0; v < S && s == GT_OK; v++) {
    int lo, hi;
    s = gt_model_stage_layers(m, v, &lo, &hi);
    first[v] = lo, first[v + 1] = hi + 1;
  }
  gt_planner_hw hw = gpt_planner_hw(plan->world, peak_flops);
  gt_planner_job job = {.layers = layers, .nlayers = nl, .micro_batches = micro_batches, .schedule = plan->schedule,
                        .chunks = plan->chunks, .zero1 = plan->zero1, .tp_allowed = tp,
                        .ntp_allowed = tp_sizes(gc, plan->world, tp)};
  gt_planner_result r;
  if (s == GT_OK) s = gt_planner_estimate(&hw, &job, plan->layout, first, &r);
  if (s == GT_OK) {
    fprintf(f, "prediction (cost model, peak %.1f GFLOP/s per rank):\n", peak_flops / 1e9);
    gt_planner_print(&r, &job, f);
  }
  free(layers);
  return s;
}
