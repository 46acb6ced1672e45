/* Building the model for a layout, and building it again: the pipeline
 * re-cut of --rebalance, and the in-process reshape of --reshape. In both
 * the old model and trainer stay until the new ones hold the state. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "optim/fault/fault.h"
#include "giant/engine/grid.h"
#include "giant/log.h"
#include "parallel/planner.h"
#include "planning.h"
#include "run_internal.h"
#include "ckpt/peers_api.h"
#include "core/data/loader_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/dist.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"
#include "parallel/plan_engine.h"

gt_status run_build_model(const gt_run *r, const gt_model_config *mc, const gt_model_parallel *mp, const gt_plan *plan,
                          int rows, const double *speeds, const int *first, gt_model **out) {
  gt_model *m = NULL;
  gt_status s = gt_model_create(r->be, mc, &m);
  if (s == GT_OK) s = gt_model_set_parallel(m, mp);
  if (s == GT_OK) s = r->model.add_layers(m, r->model.user);
  if (s == GT_OK && first)
    s = gt_model_set_stage_cut(m, first, plan->layout.pp);
  else if (s == GT_OK)
    s = gt_plan_cut_stages(plan, m, rows, r->o.seq, speeds);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) s = gt_plan_check_model(plan, m);
  if (s == GT_OK) s = gt_model_check_rows(m, rows);
  if (s != GT_OK) {
    gt_model_destroy(m);
    m = NULL;
  }
  *out = m;
  return s;
}

gt_status run_recut(gt_run *r, int rows, const int *first) {
  gt_model *m2 = NULL;
  gt_trainer *tr2 = NULL;
  gt_status s = run_build_model(r, &r->mc, &r->mp, &r->plan, rows, NULL, first, &m2);
  if (s == GT_OK) s = gt_trainer_create(m2, &r->tc, &tr2);
  if (s == GT_OK) s = gt_trainer_move_state(r->tr, tr2);
  if (s != GT_OK) {
    gt_trainer_destroy(tr2);
    gt_model_destroy(m2);
    return s;
  }
  gt_trainer_destroy(r->tr);
  gt_model_destroy(r->m);
  r->m = m2;
  r->tr = tr2;
  return GT_OK;
}

/* The layout a job of `world` ranks goes on at after a reshape: the
 * launch plan's tensor- and pipeline-parallel sizes where they divide it,
 * the planner's choice where they do not. Every rank, a joining one too,
 * knows the launch plan, so all choose alike. */
static gt_status reshape_layout(const gt_run *r, int world, char *out, size_t n) {
  const gt_plan *old = &r->launch_plan;
  int tp = old->layout.tp, pp = old->layout.pp;
  if (world % (tp * pp) == 0 && world / (tp * pp) <= r->total) {
    snprintf(out, n, "dp=%d,tp=%d,pp=%d", world / (tp * pp), tp, pp);
    return GT_OK;
  }
  int B = (r->total + world - 1) / world;
  return run_choose_layout(r->be, &r->model, B, r->o.seq, world, r->o.accum * world, r->peak, run_plan_budget(&r->o),
                           r->schedule, r->o.chunks, r->launch_plan.zero, r->o.offload, r->precision,
                           r->kind == GT_OPTIM_ADAMW ? 2 : 1, NULL, out, n);
}

/* The newest committed checkpoint's step directory, where the state that
 * no rank left holds is taken from ("" when there is none). */
static void newest_checkpoint(const gt_run *r, char *out, size_t n) {
  int steps[1], k = 0;
  out[0] = 0;
  if (r->o.ckpt_dir && gt_ckpt_list(r->o.ckpt_dir, steps, 1, &k) == GT_OK && k > 0)
    snprintf(out, n, "%s/step-%08d", r->o.ckpt_dir, steps[0]);
}

/* After the state moved from the peers: whether every rank has it, some
 * state was held by no rank left (lost: the others roll back with it to
 * the newest checkpoint, fallback, where there is one), or a rank failed
 * otherwise (the reshape fails everywhere, and the next epoch is tried).
 * Every rank takes part, so that none waits on another's decision. */
static gt_status agree_on_state(gt_dist *nd, gt_status s, const char *fallback, bool *roll_back) {
  float count[2] = {s == GT_ENOTFOUND, s != GT_OK && s != GT_ENOTFOUND}; /* ranks that lost state, that failed */
  *roll_back = false;
  if (nd) GT_TRY(gt_comm_allreduce(gt_grid_world(gt_dist_grid(nd)), count, 2, GT_F32, GT_COMM_SUM));
  if (count[1] > 0) return s != GT_OK ? s : gt_errorf(GT_ECONN, "another rank failed to take its state");
  if (count[0] == 0) return GT_OK;
  /* Lost state: a checkpoint to roll back to, or a restart. */
  if (!fallback[0])
    return s == GT_ENOTFOUND
               ? s
               : gt_errorf(GT_ENOTFOUND, "state that no rank left holds, and no checkpoint to roll back to");
  *roll_back = true;
  return GT_OK;
}

/* Abort what is in flight, agree with the ranks left where training
 * stands, build the new layout, move the state into it from the peers,
 * and go on. The old layout is freed only once the new one holds the
 * state. planned: no failure, ranks join at a step boundary (nothing to
 * abort; a joining rank has no trainer, r->tr NULL, and takes all it holds
 * from the others). */
gt_status run_reshape_now(gt_run *r, bool planned) {
  double t0 = gt_now();
  run_reshape *rsh = &r->rsh;
  gt_grid *grid = r->dist ? gt_dist_grid(r->dist) : NULL;
  rsh->state_lost = false;
  run_watch_pause(rsh);
  if (grid && !planned) run_abort_grid(grid); /* the others' operations fail at once, not at their timeout */
  if (!planned) gt_ckpt_abandon(r->ckpt);     /* a planned reshape lets the save in flight commit */
  gt_ckpt_destroy(r->ckpt);
  r->ckpt = NULL;
  int world = 1, rank = 0;
  GT_TRY(run_reshape_members(rsh, r->job, &world, &rank));
  double t_agreed = gt_now();
  char layout[64];
  GT_TRY(reshape_layout(r, world, layout, sizeof layout));
  gt_plan np;
  gt_plan_config pc = {.world = world,
                       .rank = rank,
                       .layout = layout,
                       /* the stage the job launched with, from the flag or the model's zero(s) */
                       .zero = r->launch_plan.zero ? r->launch_plan.zero : -1,
                       .seq_parallel = r->o.seq_parallel,
                       .bucket_bytes = (size_t)r->o.bucket_kib << 10,
                       .schedule = r->schedule,
                       .chunks = r->o.chunks};
  GT_TRY(gt_plan_resolve(&pc, &np));
  /* The same global batch: the rows of a step stay total x --accum. With
   * fewer replicas, more micro-batches of fewer rows each, where the rows
   * divide so, keep a replica's micro-batch within what it held at launch
   * (its activations' memory); with all replicas back, the launch's. */
  int step_rows = r->total * r->o.accum, accum = r->o.accum;
  int launch_rows = (r->total + r->launch_plan.layout.dp - 1) / r->launch_plan.layout.dp;
  for (int k = r->o.accum; k <= 64; k++) {
    if (step_rows % k || step_rows / k < np.layout.dp) continue;
    if ((step_rows / k + np.layout.dp - 1) / np.layout.dp <= launch_rows) {
      accum = k;
      break;
    }
  }
  int micro_rows = step_rows / accum;
  int *shares = calloc((size_t)np.layout.dp, sizeof *shares), rows = 0, offset = 0, cap = 0;
  double *speed = calloc((size_t)np.layout.dp, sizeof *speed);
  gt_status s = shares && speed ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
  for (int i = 0; speed && i < np.layout.dp; i++) speed[i] = 1;
  if (s == GT_OK) s = gt_planner_batch_split(micro_rows, np.layout.dp, speed, shares);
  for (int i = 0; s == GT_OK && i < np.layout.dp; i++) {
    if (i < np.me.dp) offset += shares[i];
    if (shares[i] > cap) cap = shares[i];
  }
  if (s == GT_OK) rows = shares[np.me.dp];
  /* --rebalance goes on at the new layout: a replica may take up to twice
   * its even share, within the rows it held at launch. */
  if (s == GT_OK && r->o.rebalance && np.layout.dp > 1) {
    int room = 2 * ((micro_rows + np.layout.dp - 1) / np.layout.dp);
    room = room < r->launch_cap ? room : r->launch_cap;
    cap = room > cap ? room : cap;
  }
  free(speed);
  if (s != GT_OK) free(shares);
  GT_TRY(s);
  snprintf(r->reshaped_gen, sizeof r->reshaped_gen, "%s.e%d", r->job->generation_name, rsh->epoch);
  gt_dist *nd = NULL;
  gt_model *nm = NULL;
  gt_trainer *nt = NULL;
  gt_loader *nl = NULL;
  if (world > 1) {
    /* A rank lost while the group forms is noticed within the init
     * timeout; then the next epoch is tried. */
    gt_dist_config dc = {.plan = np,
                         .store = r->job->store,
                         .generation = r->reshaped_gen,
                         .comm = {.backend = r->be, .secret = r->job->secret, .init_timeout_ms = 30000}};
    s = gt_dist_create(&dc, &nd);
  }
  gt_fault_plan faults; /* GT_FAULT's crashreshape: a failure in the middle of this */
  if (s == GT_OK && gt_fault_from_env(rsh->gen_rank, &faults) == GT_OK) gt_fault_reshape_point(&faults);
  /* Where training stands, decided over the new communicators; then the
   * step in flight is applied or dropped here. */
  run_resume_point rp = {0};
  if (s == GT_OK)
    s = run_reshape_decide(rsh, nd ? gt_grid_world(gt_dist_grid(nd)) : NULL, r->tr, r->loader, (uint64_t)step_rows,
                           &rp);
  if (s == GT_OK && r->tr && gt_trainer_step_pending(r->tr)) s = gt_trainer_resolve_step(r->tr, rp.apply_pending);
  double t_dist = gt_now();
  gt_model_config nmc = r->mc;
  nmc.B_max = cap;
  nmc.no_init = true; /* every parameter comes from the peers */
  gt_model_parallel nmp = nd ? gt_dist_model_parallel(nd) : (gt_model_parallel){0};
  if (s == GT_OK) s = run_build_model(r, &nmc, &nmp, &np, rows, NULL, NULL, &nm);
  gt_trainer_config ntc = r->tc;
  ntc.dist = nd;
  ntc.grad_accum = accum;
  if (s == GT_OK) s = gt_trainer_create(nm, &ntc, &nt);
  char fallback[4200];
  newest_checkpoint(r, fallback, sizeof fallback);
  gt_ckpt_peer_stats ps = {0};
  double t_built = gt_now();
  bool roll_back = false;
  if (s == GT_OK) {
    s = gt_ckpt_reshard_peers(r->tr, nt, rsh->mirror, fallback[0] ? fallback : NULL, &ps);
    s = agree_on_state(nd, s, fallback, &roll_back);
    rsh->state_lost = s == GT_ENOTFOUND;
  }
  double t_moved = gt_now();
  gt_loader_config lc = *gt_loader_get_config(r->loader);
  lc.B = cap;
  lc.shard = np.me.dp;
  lc.nshards = np.layout.dp;
  lc.offset = 0;
  lc.total = 0;
  if (s == GT_OK) s = gt_loader_open(&lc, 0, &nl);
  if (s == GT_OK) s = gt_loader_restart_at(nl, rp.row);
  if (s == GT_OK) s = gt_loader_reshare(nl, rows, offset, micro_rows);
  if (s != GT_OK) {
    gt_loader_close(nl);
    gt_trainer_destroy(nt);
    gt_model_destroy(nm);
    gt_dist_destroy(nd);
    free(shares);
    return s;
  }
  free(r->shares);
  r->shares = shares;
  r->cap = cap;
  gt_loader_close(r->loader);
  gt_trainer_destroy(r->tr);
  gt_model_destroy(r->m);
  gt_dist_destroy(r->dist);
  r->loader = nl;
  r->tr = nt;
  r->m = nm;
  r->dist = nd;
  r->plan = np;
  r->mp = nmp;
  r->mc = nmc;
  r->tc.dist = nd;
  r->tc.grad_accum = accum;
  r->job->rank = rp.rank;
  r->job->world_size = rp.world;
  GT_TRY(run_ckpt_rebind(&r->ckpt_args, r->job, r->tr, r->loader, &r->ckpt));
  if (roll_back) {
    /* Every rank of the new layout loads the checkpoint, resharded to it:
     * the model, the optimizer, the step and the data stream's row. */
    gt_ckpt_info info;
    GT_TRY(gt_ckpt_load(r->ckpt, fallback, &info));
    if (rp.rank == 0)
      printf("%s: state that no rank left held: rolled back in-process to %s (step %d), %d step(s) lost\n",
             r->o.program, info.path, info.step, rp.step - info.step);
    rp.step = info.step;
  }
  printf(
      "%s: reshaped in %.0f ms (pid %d): rank %d of %d in membership epoch %d, %s, step %d, %d rows of %d x %d "
      "micro-batches; %llu floats from peers, %llu kept, %llu from a checkpoint (membership %.0f ms, "
      "communicators and step %.0f ms, model %.0f ms, moving the state %.0f ms)\n",
      r->o.program, (gt_now() - t0) * 1e3, (int)getpid(), rp.rank, rp.world, rsh->epoch, layout, rp.step, rows,
      micro_rows, accum, (unsigned long long)ps.floats_received, (unsigned long long)ps.floats_kept,
      (unsigned long long)ps.floats_from_ckpt, (t_agreed - t0) * 1e3, (t_dist - t_agreed) * 1e3,
      (t_built - t_dist) * 1e3, (t_moved - t_built) * 1e3);
  GT_TRY(run_mirror_start(rsh, r->tr, r->job, rp.rank == 0));
  run_watch_resume(rsh, nd ? gt_dist_grid(nd) : NULL);
  fflush(stdout);
  return GT_OK;
}
