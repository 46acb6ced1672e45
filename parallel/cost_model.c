/* The planner's cost model: one layout's predicted step time and memory
 * (see parallel/planner.h for the formulas), the search over layouts, and the
 * printed plan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "giant/engine/grid.h"
#include "parallel/planner.h"
#include "giant/engine/pipeline.h"
#include "giant/group.h"

static double ring_allreduce(double bytes, int k, const gt_planner_hw *hw) {
  if (k <= 1 || bytes <= 0) return 0;
  return 2.0 * (k - 1) / k * bytes / hw->ar_bandwidth + 2.0 * (k - 1) * hw->ar_latency;
}

static gt_status check_inputs(const gt_planner_hw *hw, const gt_planner_job *job) {
  if (!hw || !job || !job->layers || job->nlayers < 1 || hw->world < 1)
    return gt_errorf(GT_EINVAL, "the planner needs hardware (world >= 1) and a job with at least one layer");
  if (!(hw->peak_flops > 0) || !(hw->p2p_bandwidth > 0) || !(hw->ar_bandwidth > 0) || !(hw->p2p_latency >= 0) ||
      !(hw->ar_latency >= 0) || !isfinite(hw->peak_flops))
    return gt_errorf(GT_EINVAL,
                     "planner hardware needs peak_flops and bandwidths > 0 and latencies >= 0 (got peak %g, p2p %g B/s "
                     "%g s, all-reduce %g B/s %g s)",
                     hw->peak_flops, hw->p2p_bandwidth, hw->p2p_latency, hw->ar_bandwidth, hw->ar_latency);
  if (!(hw->dp_overlap >= 0 && hw->dp_overlap <= 1))
    return gt_errorf(GT_EINVAL, "dp_overlap is a share of the all-reduce, 0..1; got %g", hw->dp_overlap);
  for (int r = 0; r < hw->world; r++) {
    if (hw->speed && !(hw->speed[r] > 0 && isfinite(hw->speed[r])))
      return gt_errorf(GT_EINVAL, "rank %d has speed %g: speeds must be positive", r, hw->speed[r]);
    if (hw->mem_bytes && !(hw->mem_bytes[r] >= 0))
      return gt_errorf(GT_EINVAL, "rank %d has memory budget %g: budgets must be >= 0", r, hw->mem_bytes[r]);
  }
  if (job->offload_window < 0)
    return gt_errorf(GT_EINVAL, "an offload window of %d layers: use 0 (none) or more", job->offload_window);
  if (job->offload_window > 0 && !(hw->copy_bandwidth > 0 && isfinite(hw->copy_bandwidth)))
    return gt_errorf(GT_EINVAL, "offloading needs the host-device copy bandwidth (copy_bandwidth > 0), got %g",
                     hw->copy_bandwidth);
  if (job->micro_batches < 1 || job->chunks < 1)
    return gt_errorf(GT_EINVAL, "the planner needs micro_batches >= 1 and chunks >= 1 (got %d, %d)", job->micro_batches,
                     job->chunks);
  if (job->precision != GT_PRECISION_FP32 && job->precision != GT_PRECISION_BF16)
    return gt_errorf(GT_EINVAL, "unknown precision %d for the planner: use GT_PRECISION_FP32 or GT_PRECISION_BF16",
                     (int)job->precision);
  for (int i = 0; i < job->nlayers; i++) {
    const gt_planner_layer *x = &job->layers[i];
    if (!(x->window_bytes >= 0 && isfinite(x->window_bytes) && x->matmul_bytes >= 0 && isfinite(x->matmul_bytes)))
      return gt_errorf(GT_EINVAL, "layer %d has window bytes %g and matmul bytes %g: both must be >= 0", i,
                       x->window_bytes, x->matmul_bytes);
  }
  if (job->chunks > 1 && job->schedule != GT_PP_INTERLEAVED)
    return gt_errorf(GT_EINVAL, "%d chunks per rank needs the interleaved schedule, not %s", job->chunks,
                     gt_pp_name(job->schedule));
  return GT_OK;
}

/* Offloaded: the fp32 bytes of a layer's weight slot (its tied weights
 * too), what a fetch of it moves in the compute precision, and what its
 * slot holds: under bf16 the matmul-only weights in bf16 alone, the rest
 * in fp32 with a bf16 copy beside (core/model/offload.c). */
static double held_bytes(const gt_planner_layer *x) { return x->window_bytes > 0 ? x->window_bytes : x->param_bytes; }

static double fetch_bytes(const gt_planner_layer *x, bool bf16) {
  double w = held_bytes(x), mm = bf16 ? fmin(x->matmul_bytes, w) : 0;
  return w - mm / 2;
}

/* The bytes the arena sets aside for a flat buffer of `bytes`. */
static double block_bytes(double bytes) { return (double)gt_arena_block_size((size_t)ceil(bytes)); }

static double slot_bytes(const gt_planner_layer *x, bool bf16) {
  double w = held_bytes(x), mm = bf16 ? fmin(x->matmul_bytes, w) : 0;
  return bf16 ? (w - mm) * 1.5 + mm / 2 : w;
}

gt_status gt_planner_estimate(const gt_planner_hw *hw, const gt_planner_job *job, gt_grid_layout lay, const int *first,
                              gt_planner_result *out) {
  GT_TRY(check_inputs(hw, job));
  GT_TRY(gt_grid_check(&lay, hw->world));
  int pp = lay.pp, tp = lay.tp, dp = lay.dp, v = job->chunks, n = pp * v, L = job->nlayers;
  if (n > GT_PLANNER_MAX_STAGES || n > L)
    return gt_errorf(GT_EINVAL, "pp=%d x %d chunks = %d pipeline stages: at most one per layer (%d) and %d in all", pp,
                     v, n, L, GT_PLANNER_MAX_STAGES);
  if (job->micro_batches < dp)
    return gt_errorf(GT_EINVAL, "dp=%d replicas need at least %d micro-batches per step, got %d", dp, dp,
                     job->micro_batches);
  *out = (gt_planner_result){.layout = lay,
                             .schedule = job->schedule,
                             .chunks = v,
                             .nstages = n,
                             .micro_batches = (job->micro_batches + dp - 1) / dp};
  gt_pp_schedule *sched;
  GT_TRY(gt_pp_schedule_build(job->schedule, pp, out->micro_batches, v, &sched));

  /* A pipeline rank is as fast and as roomy as the worst of the dp x tp ranks that hold its stage. */
  double speed[GT_PLANNER_MAX_STAGES], budget[GT_PLANNER_MAX_STAGES];
  for (int s = 0; s < pp; s++) {
    speed[s] = INFINITY;
    budget[s] = INFINITY;
    for (int d = 0; d < dp; d++)
      for (int t = 0; t < tp; t++) {
        int r = gt_grid_rank_of(&lay, &(gt_grid_coords){.dp = d, .tp = t, .pp = s});
        speed[s] = fmin(speed[s], hw->speed ? hw->speed[r] : 1);
        budget[s] = fmin(budget[s], hw->mem_bytes ? hw->mem_bytes[r] : INFINITY);
      }
  }
  /* Weights (sharded by ZeRO-3; its slots are not counted), gradients
   * (sharded by ZeRO-2; its staging is not counted), the optimizer's
   * states (sharded by ZeRO-1) and, under bf16, the parameters' bf16 copy
   * (ZeRO-3: only the slots'): bytes per parameter byte. */
  bool off = job->offload_window > 0, bf16 = job->precision == GT_PRECISION_BF16;
  int states = job->optim_states > 0 ? job->optim_states : 2;
  double shards = job->zero1 ? dp : 1, state_factor = (job->zero >= 3 ? 1.0 / dp : 1) +
                                                      (job->zero >= 2 ? 1.0 / dp : 1) + states / shards +
                                                      (bf16 && job->zero < 3 ? 0.5 : 0);
  /* Micro-batches in flight on each pipeline rank, and what the rank holds
   * beside its layers whatever the cut: per micro-batch the gradient
   * buffers and the batch, once the scratch and the trainer's buffers. */
  double flight[GT_PLANNER_MAX_STAGES] = {0}, fixed[GT_PLANNER_MAX_STAGES];
  double scratch = job->extras.scratch_bytes + (off ? 0 : job->extras.norm_bytes);
  for (int r = 0; r < pp; r++) {
    int live = 0;
    for (int i = 0; i < sched->nsteps[r]; i++) {
      live += sched->steps[r][i].op == GT_PP_FORWARD ? 1 : -1;
      if (live > flight[r]) flight[r] = live;
    }
    fixed[r] = scratch + (hw->world > 1 ? job->extras.comm_bytes : 0) + job->extras.act_bytes * flight[r];
  }
  /* Offloaded, a rank holds `window` weight slots and 2 gradient slots of
   * the widest layer (its share of it under tp) whatever the cut, and the
   * activations. */
  double widest_w = 0, widest_g = 0;
  for (int i = 0; i < L; i++) {
    widest_w = fmax(widest_w, slot_bytes(&job->layers[i], bf16));
    widest_g = fmax(widest_g, held_bytes(&job->layers[i]));
  }
  double slots = off ? (job->offload_window * widest_w + 2 * widest_g) / tp : 0;

  int *cut = out->first;
  gt_status st = GT_OK;
  if (first) {
    bool ok = first[0] == 0 && first[n] == L;
    for (int j = 0; j < n; j++) ok = ok && first[j] < first[j + 1];
    if (!ok) {
      st = gt_errorf(GT_EINVAL, "a stage cut must start at 0, end at %d and give each of %d stages a layer", L, n);
      goto end;
    }
    memcpy(cut, first, (size_t)(n + 1) * sizeof *cut);
  } else {
    /* Each chunk's own peak of micro-batches in flight, and 1/v of the
     * rank's memory each: conservative for interleaved, exact otherwise.
     * Per-rank amounts are scaled by tp: a rank holds 1/tp of its stage. */
    double vspeed[GT_PLANNER_MAX_STAGES], vmem[GT_PLANNER_MAX_STAGES], vflight[GT_PLANNER_MAX_STAGES] = {0};
    for (int r = 0; r < pp; r++) {
      int live[GT_PLANNER_MAX_STAGES] = {0};
      for (int i = 0; i < sched->nsteps[r]; i++) {
        gt_pp_step t = sched->steps[r][i];
        int j = gt_pp_virtual_stage(sched, r, t.chunk);
        live[j] += t.op == GT_PP_FORWARD ? 1 : -1;
        if (live[j] > vflight[j]) vflight[j] = live[j];
      }
    }
    for (int j = 0; j < n; j++) {
      vspeed[j] = speed[j % pp];
      vmem[j] = fmax(0, budget[j % pp] - slots - fixed[j % pp]) * tp / v;
    }
    gt_planner_stages spec = {.n = n,
                              .speed = vspeed,
                              .mem_bytes = vmem,
                              .in_flight = vflight,
                              .state_factor = state_factor,
                              .offloaded = off};
    st = gt_planner_partition(job->layers, L, &spec, cut);
    if (st == GT_ENOMEM) st = GT_OK; /* the closest cut; the shortfall below says by how much */
    if (st != GT_OK) goto end;
  }

  double fwd[GT_PLANNER_MAX_STAGES], bwd[GT_PLANNER_MAX_STAGES], act[GT_PLANNER_MAX_STAGES];
  double params[GT_PLANNER_MAX_STAGES] = {0}, boundary = 0;
  double act_rank[GT_PLANNER_MAX_STAGES] = {0}, attn_rank[GT_PLANNER_MAX_STAGES] = {0};
  int held[GT_PLANNER_MAX_STAGES] = {0}; /* layers per pipeline rank */
  for (int j = 0; j < n; j++) held[j % pp] += cut[j + 1] - cut[j];
  double moved[GT_PLANNER_MAX_STAGES] = {0}; /* offloaded: bytes a step, per pipeline rank */
  int mb = out->micro_batches;
  for (int j = 0; j < n; j++) {
    double flops = 0, comm = 0;
    act[j] = 0;
    for (int i = cut[j]; i < cut[j + 1]; i++) {
      const gt_planner_layer *x = &job->layers[i];
      flops += x->flops;
      act[j] += x->act_bytes / tp;
      act_rank[j % pp] += x->act_bytes / tp;
      attn_rank[j % pp] += x->attn_bytes / tp;
      params[j % pp] += x->param_bytes / tp;
      comm += x->tp_allreduces * ring_allreduce(x->tp_allreduce_bytes, tp, hw);
    }
    double compute = flops / (speed[j % pp] * hw->peak_flops * tp);
    fwd[j] = compute + comm;
    bwd[j] = 2 * compute + comm;
    if (off) {
      /* Per micro-batch: the weights come in for forward and again for
       * backward (a window as wide as the rank's layers keeps them: once a
       * step), the gradients go out and, after the first micro-batch, come
       * in to be added to. Transfers overlap compute. */
      double w = 0, g = 0; /* weights in, in the compute precision; gradients, fp32 */
      for (int i = cut[j]; i < cut[j + 1]; i++) {
        w += fetch_bytes(&job->layers[i], bf16) / tp;
        g += held_bytes(&job->layers[i]) / tp;
      }
      bool keeps = job->offload_window >= held[j % pp];
      double in_f = keeps ? w / mb : w, in_b = keeps ? 0 : w, grads = g + g * (mb - 1) / mb;
      fwd[j] = fmax(fwd[j], in_f / hw->copy_bandwidth);
      bwd[j] = fmax(bwd[j], (in_b + grads) / hw->copy_bandwidth);
      moved[j % pp] += mb * (in_f + in_b + grads);
    }
    out->stage_seconds[j] = fwd[j] + bwd[j];
    if (j + 1 < n) boundary = fmax(boundary, job->layers[cut[j + 1] - 1].out_bytes);
  }
  double p2p = pp > 1 ? hw->p2p_latency + boundary / hw->p2p_bandwidth : 0;
  gt_pp_sim_result sim;
  st = gt_pp_simulate(sched, &(gt_pp_costs){.fwd = fwd, .bwd = bwd, .p2p_seconds = p2p, .act_bytes = act}, &sim);
  if (st != GT_OK) goto end;
  out->pipeline_seconds = sim.makespan;
  out->bubble = sim.bubble;
  for (int s = 0; s < pp; s++) {
    double *k = out->mem_kinds[s];
    if (off) {
      k[GT_MEM_OFFLOAD] = slots;
    } else {
      k[GT_MEM_PARAMS] = k[GT_MEM_GRADS] = block_bytes(params[s]);
      k[GT_MEM_OPTIMIZER] = states * block_bytes(params[s] / shards);
      if (bf16) k[GT_MEM_BF16_COPY] = block_bytes(params[s] / 2);
    }
    /* The attention share of the rank's saved tensors, of its peak. */
    double attn = act_rank[s] > 0 ? sim.peak_act_bytes[s] * attn_rank[s] / act_rank[s] : 0;
    k[GT_MEM_ATTENTION] = attn;
    k[GT_MEM_ACTIVATIONS] = sim.peak_act_bytes[s] - attn + job->extras.act_bytes * flight[s];
    k[GT_MEM_SCRATCH] = scratch;
    k[GT_MEM_COMM] = hw->world > 1 ? job->extras.comm_bytes : 0;
    out->mem_bytes[s] = 0;
    for (int c = 0; c < GT_MEM_KINDS; c++) out->mem_bytes[s] += k[c];
    if (moved[s] > out->offload_bytes) out->offload_bytes = moved[s];
    out->dp_seconds = fmax(out->dp_seconds, ring_allreduce(params[s], dp, hw));
  }
  gt_pp_sim_free(&sim);
  if (off) out->offload_seconds = out->offload_bytes / hw->copy_bandwidth;
  out->step_seconds = out->pipeline_seconds + (1 - hw->dp_overlap) * out->dp_seconds;
  out->mem_shortfall = -INFINITY;
  for (int r = 0; r < hw->world; r++) {
    gt_grid_coords c;
    gt_grid_coords_of(&lay, r, &c);
    double over = out->mem_bytes[c.pp] - (hw->mem_bytes ? hw->mem_bytes[r] : INFINITY);
    if (over > out->mem_shortfall) {
      out->mem_shortfall = over;
      out->short_rank = r;
    }
  }
end:
  gt_pp_schedule_free(sched);
  return st;
}

static bool tp_allowed(const gt_planner_job *job, int tp) {
  if (!job->tp_allowed || job->ntp_allowed < 1) return tp == 1;
  for (int i = 0; i < job->ntp_allowed; i++)
    if (job->tp_allowed[i] == tp) return true;
  return false;
}

gt_status gt_planner_choose(const gt_planner_hw *hw, const gt_planner_job *job, gt_planner_result *out) {
  GT_TRY(check_inputs(hw, job));
  int W = hw->world, found = 0;
  gt_planner_result *best = malloc(sizeof *best), *near = malloc(sizeof *near), *cur = malloc(sizeof *cur);
  gt_status st = GT_OK;
  if (!best || !near || !cur) {
    st = gt_errorf(GT_ENOMEM, "out of host memory choosing a layout");
    goto end;
  }
  best->step_seconds = INFINITY;
  near->mem_shortfall = INFINITY;
  for (int pp = 1; pp <= W; pp++)
    for (int tp = 1; pp * tp <= W; tp++) {
      int dp = W / (pp * tp);
      if ((job->fixed.dp && job->fixed.dp != dp) || (job->fixed.tp && job->fixed.tp != tp) ||
          (job->fixed.pp && job->fixed.pp != pp))
        continue;
      if (W % (pp * tp) || !tp_allowed(job, tp) || pp * job->chunks > job->nlayers ||
          pp * job->chunks > GT_PLANNER_MAX_STAGES || job->micro_batches < dp)
        continue;
      if (job->schedule == GT_PP_INTERLEAVED && ((job->micro_batches + dp - 1) / dp) % pp) continue;
      st = gt_planner_estimate(hw, job, (gt_grid_layout){.dp = dp, .tp = tp, .pp = pp}, NULL, cur);
      if (st != GT_OK) goto end;
      found++;
      if (cur->mem_shortfall <= 0 && cur->step_seconds < best->step_seconds * (1 - 1e-12)) *best = *cur;
      if (cur->mem_shortfall < near->mem_shortfall) *near = *cur;
    }
  if (!found) {
    st = gt_errorf(GT_EINVAL,
                   "no layout of %d ranks suits this job (%d layers, %d micro-batches, %s with %d chunks, allowed tp "
                   "sizes %s, fixed factors dp=%d,tp=%d,pp=%d with 0 free): allow more tensor-parallel sizes, more "
                   "micro-batches or another schedule, or fix fewer factors",
                   W, job->nlayers, job->micro_batches, gt_pp_name(job->schedule), job->chunks,
                   job->tp_allowed ? "as given" : "1 only", job->fixed.dp, job->fixed.tp, job->fixed.pp);
  } else if (!isfinite(best->step_seconds)) {
    gt_grid_coords c;
    gt_grid_coords_of(&near->layout, near->short_rank, &c);
    double near_need = near->mem_bytes[c.pp];
    char parts[512];
    gt_planner_mem_text(near->mem_kinds[c.pp], parts, sizeof parts);
    st = gt_errorf(GT_ENOMEM,
                   "no layout of %d ranks fits in memory: the closest, dp=%d,tp=%d,pp=%d, needs %.1f MiB more on rank "
                   "%d: its expected peak is %.1f MiB (%s); add ranks or memory, allow tensor parallelism, use ZeRO-1 "
                   "or smaller micro-batches",
                   W, near->layout.dp, near->layout.tp, near->layout.pp, near->mem_shortfall / (1 << 20),
                   near->short_rank, near_need / (1 << 20), parts);
    *out = *near;
  } else {
    *out = *best;
  }
end:
  free(best);
  free(near);
  free(cur);
  return st;
}

void gt_planner_mem_text(const double *kinds, char *buf, size_t n) {
  size_t used = 0;
  if (n) buf[0] = '\0';
  for (int k = 0; k < GT_MEM_KINDS && used < n; k++) {
    if (!(kinds[k] > 0)) continue;
    int w = snprintf(buf + used, n - used, "%s%s %.1f MiB", used ? ", " : "", gt_mem_kind_name((gt_mem_kind)k),
                     kinds[k] / (1 << 20));
    used += w < 0 ? 0 : (size_t)w;
  }
}

void gt_planner_print(const gt_planner_result *e, const gt_planner_job *job, FILE *f) {
  fprintf(f, "plan: dp=%d,tp=%d,pp=%d  schedule %s", e->layout.dp, e->layout.tp, e->layout.pp, gt_pp_name(e->schedule));
  if (e->chunks > 1) fprintf(f, " (%d chunks per rank)", e->chunks);
  fprintf(f, ", %d micro-batches per replica\n", e->micro_batches);
  fprintf(f, "predicted step %.4g s: pipeline %.4g s (bubble %.1f%%), gradient all-reduce %.4g s (%.4g s exposed)\n",
          e->step_seconds, e->pipeline_seconds, 100 * e->bubble, e->dp_seconds, e->step_seconds - e->pipeline_seconds);
  fprintf(f, "%-6s %-5s %-12s %-7s %s\n", "stage", "rank", "layers", "count", "fwd+bwd per micro-batch");
  for (int j = 0; j < e->nstages; j++) {
    char range[32];
    snprintf(range, sizeof range, "%d-%d", e->first[j], e->first[j + 1] - 1);
    fprintf(f, "%-6d %-5d %-12s %-7d %.4g s\n", j, j % e->layout.pp, range, e->first[j + 1] - e->first[j],
            e->stage_seconds[j]);
  }
  for (int s = 0; s < e->layout.pp; s++) {
    char parts[512];
    gt_planner_mem_text(e->mem_kinds[s], parts, sizeof parts);
    fprintf(f, "memory, pipeline rank %d: %.1f MiB%s: %s\n", s, e->mem_bytes[s] / (1 << 20),
            job && job->offload_window > 0 ? " (offloaded: the window and activations)"
            : job && job->zero >= 3        ? " (ZeRO-3)"
            : job && job->zero >= 2        ? " (ZeRO-2)"
            : job && job->zero1            ? " (ZeRO-1)"
                                           : "",
            parts);
  }
  if (job && job->offload_window > 0)
    fprintf(f,
            "offloaded, window %d: %.1f MiB a step between host and device, %.4g s of transfers beside "
            "compute\n",
            job->offload_window, e->offload_bytes / (1 << 20), e->offload_seconds);
  if (e->mem_shortfall > 0)
    fprintf(f, "does not fit: %.1f MiB over budget on rank %d\n", e->mem_shortfall / (1 << 20), e->short_rank);
}
