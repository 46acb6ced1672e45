/* The training loop: micro-batches, gradient accumulation, the reductions
 * a distributed step needs (giant/engine/plan.h), clipping, the update, metrics. */
#include "giant/engine/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/dist.h"
#include "parallel/dp_sync.h"
#include "optim/fault/fault.h"
#include "giant/engine/grid.h"
#include "giant/log.h"
#include "giant/engine/plan.h"
#include "parallel/pp_exec.h"
#include "giant/protocol.h"
#include "optim/layer_update.h"
#include "optim/trainer/telemetry.h"
#include "core/arena.h"
#include "core/data/loader_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "optim/optimizer_engine.h"
#include "optim/trainer/trainer_engine.h"
#include "parallel/dist_engine.h"

struct gt_trainer {
  gt_model *m;
  gt_trainer_config cfg;
  gt_optimizer *opt;
  gt_acts *acts;
  gt_metrics *metrics;
  gt_dist *dist;    /* NULL: one process */
  gt_dp_sync *sync; /* NULL: no data parallelism */
  gt_pp_exec *pipe; /* NULL: no pipeline parallelism */
  gt_batch *held;   /* pipelining a loader's batches: copies of one step's */
  float *counts;    /* device floats: token counts, the loss, reduced over replicas */
  int step;
  int share[3];         /* B, offset, total the loader takes from the next step; B = 0: no change */
  int rank;             /* as launched (GT_RANK): the telemetry's, and the one GT_FAULT names */
  gt_fault_plan faults; /* GT_FAULT: none unless set (and a build with fault points) */
  /* The commit vote (gt_trainer_config.commit_vote): a step whose vote
   * failed here after every reduction finished waits to be applied or
   * dropped (gt_trainer_resolve_step). */
  bool pending;
  float pending_lr, pending_clip;
  bool params_partial; /* ZeRO-1: updated, but the other shards were not gathered */
  uint64_t step_row;   /* the loader's next row when step row_step began */
  bool nonfinite;      /* the last run_step failed on a non-finite loss or norm: */
  double bad_loss, bad_norm;
  int skipped_in_row; /* steps skipped in a row (skip_nonfinite) */
  int row_step;       /* -1: no step began */
  /* update_per_layer (layer_update.c): the thread, whether the model's
   * gradient hook hands layers to it now (the last micro-batch's
   * backward), and how many were done when backward ended */
  gt_layer_update *layer_update;
  bool update_live;
  int updated_early;
  /* ... pipelined without data parallelism, where the model's hook runs
   * after every micro-batch's backward of a layer: the calls this step per
   * layer (the last makes its gradients final), the layers holding a
   * weight tied across stages (final only once gt_pp_exec_sync_tied has
   * summed it), and those of them waiting for that */
  int *hook_calls;
  bool *tied_across, *deferred;
  /* delayed_update: the last step's gradients, their learning rate and
   * clip factor, waiting to be applied during the next backward */
  float *held_grads;
  bool have_held;
  float held_lr, held_clip;
  /* offloaded, one process: the norm's per-parameter sums, made by the
   * last micro-batch's backward as the gradients come back */
  double *sumsq, *sumsq_host; /* in state memory, and read back here */
};

/* A loader reuses its buffers on every call, and a pipeline needs all of a
 * step's micro-batches at once, as does data parallelism, which weighs them
 * by one reduction of all their token counts: keep copies. */
static gt_status hold_batches(gt_trainer *t) {
  const gt_model_config *mc = gt_model_get_config(t->m);
  size_t n = (size_t)mc->B_max * (size_t)mc->T_max;
  t->held = calloc((size_t)t->cfg.grad_accum, sizeof *t->held);
  if (!t->held) return gt_errorf(GT_ENOMEM, "out of memory");
  for (int i = 0; i < t->cfg.grad_accum; i++) {
    t->held[i].inputs = malloc(n * sizeof(int32_t));
    t->held[i].targets = malloc(n * sizeof(int32_t));
    if (!t->held[i].inputs || !t->held[i].targets) return gt_errorf(GT_ENOMEM, "out of memory");
  }
  return GT_OK;
}

/* A layer's gradients are final on the host (the model's gradient hook in
 * one process; with data parallelism, once averaged: gt_dp_sync_on_
 * reduced); with update_per_layer, it is updated. */
static gt_status on_layer_grads(void *ctx, int layer) {
  gt_trainer *t = ctx;
  if (!t->update_live) return GT_OK;
  if (t->hook_calls) {
    if (++t->hook_calls[layer] < t->cfg.grad_accum) return GT_OK; /* more micro-batches to come */
    if (t->tied_across[layer]) {
      t->deferred[layer] = true;
      return GT_OK;
    }
  }
  return gt_layer_update_push(t->layer_update, layer);
}

/* A layer holding a weight tied to another pipeline stage: a mirror of an
 * owner elsewhere, or an owner whose tied user is elsewhere. */
static bool tied_across_stages(gt_model *m, int layer) {
  const gt_layer *l = gt_model_layer(m, layer);
  for (int k = 0; k < l->nparams; k++)
    if (gt_model_param_tied_across_stages(m, l->first_param + k)) return true;
  return false;
}

/* Pipelined, before the schedule runs: the update of the step's layers
 * (or of the last step's, held) begins, and each layer is handed over
 * after its last micro-batch's backward. */
static void begin_pipelined_update(gt_trainer *t) {
  if (!t->layer_update) return;
  if (t->cfg.update_per_layer)
    gt_layer_update_begin(t->layer_update, gt_lr_at(&t->cfg.schedule, t->step), 1.0f, NULL);
  else if (t->have_held)
    gt_layer_update_begin(t->layer_update, t->held_lr, t->held_clip, t->held_grads);
  else
    return;
  t->have_held = false;
  t->update_live = true;
  for (int i = 0; t->hook_calls && i < gt_model_num_layers(t->m); i++) {
    t->hook_calls[i] = 0;
    t->deferred[i] = false;
  }
}

/* What an offloaded model, and the updates that need one, can be trained
 * with. */
static gt_status check_offloading(gt_model *m, const gt_trainer_config *cfg) {
  const gt_plan *plan = cfg->dist ? gt_dist_plan(cfg->dist) : NULL;
  if (!cfg->update_per_layer && !cfg->delayed_update) return GT_OK;
  const char *what = cfg->delayed_update ? "delayed_update" : "update_per_layer";
  if (cfg->update_per_layer && cfg->delayed_update)
    return gt_errorf(GT_EINVAL, "update_per_layer and delayed_update are two ways of updating: choose one");
  if (!gt_model_offloaded(m))
    return gt_errorf(GT_EINVAL,
                     "%s updates an offloaded model's layers on the host: offload the model "
                     "(offload_window > 0)",
                     what);
  /* With data parallelism the layers go to the update thread as their
   * buckets are averaged (gt_dp_sync_on_reduced); the held gradients of the
   * delayed update are the averaged ones, the same on every replica. With
   * tensor parallelism a layer's gradients are final when its backward
   * ends (sequence parallelism's norms are summed inside it), except in a
   * replicated region, summed over the group after backward (a region is
   * not offloaded yet, so this is a guard for when it is). Pipelined, a
   * layer's are final after its last micro-batch's backward, or, holding a
   * weight tied across stages, once the stages have summed it. With
   * ZeRO-1 the buckets are all-reduced as without it, each rank updates
   * its shard's part of each layer, and the shards are gathered after the
   * step. */
  for (int i = 0; plan && i < gt_model_num_layers(m); i++)
    if (gt_model_layer_replicas(m, i) > 1)
      return gt_errorf(GT_EUNSUPPORTED,
                       "%s needs each layer's gradients final when its backward ends, and layer "
                       "'%s' is in a replicated region, whose gradients are summed over the "
                       "tensor-parallel group after backward: leave it off here",
                       what, gt_model_layer(m, i)->name);
  if (cfg->delayed_update) return GT_OK;
  if (cfg->grad_clip > 0 || cfg->skip_nonfinite > 0)
    return gt_errorf(GT_EINVAL,
                     "update_per_layer updates layers before the gradient norm is known: it needs "
                     "grad_clip = 0 (got %g) and skip_nonfinite = 0 (got %d)",
                     cfg->grad_clip, cfg->skip_nonfinite);
  return GT_OK;
}

static void free_held(gt_trainer *t) {
  for (int i = 0; t->held && i < t->cfg.grad_accum; i++) {
    free(t->held[i].inputs);
    free(t->held[i].targets);
  }
  free(t->held);
}

gt_status gt_trainer_create(gt_model *m, const gt_trainer_config *cfg, gt_trainer **out) {
  *out = NULL;
  GT_TRY(gt_fault_check_env()); /* GT_FAULT on a build that cannot play it: fail before anything */
  /* grad_accum 0: the model's pipeline(m) annotation, else 1. */
  gt_trainer_config given = *cfg;
  if (given.grad_accum == 0)
    given.grad_accum = gt_model_pipeline_micro_batches(m) > 0 ? gt_model_pipeline_micro_batches(m) : 1;
  cfg = &given;
  if (cfg->grad_accum < 1)
    return gt_errorf(GT_EINVAL, "grad_accum must be >= 1 (or 0: the model's pipeline annotation), got %d",
                     cfg->grad_accum);
  if (!(cfg->schedule.lr_max >= 0) || !(cfg->schedule.lr_min >= 0))
    return gt_errorf(GT_EINVAL, "learning rates must be >= 0 (got max %g, min %g)", cfg->schedule.lr_max,
                     cfg->schedule.lr_min);
  if (cfg->grad_clip < 0) return gt_errorf(GT_EINVAL, "grad_clip must be >= 0, got %g", cfg->grad_clip);
  GT_TRY(check_offloading(m, cfg));
  gt_trainer *t = calloc(1, sizeof *t);
  if (!t) return gt_errorf(GT_ENOMEM, "out of memory creating a trainer");
  t->m = m;
  t->cfg = *cfg;
  t->cfg.metrics_path = NULL; /* not kept: the caller's string */
  t->dist = cfg->dist;
  t->row_step = -1;
  gt_status s = GT_OK;
  const gt_plan *plan = t->dist ? gt_dist_plan(t->dist) : NULL;
  if (plan && plan->layout.dp > 1)
    s = gt_dp_sync_create(m, gt_grid_comm(gt_dist_grid(t->dist), GT_GRID_DP), plan->bucket_bytes, plan->zero, &t->sync);
  if (s == GT_OK && t->sync && gt_dp_sync_zero1(t->sync)) {
    size_t lo, hi;
    gt_dp_sync_shard(t->sync, &lo, &hi);
    s = gt_optimizer_create_range(m, &cfg->optim, lo, hi, &t->opt);
  } else if (s == GT_OK) {
    s = gt_optimizer_create(m, &cfg->optim, &t->opt);
  }
  if (cfg->grad_accum > 64) s = gt_errorf(GT_EINVAL, "at most 64 micro-batches a step, got %d", cfg->grad_accum);
  if (s == GT_OK && t->dist)
    s = gt_arena_alloc_as(gt_model_arena(m), GT_MEM_COMM, 64 * sizeof(float), (void **)&t->counts);
  if (s == GT_OK && plan && plan->layout.pp > 1) s = gt_pp_exec_create(t->dist, m, cfg->grad_accum, &t->pipe);
  if (s == GT_OK && (t->pipe || (t->sync && cfg->grad_accum > 1))) s = hold_batches(t);
  if (s == GT_OK && !t->pipe) s = gt_acts_create(m, &t->acts); /* a pipeline keeps its own per micro-batch */
  if (s == GT_OK) s = gt_model_set_precision(m, cfg->precision);
  bool by_layer = cfg->update_per_layer || cfg->delayed_update;
  if (s == GT_OK && by_layer) s = gt_layer_update_create(t->opt, gt_model_num_layers(m), &t->layer_update);
  if (s == GT_OK && by_layer && t->sync)
    s = gt_dp_sync_on_reduced(t->sync, on_layer_grads, t);
  else if (s == GT_OK && by_layer)
    s = gt_model_set_grad_hook(m, on_layer_grads, t);
  if (s == GT_OK && by_layer && t->pipe && !t->sync) {
    int L = gt_model_num_layers(m);
    t->hook_calls = calloc((size_t)L, sizeof *t->hook_calls);
    t->tied_across = calloc((size_t)L, sizeof *t->tied_across);
    t->deferred = calloc((size_t)L, sizeof *t->deferred);
    if (!t->hook_calls || !t->tied_across || !t->deferred) s = gt_errorf(GT_ENOMEM, "out of memory");
    for (int i = 0; s == GT_OK && i < L; i++) t->tied_across[i] = tied_across_stages(m, i);
  }
  if (s == GT_OK && cfg->delayed_update)
    s = gt_model_state_alloc_as(m, GT_MEM_GRADS, gt_model_buffer_floats(m) * sizeof(float), (void **)&t->held_grads);
  if (s == GT_OK && gt_model_offloaded(m) && !t->dist && !by_layer) {
    size_t n = (size_t)(gt_model_num_params(m) ? gt_model_num_params(m) : 1);
    s = gt_model_state_alloc_as(m, GT_MEM_SCRATCH, n * sizeof(double), (void **)&t->sumsq);
    if (s == GT_OK && !(t->sumsq_host = malloc(n * sizeof(double)))) s = gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (s == GT_OK) s = gt_metrics_open(cfg->metrics_path, &t->metrics);
  /* Faults name a worker as it was launched (GT_RANK), which stays its
   * name when a reshape numbers the ranks left anew. */
  const char *launched = getenv(GT_ENV_RANK);
  t->rank = launched && *launched ? atoi(launched) : plan ? plan->rank : 0;
  if (s == GT_OK) s = gt_fault_from_env(t->rank, &t->faults);
  if (s == GT_OK && t->dist) s = gt_fault_apply_links(&t->faults, gt_dist_grid(t->dist));
  gt_backend *be = gt_model_backend(m);
  /* MFU needs the machine's peak; measure it once if nobody has. */
  if (s == GT_OK && gt_backend_peak_flops(be) <= 0) s = gt_backend_measure_peak_ex(be, cfg->precision, 512, 0.3, NULL);
  if (s != GT_OK) {
    gt_trainer_destroy(t);
    return s;
  }
  *out = t;
  return GT_OK;
}

void gt_trainer_destroy(gt_trainer *t) {
  if (!t) return;
  if (t->layer_update) {
    gt_layer_update_destroy(t->layer_update);
    if (t->sync)
      gt_dp_sync_on_reduced(t->sync, NULL, NULL);
    else
      gt_model_set_grad_hook(t->m, NULL, NULL);
  }
  if (t->held_grads) gt_model_state_free(t->m, t->held_grads);
  if (t->sumsq) gt_model_state_free(t->m, t->sumsq);
  free(t->sumsq_host);
  free(t->hook_calls);
  free(t->tied_across);
  free(t->deferred);
  gt_acts_destroy(t->acts);
  gt_pp_exec_destroy(t->pipe);
  free_held(t);
  gt_dp_sync_destroy(t->sync);
  if (t->counts) gt_arena_free(gt_model_arena(t->m), t->counts);
  gt_optimizer_destroy(t->opt);
  gt_metrics_close(t->metrics);
  free(t);
}

int gt_trainer_step_index(const gt_trainer *t) { return t->step; }
int gt_trainer_layers_updated_early(const gt_trainer *t) { return t->updated_early; }

void gt_trainer_set_step_index(gt_trainer *t, int step) { t->step = step; }
gt_model *gt_trainer_model(gt_trainer *t) { return t->m; }
gt_dist *gt_trainer_dist(gt_trainer *t) { return t->dist; }
gt_optimizer *gt_trainer_optimizer(gt_trainer *t) { return t->opt; }
gt_dp_sync *gt_trainer_dp_sync(gt_trainer *t) { return t->sync; }

/* After an update made layer by layer (or a held one): under ZeRO-1 each
 * rank updated its shard, which the others now gather; then the next
 * forward's first layers start coming. */
static gt_status layer_update_done(gt_trainer *t) {
  if (t->sync && gt_dp_sync_zero1(t->sync)) {
    t->params_partial = true;
    GT_TRY(gt_dp_sync_gather_params(t->sync));
    t->params_partial = false;
  }
  return gt_model_prefetch(t->m);
}

gt_status gt_trainer_flush(gt_trainer *t) {
  if (!t->have_held) return GT_OK;
  t->have_held = false;
  GT_TRY(gt_optimizer_step_from(t->opt, t->held_lr, t->held_clip, t->held_grads));
  return layer_update_done(t);
}
void gt_trainer_set_overlap(gt_trainer *t, bool overlap) { t->cfg.no_overlap = !overlap; }
gt_pp_exec *gt_trainer_pp_exec(gt_trainer *t) { return t->pipe; }

static int64_t valid_targets(const gt_batch *b) {
  int64_t valid = 0;
  if (!b->targets) return 0;
  for (int64_t k = 0; k < (int64_t)b->B * b->T; k++) valid += b->targets[k] >= 0;
  return valid;
}

/* Every token of a step weighs the same, however the data-parallel
 * replicas share the step's rows (evenly, or by speed): micro-batch i of
 * this replica weighs its valid targets over all replicas' valid targets of
 * micro-batch i, over grad_accum. The gradients are then summed over the
 * replicas. weights[i] for i < n. */
static gt_status micro_weights(gt_trainer *t, const int64_t *valid, int n, double *weights) {
  float counts[64];
  gt_group *dp = t->dist ? gt_dist_dp_group(t->dist) : NULL;
  for (int i = 0; i < n; i++) counts[i] = (float)valid[i];
  if (dp && dp->size > 1) {
    gt_backend *be = gt_model_backend(t->m);
    GT_TRY(gt_backend_upload(be, t->counts, counts, (size_t)n * sizeof(float)));
    GT_TRY(dp->allreduce_sum(dp, t->counts, (size_t)n));
    GT_TRY(gt_backend_download(be, counts, t->counts, (size_t)n * sizeof(float)));
  }
  for (int i = 0; i < n; i++) weights[i] = counts[i] > 0 ? (double)valid[i] / counts[i] / t->cfg.grad_accum : 0;
  return GT_OK;
}

/* The step's micro-batches from the loader into the held copies. */
static gt_status load_held(gt_trainer *t, gt_loader *loader, gt_step_stats *st) {
  for (int i = 0; i < t->cfg.grad_accum; i++) {
    gt_batch b;
    GT_TRY(gt_telemetry_load(loader, &b, &st->telemetry));
    size_t n = (size_t)b.B * (size_t)b.T;
    memcpy(t->held[i].inputs, b.inputs, n * sizeof(int32_t));
    memcpy(t->held[i].targets, b.targets, n * sizeof(int32_t));
    t->held[i].B = b.B;
    t->held[i].T = b.T;
    t->held[i].ntargets = b.ntargets;
    t->held[i].epoch = b.epoch;
    t->held[i].row = b.row;
  }
  return GT_OK;
}

/* Runs micro-batch i, from `batches` or the loader. weights: the step's,
 * from one reduction of every micro-batch's token count (data
 * parallelism), or NULL: this micro-batch's own, which needs no other's
 * count (one process). */
static gt_status micro_batch(gt_trainer *t, gt_loader *loader, const gt_batch *batches, const double *weights, int i,
                             double *loss_sum, gt_step_stats *st) {
  gt_batch b;
  if (batches)
    b = batches[i];
  else
    GT_TRY(gt_telemetry_load(loader, &b, &st->telemetry));
  gt_telemetry_add_batch(&st->telemetry, &b);
  float loss = 0;
  GT_TRY(gt_model_forward(t->m, t->acts, &b, &loss));
  int64_t valid = gt_acts_targets(t->acts);
  double weight;
  if (weights)
    weight = weights[i];
  else
    GT_TRY(micro_weights(t, &valid, 1, &weight));
  float scale = valid ? (float)(weight / (double)valid) : 0.0f; /* d(step loss)/d(token loss) */
  if (t->sync) GT_TRY(gt_dp_sync_begin(t->sync, i == t->cfg.grad_accum - 1, !t->cfg.no_overlap));
  bool last = i == t->cfg.grad_accum - 1;
  if (t->layer_update && last && t->cfg.update_per_layer) {
    /* Each layer is updated once its last gradients are on the host. */
    gt_layer_update_begin(t->layer_update, gt_lr_at(&t->cfg.schedule, t->step), 1.0f, NULL);
    t->update_live = true;
  } else if (t->layer_update && last && t->have_held) {
    /* The previous step's update, layer by layer, once this step no longer
     * reads the layer. */
    gt_layer_update_begin(t->layer_update, t->held_lr, t->held_clip, t->held_grads);
    t->have_held = false;
    t->update_live = true;
  }
  if (last && t->sumsq) GT_TRY(gt_model_sum_grad_squares_next(t->m, t->sumsq));
  gt_status bs = gt_model_backward(t->m, t->acts, scale);
  if (t->update_live) {
    /* With data parallelism, the layers whose buckets end after backward
     * are handed over by gt_dp_sync_finish. */
    t->update_live = t->sync != NULL;
    t->updated_early = gt_layer_update_progress(t->layer_update);
  }
  GT_TRY(bs);
  *loss_sum += weight * loss;
  st->tokens += (int64_t)b.B * b.T;
  st->flops += 3.0 * gt_model_flops(t->m, b.B, b.T);
  st->seq_len = b.T;
  return GT_OK;
}

/* Not pipelined: the step's micro-batches one after the other. With data
 * parallelism their weights come first, from one all-reduce of all their
 * token counts, so the loader's batches are held (one needs no copy). */
static gt_status local_batches(gt_trainer *t, gt_loader *loader, const gt_batch *batches, double *loss_sum,
                               gt_step_stats *st) {
  int n = t->cfg.grad_accum;
  double weights[64];
  gt_batch one;
  if (t->sync) {
    if (!batches && n == 1) {
      GT_TRY(gt_telemetry_load(loader, &one, &st->telemetry));
      batches = &one;
    } else if (!batches) {
      GT_TRY(load_held(t, loader, st));
      batches = t->held;
    }
    int64_t valid[64];
    for (int i = 0; i < n; i++) valid[i] = valid_targets(&batches[i]);
    double w0 = gt_now();
    GT_TRY(micro_weights(t, valid, n, weights)); /* blocks until every replica has its batches */
    st->telemetry.dp_wait_s += gt_now() - w0;
  }
  for (int i = 0; i < n; i++) GT_TRY(micro_batch(t, loader, batches, t->sync ? weights : NULL, i, loss_sum, st));
  return GT_OK;
}

/* Pipelined: every micro-batch of the step goes through the schedule. */
static gt_status pipeline_batches(gt_trainer *t, gt_loader *loader, const gt_batch *batches, gt_step_stats *st) {
  if (!batches) {
    GT_TRY(load_held(t, loader, st));
    batches = t->held;
  }
  if (t->sync) GT_TRY(gt_dp_sync_begin(t->sync, false, false)); /* buckets go after the whole schedule */
  int64_t valid[64];
  double weights[64];
  for (int i = 0; i < t->cfg.grad_accum; i++) valid[i] = valid_targets(&batches[i]);
  GT_TRY(micro_weights(t, valid, t->cfg.grad_accum, weights));
  begin_pipelined_update(t);
  GT_TRY(gt_pp_exec_run(t->pipe, batches, weights, &st->loss));
  if (t->layer_update) t->updated_early = gt_layer_update_progress(t->layer_update);
  for (int i = 0; i < t->cfg.grad_accum; i++) {
    st->tokens += (int64_t)batches[i].B * batches[i].T;
    gt_telemetry_add_batch(&st->telemetry, &batches[i]);
    st->flops += 3.0 * gt_model_flops(t->m, batches[i].B, batches[i].T);
    st->seq_len = batches[i].T;
  }
  return GT_OK;
}

/* Distributed: finish averaging gradients, and make the loss and the
 * gradient norm those of the whole job. */
static gt_status reduce_step(gt_trainer *t, gt_step_stats *st) {
  gt_backend *be = gt_model_backend(t->m);
  gt_group *dp = gt_dist_dp_group(t->dist), *tp = gt_dist_tp_group(t->dist);
  size_t lo = 0, hi = gt_model_buffer_floats(t->m);
  bool zero1 = false;
  if (t->pipe) GT_TRY(gt_pp_exec_sync_tied(t->pipe));
  /* The layers holding a weight tied across stages are final now. */
  for (int i = 0; t->deferred && t->update_live && i < gt_model_num_layers(t->m); i++)
    if (t->deferred[i]) GT_TRY(gt_layer_update_push(t->layer_update, i));
  if (t->sync) {
    GT_TRY(gt_dp_sync_finish(t->sync));
    gt_dp_sync_shard(t->sync, &lo, &hi);
    zero1 = gt_dp_sync_zero1(t->sync);
  }
  GT_TRY(gt_model_sum_region_grads(t->m, lo, hi));
  GT_TRY(gt_grad_norm_dist(t->m, lo, hi, zero1 ? dp : NULL, tp, gt_dist_pp_group(t->dist), &st->grad_norm));
  if (dp->size > 1) {
    /* Each replica's loss is already weighted by its share of the tokens. */
    float sums[2] = {st->loss, (float)st->tokens};
    GT_TRY(gt_backend_upload(be, t->counts, sums, sizeof sums));
    GT_TRY(dp->allreduce_sum(dp, t->counts, 2));
    GT_TRY(gt_backend_download(be, sums, t->counts, sizeof sums));
    st->loss = sums[0];
    st->tokens = (int64_t)sums[1];
  }
  return GT_OK;
}

/* Every rank of the job says it reached the update with every reduction
 * done: an all-reduce that completes on a rank only once all of them
 * contributed. A rank that completes it knows every rank can apply the
 * step; a rank whose vote fails cannot know, and keeps the step pending. */
static gt_status commit_vote(gt_trainer *t) {
  gt_comm *world = gt_grid_world(gt_dist_grid(t->dist));
  if (!world || gt_comm_size(world) == 1) return GT_OK;
  /* In device memory, as every collective's buffer: on GPUs the world is
   * an NCCL communicator. */
  gt_backend *be = gt_model_backend(t->m);
  float one = 1.0f;
  GT_TRY(gt_backend_upload(be, t->counts, &one, sizeof one));
  GT_TRY(gt_comm_allreduce(world, t->counts, 1, GT_F32, GT_COMM_SUM));
  GT_TRY(gt_backend_download(be, &one, t->counts, sizeof one));
  if (one != (float)gt_comm_size(world))
    return gt_errorf(GT_EFORMAT, "the step's commit vote counted %g of %d ranks", (double)one, gt_comm_size(world));
  return GT_OK;
}

/* The update, once the step is decided. Under ZeRO-1 the updated shards
 * are then all-gathered (gather); if that fails, the step still counts as
 * applied (the step index moves on), since this rank's shard was. */
static gt_status apply_update(gt_trainer *t, float lr, float clip, bool gather) {
  GT_TRY(gt_optimizer_step(t->opt, lr, clip));
  if (t->sync && gt_dp_sync_zero1(t->sync)) {
    t->params_partial = true;
    if (!gather) return GT_OK;
    gt_status s = gt_dp_sync_gather_params(t->sync);
    if (s != GT_OK) {
      t->step++;
      return s;
    }
    t->params_partial = false;
  }
  /* Offloaded, the next forward's first layers start coming now. */
  return gt_model_prefetch(t->m);
}

static gt_status run_step(gt_trainer *t, gt_loader *loader, const gt_batch *batches, gt_step_stats *out) {
  t->nonfinite = false; /* set again once the loss and the norm are known */
  if (t->pending)
    return gt_errorf(GT_ESTATE,
                     "step %d is pending after a failed commit vote: resolve it first "
                     "(gt_trainer_resolve_step)",
                     t->step);
  gt_step_stats st = {.step = t->step, .micro_batches = t->cfg.grad_accum};
  if (loader) {
    t->step_row = st.first_row = gt_loader_next_row(loader);
    t->row_step = t->step;
  }
  double t0 = gt_now(), loss_sum = 0;
  gt_group *tp = t->dist ? gt_dist_tp_group(t->dist) : NULL;
  double tp0 = tp ? tp->busy_s : 0;
  gt_telemetry_begin();
  GT_TRY(gt_model_zero_grads(t->m));
  /* GT_FAULT nangrad: a NaN in this rank's gradients before they are
   * accumulated and reduced, as a flipped bit would put there. */
  if (gt_fault_nangrad(&t->faults, t->step)) {
    float nan = NAN;
    size_t lo, hi; /* the first float this rank holds (all of them, unless ZeRO-2 shards them) */
    gt_model_grad_range(t->m, &lo, &hi);
    GT_TRY(gt_backend_upload(gt_model_state_backend(t->m), gt_model_grad_at(t->m, lo), &nan, sizeof nan));
    gt_model_grads_changed(t->m);
  }
  if (t->pipe) {
    GT_TRY(pipeline_batches(t, loader, batches, &st));
  } else {
    GT_TRY(local_batches(t, loader, batches, &loss_sum, &st));
    st.loss = (float)loss_sum;
  }
  if (loader) st.rows = gt_loader_next_row(loader) - st.first_row;
  gt_telemetry_after_compute(&st.telemetry, t->m, t->pipe, t0, t->cfg.compute_wall_time, t->rank);
  /* GT_FAULT's faults for the step, where compute is measured: their sleeps
   * count as compute, since they stand for a slow device. */
  st.telemetry.compute_s += gt_fault_step(&t->faults, t->step, st.telemetry.compute_s, &st.loss);
  st.telemetry.tp_wait_s = tp ? tp->busy_s - tp0 : 0;
  if (t->dist) {
    gt_status rs = reduce_step(t, &st);
    t->update_live = false;
    GT_TRY(rs);
    gt_telemetry_after_reduce(&st.telemetry, t->sync);
  } else if (t->sumsq) {
    size_t bytes = (size_t)gt_model_num_params(t->m) * sizeof(double);
    GT_TRY(gt_backend_download(gt_model_state_backend(t->m), t->sumsq_host, t->sumsq, bytes));
    st.grad_norm = gt_grad_norm_of_squares(t->m, t->sumsq_host);
  } else {
    GT_TRY(gt_grad_norm(t->m, &st.grad_norm));
  }
  /* The norm was summed while the last layers were being updated. */
  if (t->layer_update) GT_TRY(gt_layer_update_finish(t->layer_update));
  t->nonfinite = !isfinite(st.loss) || !isfinite(st.grad_norm);
  t->bad_loss = st.loss;
  t->bad_norm = st.grad_norm;
  if (t->nonfinite)
    return gt_errorf(GT_ERANGE,
                     "step %d: loss %g, gradient norm %g: training diverged; lower the learning rate or "
                     "enable gradient clipping",
                     t->step, st.loss, st.grad_norm);
  st.lr = gt_lr_at(&t->cfg.schedule, t->step);
  float clip = gt_clip_factor(st.grad_norm, t->cfg.grad_clip);
  if (t->cfg.commit_vote && t->dist) {
    t->pending = true;
    t->pending_lr = st.lr;
    t->pending_clip = clip;
    GT_TRY(commit_vote(t));
    t->pending = false;
  }
  if (t->cfg.delayed_update) {
    /* Held aside for the next step's backward to apply. */
    memcpy(t->held_grads, gt_model_grads(t->m), gt_model_buffer_floats(t->m) * sizeof(float));
    t->have_held = true;
    t->held_lr = st.lr;
    t->held_clip = clip;
  }
  /* Layer by layer, the update was made during backward (or is held for
   * the next one). */
  if (t->layer_update) {
    gt_status us = layer_update_done(t);
    if (us != GT_OK && t->params_partial) t->step++; /* applied here, as apply_update counts it */
    GT_TRY(us);
  } else {
    GT_TRY(apply_update(t, st.lr, clip, true));
  }
  gt_backend *be = gt_model_backend(t->m);
  GT_TRY(gt_stream_sync(be, NULL));
  st.seconds = st.telemetry.step_s = gt_now() - t0;
  st.tokens_per_s = st.tokens / st.seconds;
  st.mfu = gt_backend_peak_flops(be) > 0 ? st.flops / st.seconds / gt_backend_peak_flops(be) : 0;
  st.mem_peak = gt_arena_peak(gt_model_arena(t->m));
  GT_TRY(gt_metrics_write(t->metrics, &st));
  if (t->cfg.print_every > 0 && t->step % t->cfg.print_every == 0) gt_metrics_print(stdout, &st);
  t->step++;
  if (out) *out = st;
  return GT_OK;
}

bool gt_trainer_step_pending(const gt_trainer *t) { return t->pending; }
bool gt_trainer_params_partial(const gt_trainer *t) { return t->params_partial; }
bool gt_trainer_diverged(const gt_trainer *t) { return t->nonfinite; }
bool gt_trainer_step_row(const gt_trainer *t, uint64_t *row, int *step) {
  if (t->row_step < 0) return false;
  *row = t->step_row;
  *step = t->row_step;
  return true;
}

gt_status gt_trainer_resolve_step(gt_trainer *t, bool apply) {
  if (!t->pending) return gt_errorf(GT_ESTATE, "no step is pending (step index %d)", t->step);
  t->pending = false;
  if (!apply) return GT_OK;
  GT_TRY(apply_update(t, t->pending_lr, t->pending_clip, false));
  t->step++;
  return GT_OK;
}

gt_status gt_trainer_set_rows(gt_trainer *t, int B, int offset, int total) {
  int B_max = gt_model_get_config(t->m)->B_max;
  if (B < 1 || B > B_max)
    return gt_errorf(GT_EINVAL, "a share of %d rows is outside 1..%d, the B_max the model's activations hold", B,
                     B_max);
  if (offset < 0 || total < B || offset > total - B)
    return gt_errorf(GT_EINVAL, "a share of %d rows at offset %d does not fit in a group micro-batch of %d", B, offset,
                     total);
  GT_TRY(gt_model_check_rows(t->m, B));
  t->share[0] = B;
  t->share[1] = offset;
  t->share[2] = total;
  return GT_OK;
}

gt_status gt_trainer_step(gt_trainer *t, gt_loader *loader, gt_step_stats *stats) {
  if (t->share[0]) { /* between steps, so every replica's stream turns at the same row */
    GT_TRY(gt_loader_reshare(loader, t->share[0], t->share[1], t->share[2]));
    t->share[0] = 0;
  }
  gt_status s = run_step(t, loader, NULL, stats);
  if (s == GT_OK) t->skipped_in_row = 0;
  if (!t->nonfinite || t->cfg.skip_nonfinite <= 0 || !loader) return s;
  /* Not finite: nothing changed. Once more on the same samples. */
  uint64_t row = t->step_row;
  gt_warn(
      "step %d: loss %g, gradient norm %g: not finite; the step changed nothing and runs again on the same "
      "samples (rows from %llu)",
      t->step, t->bad_loss, t->bad_norm, (unsigned long long)row);
  GT_TRY(gt_loader_restart_at(loader, row));
  s = run_step(t, loader, NULL, stats);
  if (s == GT_OK) t->skipped_in_row = 0;
  if (!t->nonfinite) return s;
  uint64_t end = gt_loader_next_row(loader);
  if (++t->skipped_in_row > t->cfg.skip_nonfinite)
    return gt_errorf(GT_ERANGE,
                     "step %d: loss or gradient norm not finite in %d steps in a row, each run twice: "
                     "training diverged; lower the learning rate or enable gradient clipping",
                     t->step, t->skipped_in_row);
  gt_warn(
      "step %d: not finite again on the same samples: rows %llu..%llu are skipped (%d of at most %d steps in "
      "a row)",
      t->step, (unsigned long long)row, (unsigned long long)end, t->skipped_in_row, t->cfg.skip_nonfinite);
  if (stats) {
    memset(stats, 0, sizeof *stats);
    *stats = (gt_step_stats){.step = t->step, .loss = NAN, .first_row = row, .rows = end - row, .skipped = true};
  }
  t->step++;
  return GT_OK;
}

gt_status gt_trainer_step_batches(gt_trainer *t, const gt_batch *batches, int n, gt_step_stats *stats) {
  if (n != t->cfg.grad_accum)
    return gt_errorf(GT_EINVAL, "%d micro-batches given, the trainer accumulates %d", n, t->cfg.grad_accum);
  return run_step(t, NULL, batches, stats);
}
