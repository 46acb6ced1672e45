/* The planner in a run. Costs come from the model's layers before
 * any memory is allocated: a model that is only declared (layers added,
 * not built) is enough. */
#include "planning.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/plan.h"
#include "giant/group.h"
#include "parallel/planner.h"

#include <stdlib.h>
#include <time.h>

double run_plan_budget(const gt_run_options *o) {
  return (double)(o->mem_mib ? o->mem_mib : o->device_mem_mib) * (1 << 20);
}

gt_planner_hw run_planner_hw(int world, double peak_flops) {
  gt_planner_hw hw = {.world = world,
                      .peak_flops = peak_flops,
                      .p2p_bandwidth = 2e9,
                      .p2p_latency = 50e-6,
                      .ar_bandwidth = 2e9,
                      .ar_latency = 50e-6,
                      .dp_overlap = 0.4,
                      .copy_bandwidth = 16e9};
  return hw;
}

/* The layers of the whole model (no tensor parallelism), declared only,
 * and what the model holds beside them. */
static gt_status whole_layers(gt_backend *be, const gt_run_model *model, int B, int T, gt_planner_layer **out, int *n,
                              gt_planner_extras *extras) {
  gt_model *m;
  GT_TRY(gt_model_create(be, &(gt_model_config){.B_max = B, .T_max = T, .seed = 1}, &m));
  gt_status s = model->add_layers(m, model->user);
  if (s == GT_OK) s = gt_planner_model_extras(m, B, T, extras);
  if (s == GT_OK) s = gt_planner_layers_from_model(m, B, T, out, n);
  gt_model_destroy(m);
  return s;
}

gt_status run_annotations_of(gt_backend *be, const gt_run_model *model, int T, gt_annotations *out) {
  gt_model *m;
  GT_TRY(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = T, .seed = 1}, &m));
  gt_status s = model->add_layers(m, model->user);
  if (s == GT_OK) s = gt_model_annotations(m, out);
  gt_model_destroy(m);
  return s;
}

/* Tensor-parallel sizes the model can take, as it says (every one that
 * divides the world when it says nothing). */
static int tp_sizes(const gt_run_model *model, int world, int *out) {
  int n = 0;
  for (int t = 1; t <= world && n < 32; t++)
    if (world % t == 0 && (!model->can_split || model->can_split(t, model->user))) out[n++] = t;
  return n;
}

gt_status run_choose_layout(gt_backend *be, const gt_run_model *model, int B, int T, int world, int micro_batches,
                            double peak_flops, double mem_bytes, gt_pp_kind schedule, int chunks, int zero,
                            int offload_window, gt_precision precision, int optim_states, const gt_grid_layout *fixed,
                            char *layout, size_t n) {
  gt_planner_layer *layers;
  gt_planner_extras extras;
  int nl, tp[32];
  double *budget = mem_bytes > 0 ? malloc((size_t)world * sizeof *budget) : NULL;
  if (mem_bytes > 0 && !budget) return gt_errorf(GT_ENOMEM, "out of memory");
  for (int r = 0; budget && r < world; r++) budget[r] = mem_bytes;
  gt_status st = whole_layers(be, model, B, T, &layers, &nl, &extras);
  if (st != GT_OK) {
    free(budget);
    return st;
  }
  gt_planner_hw hw = run_planner_hw(world, peak_flops);
  hw.mem_bytes = budget;
  gt_planner_job job = {.layers = layers,
                        .nlayers = nl,
                        .micro_batches = micro_batches,
                        .schedule = schedule,
                        .chunks = schedule == GT_PP_INTERLEAVED ? chunks : 1,
                        .zero1 = zero >= 1,
                        .zero = zero,
                        .tp_allowed = tp,
                        .ntp_allowed = tp_sizes(model, world, tp),
                        .offload_window = offload_window,
                        .precision = precision,
                        .optim_states = optim_states,
                        .extras = extras};
  if (fixed) job.fixed = *fixed;
  /* A tensor-parallel size the flags or annotations fixed is taken as it
   * is: where the model cannot split so, its build names the layer. */
  if (fixed && fixed->tp) {
    tp[0] = fixed->tp;
    job.ntp_allowed = 1;
  }
  gt_planner_result r;
  gt_status s = gt_planner_choose(&hw, &job, &r);
  if (s == GT_OK) snprintf(layout, n, "dp=%d,tp=%d,pp=%d", r.layout.dp, r.layout.tp, r.layout.pp);
  free(layers);
  free(budget);
  return s;
}

gt_status run_print_prediction(gt_backend *be, const gt_run_model *model, const gt_plan *plan, const gt_model *m, int B,
                               int T, int micro_batches, double peak_flops, int offload_window, gt_precision precision,
                               int optim_states, FILE *f) {
  gt_planner_layer *layers;
  gt_planner_extras extras;
  int nl, tp[32];
  GT_TRY(whole_layers(be, model, B, T, &layers, &nl, &extras));
  int S = gt_model_num_pipeline_stages(m), first[GT_PLANNER_MAX_STAGES + 1] = {0};
  gt_status s = GT_OK;
  for (int v = 0; v < S && s == GT_OK; v++) {
    int lo, hi;
    s = gt_model_stage_layers(m, v, &lo, &hi);
    first[v] = lo;
    first[v + 1] = hi + 1;
  }
  gt_planner_hw hw = run_planner_hw(plan->world, peak_flops);
  gt_planner_job job = {.layers = layers,
                        .nlayers = nl,
                        .micro_batches = micro_batches,
                        .schedule = plan->schedule,
                        .chunks = plan->chunks,
                        .zero1 = plan->zero1,
                        .zero = plan->zero,
                        .tp_allowed = tp,
                        .ntp_allowed = tp_sizes(model, plan->world, tp),
                        .offload_window = offload_window,
                        .precision = precision,
                        .optim_states = optim_states,
                        .extras = extras};
  gt_planner_result r;
  if (s == GT_OK) s = gt_planner_estimate(&hw, &job, plan->layout, first, &r);
  if (s == GT_OK) {
    fprintf(f, "prediction (cost model, peak %.1f GFLOP/s per rank):\n", peak_flops / 1e9);
    gt_planner_print(&r, &job, f);
  }
  free(layers);
  return s;
}

static double mib(double b) { return b / (1 << 20); }

/* Host-to-device bytes a second on the copy stream: 8 MiB, best of three.
 * 0 when the device cannot spare the buffer. */
static double copy_bandwidth(gt_backend *be) {
  size_t n = (size_t)8 << 20;
  void *host = NULL, *dev = NULL;
  double best = 0;
  if (gt_backend_host_alloc(be, n, &host) == GT_OK && gt_backend_alloc(be, n, &dev) == GT_OK) {
    gt_stream *cs = gt_backend_copy_stream(be);
    for (int k = 0; k < 3; k++) {
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      if (gt_backend_memcpy(be, dev, host, n, GT_COPY_H2D, cs) != GT_OK || gt_stream_sync(be, cs) != GT_OK) break;
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      if (s > 0 && (double)n / s > best) best = (double)n / s;
    }
  }
  gt_backend_free(be, dev);
  gt_backend_host_free(be, host);
  return best;
}

gt_status run_print_memory(gt_backend *be, const gt_model *m, const gt_estimate_config *ec, int micro_batches,
                           FILE *f) {
  gt_device_estimate e;
  GT_TRY(gt_model_device_estimate_ex(m, ec, &e));
  int optim_states = ec->optim_states;
  gt_device_mem dm = gt_backend_mem(be);
  char budget[64] = "no budget";
  if (dm.limit) snprintf(budget, sizeof budget, "budget %.1f MiB", mib((double)dm.limit));
  fprintf(f, "device memory, expected peak per rank (one micro-batch in flight; %s): %.1f MiB\n", budget,
          mib((double)e.total));
  fprintf(f, "  ");
  for (int k = 0; k < GT_MEM_OTHER; k++)
    fprintf(f, "%s%s %.1f MiB", k ? ", " : "", gt_mem_kind_name((gt_mem_kind)k),
            mib((double)gt_device_estimate_bytes(&e, (gt_mem_kind)k)));
  fprintf(f, "%s\n", ec->optim_shards > 1 ? " (optimizer state: one of the ZeRO-1 shards)" : "");
  if (dm.limit && e.total > dm.limit)
    fprintf(f, "  over the budget by %.1f MiB: %s\n", mib((double)(e.total - dm.limit)),
            gt_model_offloaded(m) ? "a smaller micro-batch (--batch) or sequence (--seq)"
                                  : "offload (--offload W), or a smaller micro-batch or model");
  if (!gt_model_offloaded(m)) {
    fprintf(f, "  master weights, gradients and optimizer state on the device\n");
    return GT_OK;
  }
  gt_offload_stats os = gt_model_offload_stats(m);
  double state = (double)gt_model_buffer_floats(m) * sizeof(float);
  int local = 0;
  for (int i = 0; i < gt_model_num_layers(m); i++) local += gt_model_layer(m, i)->local;
  /* Under bf16 the host also keeps a bf16 twin of the weights, which the
   * window's matrices come from. */
  double twin = gt_model_get_precision(m) == GT_PRECISION_BF16 ? state / 2 : 0;
  fprintf(f,
          "  offloaded: master weights, gradients and optimizer state in host memory (%.1f MiB); the device "
          "holds %d of %d layers' weights, prefetching %d ahead, in slots of %.1f MiB%s\n",
          mib(state * (2 + optim_states) + twin), os.window, local, os.prefetch, mib((double)os.slot_bytes),
          twin > 0 ? " (matrices in bf16, the rest in fp32)" : "");
  /* A step refetches every layer after the update; a window narrower than
   * the layers refetches, in each micro-batch, the layers backward finds
   * evicted. Gradients go back every micro-batch and, after the first,
   * come in again to be added to. */
  int A = micro_batches > 0 ? micro_batches : 1, W = os.window;
  double weights = (double)os.weight_bytes; /* in the compute precision */
  double in = W >= local ? weights : A * weights * (2.0 * local - W) / local;
  in += (A - 1) * state;
  double out = A * state, bw = copy_bandwidth(be);
  fprintf(f, "  transfers a step: %.1f MiB to the device, %.1f MiB back", mib(in), mib(out));
  if (bw > 0) fprintf(f, ": %.1f ms at %.2f GB/s (the copy stream, measured now)", 1e3 * (in + out) / bw, bw / 1e9);
  fprintf(f, "\n");
  return GT_OK;
}
