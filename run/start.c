/* Starting a run (giant/run.h, gt_run_start): the plan from the model's
 * annotations, --plan and the planner; the rows each replica takes; the
 * model, its trainer and data; the resume from the newest checkpoint; and
 * what watches the job (the fail-slow monitor, --rebalance, --reshape). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hf.h"
#include "giant/engine/grid.h"
#include "giant/log.h"
#include "parallel/planner.h"
#include "failslow.h"
#include "planning.h"
#include "run_internal.h"
#include "core/data/loader_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/dist.h"
#include "giant/engine/init.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "giant/group.h"
#include "parallel/plan_engine.h"
#include "resilience/mitigate/rebalance.h"

/* The peak FLOP/s the planner works with: measured once, on the lead rank,
 * and shared through the store so that every rank plans alike. */
static gt_status shared_peak(gt_run *r) {
  gt_job *job = r->job;
  if (job->rank == 0) {
    GT_TRY(gt_backend_measure_peak_ex(r->be, r->precision, 512, 0.3, &r->peak));
    if (job->world_size == 1) return GT_OK;
    char text[64];
    int n = snprintf(text, sizeof text, "%.17g", r->peak);
    return gt_store_set(job->store, "gt-run/peak", text, (size_t)n);
  }
  void *val = NULL;
  size_t len = 0;
  GT_TRY(gt_store_get(job->store, "gt-run/peak", &val, &len, 120000));
  r->peak = strtod(val, NULL);
  free(val);
  gt_backend_set_peak_flops(r->be, r->peak);
  return GT_OK;
}

/* "1,0.5" into one speed per world rank. */
static gt_status parse_speeds(const char *text, int world, double *out) {
  for (int i = 0; i < world; i++) out[i] = 1.0;
  if (!text) return GT_OK;
  const char *p = text;
  for (int i = 0; i < world; i++) {
    char *end;
    out[i] = strtod(p, &end);
    if (end == p || !(out[i] > 0) || (*end && *end != ','))
      return gt_errorf(GT_EINVAL, "--speeds '%s': want %d positive numbers separated by commas", text, world);
    p = *end ? end + 1 : end;
    if (i + 1 < world && !*end) return gt_errorf(GT_EINVAL, "--speeds '%s': want one speed per rank (%d)", text, world);
  }
  if (*p) return gt_errorf(GT_EINVAL, "--speeds '%s': more speeds than ranks (%d)", text, world);
  return GT_OK;
}

/* A pipeline stage, or a replica, is as fast as its slowest rank. */
static void group_speeds(const gt_plan *plan, const double *rank_speed, double *stage, double *replica) {
  for (int i = 0; i < plan->layout.pp; i++) stage[i] = 1e300;
  for (int i = 0; i < plan->layout.dp; i++) replica[i] = 1e300;
  for (int q = 0; q < plan->world; q++) {
    gt_grid_coords c;
    gt_grid_coords_of(&plan->layout, q, &c);
    if (rank_speed[q] < stage[c.pp]) stage[c.pp] = rank_speed[q];
    if (rank_speed[q] < replica[c.dp]) replica[c.dp] = rank_speed[q];
  }
}

/* "m.%r.jsonl" into "m.3.jsonl" for rank 3: false when path has no %r. */
static bool metrics_per_rank(const char *path, int rank, char *out, size_t cap) {
  const char *p = strstr(path, "%r");
  if (!p) return false;
  snprintf(out, cap, "%.*s%d%s", (int)(p - path), path, rank, p + 2);
  return true;
}

/* The layout: each factor from the flag, else the model's annotations,
 * else the planner (docs/annotations.md). */
static gt_status choose_plan(gt_run *r, const gt_annotations *ann) {
  gt_job *job = r->job;
  const gt_run_options *a = &r->o;
  const char *layout = a->plan ? a->plan : (job->plan[0] ? job->plan : "auto");
  gt_plan_config pc = {.world = job->world_size,
                       .rank = job->rank,
                       .layout = layout,
                       .zero1 = a->zero1,
                       .zero = a->zero < 0 ? 0
                               : a->zero   ? a->zero
                                           : -1,
                       .seq_parallel = a->seq_parallel,
                       .bucket_bytes = (size_t)a->bucket_kib << 10,
                       .schedule = r->schedule,
                       .chunks = a->chunks,
                       .annotations = ann,
                       .micro_batches = a->accum,
                       .offload_window = a->offload};
  gt_grid_layout fixed, chosen_layout;
  if (gt_plan_preview(&pc, &fixed) != GT_OK) return GT_EINVAL;
  /* The planner fills what is open, where the fixed factors leave room for
   * it; where they do not, gt_plan_resolve says which make too many ranks. */
  long fixed_ranks = (long)(fixed.dp ? fixed.dp : 1) * (fixed.tp ? fixed.tp : 1) * (fixed.pp ? fixed.pp : 1);
  if (!strcmp(layout, "auto") && job->world_size > 1 && (!fixed.dp || !fixed.tp || !fixed.pp) &&
      job->world_size % fixed_ranks == 0) {
    /* With a global batch, the planner weighs the rows every rank would take at dp = world. */
    int B = a->global_batch ? (a->global_batch + job->world_size - 1) / job->world_size : a->batch;
    int accum = a->accum ? a->accum : ann->micro_batches ? ann->micro_batches : 1;
    char chosen[64];
    bool autom;
    GT_TRY(run_choose_layout(r->be, &r->model, B, a->seq, job->world_size, accum * job->world_size, r->peak,
                             run_plan_budget(a), r->schedule, a->chunks, a->zero >= 0 ? a->zero : ann->zero,
                             a->offload ? a->offload : ann->offload_window, r->precision,
                             r->kind == GT_OPTIM_ADAMW ? 2 : 1, &fixed, chosen, sizeof chosen));
    GT_TRY(gt_plan_parse(chosen, job->world_size, &chosen_layout, &autom));
    if (r->lead) printf("plan auto: the planner chose %s\n", chosen);
    pc.planner = &chosen_layout;
  }
  GT_TRY(gt_plan_resolve(&pc, &r->plan));
  r->o.accum = r->plan.micro_batches > 0 ? r->plan.micro_batches : 1;
  r->o.offload = r->plan.offload_window;
  r->launch_plan = r->plan;
  return GT_OK;
}

/* Speeds: slower stages get fewer layers, slower replicas fewer rows of
 * each micro-batch (the step still weighs every token alike). --global-batch
 * G: the replicas share G rows of every micro-batch, as evenly as they can
 * (a dp that does not divide G leaves some a row more); --batch B: each
 * takes B. Replica i takes its share of every group micro-batch of `total`
 * rows at `offset`, the shares of the replicas before it. With --rebalance
 * at dp > 1 its activations and loader hold up to `cap` rows: twice the
 * even share, or the largest --speeds gave. */
static gt_status share_rows(gt_run *r, bool rebalance, const gt_annotations *ann, double *stage_speed, int *rows,
                            int *offset, int *cap) {
  const gt_plan *plan = &r->plan;
  double *rank_speed = calloc((size_t)plan->world, sizeof(double));
  double *replica_speed = calloc((size_t)plan->layout.dp, sizeof(double));
  r->shares = calloc((size_t)plan->layout.dp, sizeof(int));
  gt_status s = GT_OK;
  if (!rank_speed || !replica_speed || !r->shares || plan->layout.pp > GT_PLANNER_MAX_STAGES)
    s = gt_errorf(GT_EINVAL, "out of memory, or more than %d pipeline ranks", GT_PLANNER_MAX_STAGES);
  if (s == GT_OK) s = parse_speeds(r->o.speeds, plan->world, rank_speed);
  if (s == GT_OK) group_speeds(plan, rank_speed, stage_speed, replica_speed);
  r->total = r->o.global_batch ? r->o.global_batch : r->o.batch * plan->layout.dp;
  if (s == GT_OK && r->total < plan->layout.dp)
    s = gt_errorf(GT_EINVAL, "--global-batch %d is less than one row for each of dp=%d replicas", r->total,
                  plan->layout.dp);
  if (s == GT_OK) s = gt_planner_batch_split(r->total, plan->layout.dp, replica_speed, r->shares);
  if (s == GT_OK && rebalance && plan->layout.dp > 1 && plan->layout.tp > 1 && ann->regions)
    s = gt_errorf(GT_EINVAL,
                  "--rebalance moves rows between replicas, and the replicated region '%s'..'%s' needs "
                  "rows that divide by tp=%d: leave out one or the other",
                  ann->region_at, ann->region_end, plan->layout.tp);
  *rows = s == GT_OK ? r->shares[plan->me.dp] : 0;
  *offset = 0;
  *cap = rebalance && plan->layout.dp > 1 ? 2 * ((r->total + plan->layout.dp - 1) / plan->layout.dp) : *rows;
  for (int i = 0; s == GT_OK && i < plan->layout.dp; i++) {
    if (i < plan->me.dp) *offset += r->shares[i];
    if (rebalance && r->shares[i] > *cap) *cap = r->shares[i];
  }
  free(rank_speed);
  free(replica_speed);
  return s;
}

/* --failslow-clock: whether a CPU rank's compute is timed by the wall
 * clock. auto, with --failslow: when the node's ranks, each with its
 * threads, fit its cores with one to spare, a rank has cores of its own and
 * what other processes take of them is its slowness. When they do not, the
 * OS shares the cores among the job's own ranks, and the agent, etcd and
 * the ranks' helper threads run on the ranks' cores too: their work would
 * read as the slowness of whichever rank it lands beside, and CPU time is
 * fairer. */
static bool wall_clock(const gt_run *r) {
  const char *c = r->o.failslow_clock ? r->o.failslow_clock : "auto";
  bool chosen = strcmp(c, "auto") != 0;
  if (!chosen && !r->o.failslow) return false; /* the clock is the detector's: --rebalance alone keeps CPU time */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long need = (long)(r->job->local_world_size > 0 ? r->job->local_world_size : 1) * gt_backend_num_threads(r->be);
  bool wall = chosen ? !strcmp(c, "wall") : cores > 0 && need < cores;
  if (r->lead && r->o.failslow && gt_backend_kind(r->be) == GT_DEVICE_CPU)
    printf("%s: fail-slow: compute timed by %s (%s; %d rank(s) of %d thread(s) on this node's %ld cores)\n",
           r->o.program, wall ? "the wall clock" : "CPU time", chosen ? "--failslow-clock" : "auto",
           r->job->local_world_size, gt_backend_num_threads(r->be), cores);
  return wall;
}

/* --print-plan: the plan, the predicted step and the memory, on rank 0. */
static gt_status print_plan(gt_run *r, int rows) {
  /* The precision the trainer would set: it decides the bf16 copy and
   * how an offloaded window holds its weights. */
  GT_TRY(gt_model_set_precision(r->m, r->precision));
  if (!r->lead) return GT_OK;
  gt_plan_print(&r->plan, r->m, stdout);
  GT_TRY(run_print_prediction(r->be, &r->model, &r->plan, r->m, rows, r->o.seq, r->o.accum * r->plan.layout.dp, r->peak,
                              r->o.offload, r->precision, r->kind == GT_OPTIM_ADAMW ? 2 : 1, stdout));
  gt_estimate_config ec = {.optim_states = r->kind == GT_OPTIM_ADAMW ? 2 : 1,
                           .optim_shards = r->plan.zero1 ? r->plan.layout.dp : 1,
                           .distributed = r->dist != NULL};
  return run_print_memory(r->be, r->m, &ec, r->o.accum, stdout);
}

/* Whether --rebalance has anything to move at the layout now: rows between
 * replicas, or layers between stages. */
static bool rebalancing(const gt_run *r) { return r->o.rebalance && (r->plan.layout.dp > 1 || r->plan.layout.pp > 1); }

/* --rebalance at the layout now, where there is something to move: rows
 * between replicas and, where the state can move between stages
 * (gt_trainer_move_state: not with ZeRO-1's shards), the pipeline cut. */
static gt_status start_rebalance(gt_run *r, int rows) {
  if (!rebalancing(r)) return GT_OK;
  GT_TRY(run_rebalance_create(&r->plan, r->dist, r->be, r->shares, r->cap, r->job, r->o.rebalance_local, &r->rb));
  if (r->plan.layout.pp > 1 && r->plan.layout.pp <= GT_REBALANCE_MAX_STAGES && r->plan.chunks == 1 && !r->plan.zero1)
    run_rebalance_enable_recut(r->rb, rows, r->o.seq);
  return GT_OK;
}

/* After a reshape, this rank's place and what watches the layout:
 * rebalancing and fail-slow monitoring go on at the new layout (the
 * monitor with two ranks or more), on every rank alike, a joining one too. */
gt_status run_after_reshape(gt_run *r) {
  gt_status s;
  r->lead = r->job->rank == 0;
  if ((s = start_rebalance(r, r->shares[r->plan.me.dp])) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "setting up --rebalance again", s);
  if (r->o.failslow && r->job->world_size >= 2 &&
      (s = run_failslow_start(&r->o, r->dist, r->m, r->job, r->metrics[0] ? r->metrics : NULL, r->rsh.members,
                              &r->failslow)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "starting fail-slow detection again", s);
  return GT_OK;
}

/* --reshape: the membership, the copies of single-owner state, the
 * watcher; a joining rank then takes its place through a reshape. */
static gt_status start_reshape(gt_run *r) {
  gt_status s;
  run_reshape_init(&r->rsh, r->job, r->o.program);
  r->rsh.fixed_every = r->o.mirror_every;
  printf("%s: rank %d of %d (pid %d), --reshape on\n", r->o.program, r->job->rank, r->job->world_size, (int)getpid());
  fflush(stdout);
  if (r->dist && (s = run_mirror_start(&r->rsh, r->tr, r->job, r->lead)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "starting redundancy", s);
  if ((s = run_watch_start(&r->rsh, r->job, r->dist ? gt_dist_grid(r->dist) : NULL)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "watching the membership", s);
  if (!r->joining) return GT_OK;
  s = run_reshape_join(&r->rsh, r->job);
  if (s == GT_OK && r->rsh.job_finished) {
    printf("%s: rank %d (pid %d): training ended before the job took it in; nothing left to train\n", r->o.program,
           r->job->rank, (int)getpid());
    r->rc = GT_RUN_EXIT_OK;
    return GT_OK;
  }
  if (s == GT_OK) s = run_reshape_now(r, true);
  if (s != GT_OK) return run_fail(r, GT_RUN_EXIT_RESTART, "joining the running job", s);
  return run_after_reshape(r);
}

gt_status gt_run_start(gt_run *r, const gt_run_model *model) {
  if (!r || !r->job || !r->be) return gt_errorf(GT_ESTATE, "gt_run_start needs a run that gt_run_open opened");
  if (!model || !model->add_layers)
    return run_fail(r, GT_RUN_EXIT_USAGE, "starting",
                    gt_errorf(GT_EINVAL, "gt_run_start: the model has no add_layers"));
  r->model = *model;
  const gt_run_options *a = &r->o;
  gt_status s;
  gt_annotations ann;
  if ((s = run_annotations_of(r->be, &r->model, a->seq, &ann)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_USAGE, "reading the annotations", s);
  if ((s = shared_peak(r)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "measuring the machine", s);
  if ((s = choose_plan(r, &ann)) != GT_OK) return run_fail(r, GT_RUN_EXIT_USAGE, "planning", s);
  bool rebalance = rebalancing(r);
  double speeds[GT_PLANNER_MAX_STAGES];
  int rows, offset, cap;
  if ((s = share_rows(r, rebalance, &ann, speeds, &rows, &offset, &cap)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_USAGE, "planning", s);
  if (r->lead && a->speeds) printf("speeds %s: this replica takes %d of every %d rows\n", a->speeds, rows, r->total);
  if (r->job->world_size > 1 && !r->joining) {
    gt_dist_config dc = {.plan = r->plan,
                         .store = r->job->store,
                         .generation = r->job->generation_name,
                         .comm = {.backend = r->be, .secret = r->job->secret}};
    if ((s = gt_dist_create(&dc, &r->dist)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "connecting the ranks", s);
  }
  /* Layers are declared first, so the planner can cut pipeline stages by
   * their costs before any memory is allocated. */
  r->mc = (gt_model_config){.B_max = cap,
                            .T_max = a->seq,
                            .seed = a->seed,
                            .offload_window = a->offload ? a->offload : -1,
                            .offload_prefetch = a->offload_prefetch,
                            .recompute = r->recompute};
  r->mp = r->dist ? gt_dist_model_parallel(r->dist) : (gt_model_parallel){0};
  if (!r->joining && (s = run_build_model(r, &r->mc, &r->mp, &r->plan, rows, speeds, NULL, &r->m)) != GT_OK)
    /* GT_EINVAL: the model does not fit the plan, and a restart would fail alike. */
    return run_fail(r, s == GT_EINVAL ? GT_RUN_EXIT_USAGE : GT_RUN_EXIT_FAILED, "building the model", s);
  /* --eval-split: training reads the rows before the held-out ones. */
  if (a->eval_split > 0 && r->source)
    return run_fail(r, GT_RUN_EXIT_USAGE, "opening the evaluation data",
                    gt_errorf(GT_EINVAL,
                              "--eval-split holds out the end of --data, and this program gives its own rows: "
                              "use --eval-data FILE"));
  if ((s = run_eval_open(&r->eval, a, &r->source)) != GT_OK)
    return run_fail(r, run_input_code(s), "opening the evaluation data", s);
  if (r->eval.every && r->plan.layout.pp > 1)
    return run_fail(
        r, GT_RUN_EXIT_USAGE, "planning",
        gt_errorf(GT_EUNSUPPORTED, "--eval-every is not supported at pipeline layouts (pp %d): evaluate with pp 1",
                  r->plan.layout.pp));
  /* Before the trainer, which may copy the weights (bf16, offloading). */
  if (!r->joining && r->m && a->init_from && (s = ck_hf_import(r->m, a->init_from, a->init_names)) != GT_OK)
    return run_fail(r, s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : GT_RUN_EXIT_INPUT, "loading --init-from", s);
  /* Each data-parallel replica reads its own share; tensor-parallel ranks of
   * one replica read the same one. The loader is opened for `cap` rows and
   * then given its share; every id in the file must be one the model takes. */
  gt_loader_config lc = {.path = a->data,
                         .source = r->source,
                         .B = cap,
                         .T_max = a->seq,
                         .shard = r->plan.me.dp,
                         .nshards = r->plan.layout.dp,
                         .mode = a->documents ? GT_LOADER_DOCUMENTS : GT_LOADER_FIXED};
  uint32_t vocab = r->m ? (uint32_t)gt_model_vocab_size(r->m) : 0;
  if ((s = gt_loader_open(&lc, vocab, &r->loader)) != GT_OK ||
      (s = gt_loader_reshare(r->loader, rows, offset, r->total)) != GT_OK)
    return run_fail(r, run_input_code(s), "opening the data", s);
  if (a->print_plan && !r->joining) {
    if ((s = print_plan(r, rows)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "predicting the step", s);
    r->rc = GT_RUN_EXIT_OK;
    return GT_OK;
  }
  /* The lead's metrics file, or every rank's own with a %r in it. */
  if (!a->metrics || !metrics_per_rank(a->metrics, r->job->rank, r->metrics, sizeof r->metrics))
    snprintf(r->metrics, sizeof r->metrics, "%s", r->lead && a->metrics ? a->metrics : "");
  const char *metrics = r->metrics[0] ? r->metrics : NULL;
  /* The run writes the metrics line and prints the step line (observe.h):
   * they carry its progress, which the trainer does not know. */
  if ((s = run_observe_open(&r->obs, metrics, a->tensorboard, r->lead, a->steps, a->print_every)) != GT_OK)
    return run_fail(r, s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : GT_RUN_EXIT_USAGE, "opening --metrics or --tensorboard",
                    s);
  r->tc =
      (gt_trainer_config){.optim = gt_optim_defaults(r->kind),
                          .grad_clip = a->clip,
                          .grad_accum = a->accum,
                          .schedule = {.lr_max = a->lr, .lr_min = a->min_lr, .warmup = a->warmup, .total = a->steps},
                          .dist = r->dist,
                          .no_overlap = a->no_overlap,
                          .precision = r->precision,
                          .commit_vote = a->reshape,
                          .skip_nonfinite = a->skip_nonfinite,
                          .update_per_layer = a->update_per_layer,
                          .delayed_update = a->delayed_update};
  if (a->weight_decay >= 0) r->tc.optim.weight_decay = a->weight_decay;
  r->tc.optim.state_dir = r->state_dir;
  r->tc.compute_wall_time = wall_clock(r);
  if (!r->joining && (s = gt_trainer_create(r->m, &r->tc, &r->tr)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "creating the trainer", s);
  if (r->lead && r->m)
    printf(
        "%s: %zu parameters in %d layers, T=%d, B=%d x %d micro-batches per replica, %s (%s kernels), %s, %d "
        "threads, peak %.1f GFLOP/s; world %d = dp %d x tp %d x pp %d%s%s%s\n",
        r->o.program, gt_model_param_count_whole(r->m), gt_model_num_layers(r->m), a->seq, rows, a->accum,
        gt_backend_name(r->be), gt_backend_kernels(r->be), gt_precision_name(r->precision),
        gt_backend_num_threads(r->be), gt_backend_peak_flops(r->be) / 1e9, r->plan.world, r->plan.layout.dp,
        r->plan.layout.tp, r->plan.layout.pp,
        r->plan.zero == 3   ? ", ZeRO-3"
        : r->plan.zero == 2 ? ", ZeRO-2"
        : r->plan.zero1     ? ", ZeRO-1"
                            : "",
        r->plan.seq_parallel ? ", sequence parallel" : "", gt_model_offloaded(r->m) ? ", offloaded" : "");
  r->ckpt_args = (run_ckpt_args){.dir = a->ckpt_dir, .every = a->ckpt_every, .keep = a->ckpt_keep};
  if (!r->joining && (s = run_ckpt_start(&r->ckpt_args, r->job, r->tr, r->loader, &r->ckpt)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "resuming from a checkpoint", s);
  if (a->ckpt_dir) run_ckpt_catch_stop(); /* a stop lets the save in flight commit (on the way out) */
  if (!r->joining && (s = run_failslow_start(a, r->dist, r->m, r->job, metrics, NULL, &r->failslow)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_USAGE, "starting fail-slow detection", s);
  if (a->rebalance && !rebalance && r->lead) printf("--rebalance: one replica and one stage, nothing to move\n");
  r->cap = r->launch_cap = cap;
  if (!r->joining && (s = start_rebalance(r, rows)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "setting up --rebalance", s);
  r->started = true;
  if (a->reshape) GT_TRY(start_reshape(r));
  return GT_OK;
}
