/* See reshape.h. */
#include "reshape.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/log.h"
#include "ckpt/peers_api.h"
#include "core/data/loader_engine.h"
#include "giant/engine/grid.h"
#include "giant/engine/init.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"
#include "resilience/members/members.h"
#include "optim/fault/fault.h"

void run_reshape_init(run_reshape *r, const gt_job *job, const char *name) {
  *r = (run_reshape){.name = name, .gen_world = job->world_size, .gen_rank = job->rank, .timeout_ms = 60000};
  const char *t = getenv("GT_RESHAPE_TIMEOUT_MS");
  if (t && atoi(t) > 0) r->timeout_ms = atoi(t);
  gt_members_get(job->store, r->gen_world, 0, r->members, &r->n, 0);
  (void)gt_fault_from_env(r->gen_rank, &r->faults); /* a bad GT_FAULT leaves no faults; the trainer reports it */
}

/* What a rank says of itself: its step, whether it is pending, and the
 * data stream's row at the start of a given step. Sent as bytes in an
 * all-gather (which moves them untouched). */
typedef struct rank_state {
  int64_t step, row_step;
  int64_t pending;
  uint64_t row;
} rank_state;

gt_status run_reshape_members(run_reshape *r, gt_job *job, int *world, int *rank) {
  /* A newer epoch: the one after ours, then the newest (more may have
   * been lost meanwhile). */
  int epoch = 0;
  gt_status s = gt_members_get(job->store, r->gen_world, r->epoch + 1, r->members, &r->n, r->timeout_ms);
  if (s == GT_ETIMEDOUT)
    return gt_errorf(GT_ETIMEDOUT, "no new membership within %.0f s of the failure (no rank was reported lost)",
                     r->timeout_ms / 1000.0);
  GT_TRY(s);
  GT_TRY(gt_members_latest(job->store, r->gen_world, &epoch, r->members, &r->n));
  r->epoch = epoch;
  int me = gt_members_index(r->members, r->n, r->gen_rank);
  if (me < 0)
    return gt_errorf(GT_ECANCELED, "rank %d is not in membership epoch %d: the job went on without it", r->gen_rank,
                     epoch);
  *world = r->n;
  *rank = me;
  return GT_OK;
}

gt_status run_reshape_decide(run_reshape *r, gt_comm *world, gt_trainer *tr, gt_loader *loader, uint64_t rows_per_step,
                             run_resume_point *out) {
  /* A joining rank holds nothing: step -1, passed over below. */
  rank_state mine = {.step = tr ? gt_trainer_step_index(tr) : -1, .pending = tr && gt_trainer_step_pending(tr)};
  int rs = 0;
  if (tr && gt_trainer_step_row(tr, &mine.row, &rs)) {
    mine.row_step = rs;
  } else {
    mine.row = gt_loader_next_row(loader);
    mine.row_step = mine.step;
  }
  /* Every member's state. A member that completed the step's commit vote
   * applied it, which tells that every rank reached the vote: the pending
   * ones apply it too. When none did, the pending ones drop it. */
  int n = world ? gt_comm_size(world) : 1, me = world ? gt_comm_rank(world) : 0;
  rank_state *all = calloc((size_t)n, sizeof *all);
  if (!all) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status s = GT_OK;
  if (world)
    s = gt_comm_allgather(world, &mine, all, sizeof mine / sizeof(float), GT_F32);
  else
    all[0] = mine;
  int64_t hi = -1;
  for (int i = 0; i < n && s == GT_OK; i++) hi = all[i].step > hi ? all[i].step : hi;
  uint64_t row = 0;
  for (int i = 0, first = 1; i < n && s == GT_OK; i++) {
    const rank_state *a = &all[i];
    if (a->step < 0) continue; /* joining */
    bool ok = a->step == hi || (a->step == hi - 1 && a->pending);
    if (!ok)
      s = gt_errorf(GT_ESTATE,
                    "rank %d is at step %lld%s and another at %lld: the step in flight cannot be "
                    "resolved in place",
                    r->members[i], (long long)a->step, a->pending ? " (pending)" : "", (long long)hi);
    uint64_t at = a->row + (uint64_t)(hi - a->row_step) * rows_per_step;
    if (s == GT_OK && !first && at != row)
      s = gt_errorf(GT_ESTATE,
                    "ranks disagree on the data stream's position at step %lld (rows %" PRIu64 " and %" PRIu64 ")",
                    (long long)hi, row, at);
    row = at;
    first = 0;
  }
  if (s == GT_OK && hi < 0) s = gt_errorf(GT_ESTATE, "no rank of the new membership holds a trainer's state");
  free(all);
  GT_TRY(s);
  *out = (run_resume_point){
      .world = n, .rank = me, .step = (int)hi, .row = row, .apply_pending = mine.pending && mine.step == hi - 1};
  return GT_OK;
}

gt_status run_mirror_start(run_reshape *r, gt_trainer *tr, const gt_job *job, bool lead) {
  gt_ckpt_mirror_destroy(r->mirror);
  r->mirror = NULL;
  r->every = r->fixed_every > 0 ? r->fixed_every : 1;
  r->taken = r->fixed_every > 0 ? RUN_MIRROR_CALIBRATE : 0;
  r->update_s = r->step_s = 0;
  int stride = job->local_world_size < job->world_size ? job->local_world_size : 1;
  GT_TRY(gt_ckpt_mirror_create(tr, stride, &r->mirror));
  gt_ckpt_mirror_info mi;
  gt_ckpt_mirror_stats(r->mirror, &mi);
  if (!mi.active) { /* every float has a replica: nothing to copy, on any rank */
    gt_ckpt_mirror_destroy(r->mirror);
    r->mirror = NULL;
    return GT_OK;
  }
  if (lead)
    printf("%s: redundancy: rank 0 keeps %llu floats that no other rank holds, copied to rank %d\n", r->name,
           (unsigned long long)mi.floats_sent, mi.buddy);
  return GT_OK;
}

gt_status run_mirror_after_step(run_reshape *r, gt_trainer *tr, double step_seconds, bool lead) {
  if (!r->mirror || gt_trainer_step_index(tr) % r->every) return GT_OK;
  double t0 = gt_now();
  GT_TRY(gt_ckpt_mirror_update(r->mirror));
  if (r->taken >= RUN_MIRROR_CALIBRATE) return GT_OK;
  r->update_s += gt_now() - t0;
  r->step_s += step_seconds;
  if (++r->taken < RUN_MIRROR_CALIBRATE) return GT_OK;
  /* Every rank must copy at the same steps: the slowest rank's choice. */
  float every = (float)ceil(r->update_s / (RUN_MIRROR_BUDGET * r->step_s));
  gt_dist *dist = gt_trainer_dist(tr);
  gt_comm *world = dist ? gt_grid_world(gt_dist_grid(dist)) : NULL;
  float most = every < 1 ? 1 : every;
  if (world && gt_comm_size(world) > 1) {
    float *all = calloc((size_t)gt_comm_size(world), sizeof *all);
    if (!all) return gt_errorf(GT_ENOMEM, "out of memory");
    gt_status s = gt_comm_allgather(world, &most, all, 1, GT_F32);
    for (int i = 0; s == GT_OK && i < gt_comm_size(world); i++) most = all[i] > most ? all[i] : most;
    free(all);
    GT_TRY(s);
  }
  r->every = (int)most;
  if (lead)
    printf("%s: redundancy: a copy takes %.2f ms, %.2f%% of a %.1f ms step: copying every %d step(s)\n", r->name,
           r->update_s / r->taken * 1e3, 100 * r->update_s / r->step_s, r->step_s / r->taken * 1e3, r->every);
  return GT_OK;
}

void run_reshape_destroy(run_reshape *r) {
  gt_members_watch_stop(r->watch);
  r->watch = NULL;
  gt_ckpt_mirror_destroy(r->mirror);
  r->mirror = NULL;
}

void run_abort_grid(gt_grid *grid) {
  if (!grid) return;
  gt_comm_abort(gt_grid_world(grid));
  for (int ax = GT_GRID_DP; ax <= GT_GRID_PP; ax++) gt_comm_abort(gt_grid_comm(grid, (gt_grid_axis)ax));
}

static void on_newer_epoch(void *arg, int epoch) {
  run_reshape *r = arg;
  (void)epoch;
  run_abort_grid(r->grid);
}

gt_status run_watch_start(run_reshape *r, gt_job *job, gt_grid *grid) {
  if (!gt_job_etcd(job) || r->gen_world < 2) return GT_OK; /* a TCP store: no agents publish epochs there */
  GT_TRY(gt_members_watch_start(job->store, r->gen_world, RUN_WATCH_GRACE_MS, on_newer_epoch, r, &r->watch));
  if (grid) run_watch_resume(r, grid);
  return GT_OK;
}

void run_watch_pause(run_reshape *r) { gt_members_watch_arm(r->watch, -1); }

void run_watch_resume(run_reshape *r, gt_grid *grid) {
  r->grid = grid; /* the watcher is disarmed: its callback is not running */
  if (!grid) return;
  gt_members_watch_joins(r->watch, gt_comm_rank(gt_grid_world(grid)) == 0); /* rank 0 takes joins in */
  gt_members_watch_arm(r->watch, r->epoch);
}

/* Each wait of a joining rank for the next epoch: the job's end is looked
 * for between them. */
#define JOIN_WAIT_SLICE_MS 500

gt_status run_reshape_join(run_reshape *r, gt_job *job) {
  /* First the epoch without this rank (its loss may not be published yet),
   * then the request, then an epoch with it; unless training ends first
   * (the others finished while this rank started). */
  double deadline = gt_now() + r->timeout_ms / 1000.0;
  int epoch = 0;
  for (;;) {
    GT_TRY(gt_members_latest(job->store, r->gen_world, &epoch, r->members, &r->n));
    if (gt_members_index(r->members, r->n, r->gen_rank) < 0) break;
    if (gt_now() > deadline)
      return gt_errorf(GT_ETIMEDOUT, "rank %d is still a member of epoch %d: there is no running job to join",
                       r->gen_rank, epoch);
    gt_status s = gt_members_get(job->store, r->gen_world, epoch + 1, r->members, &r->n, 200);
    if (s != GT_OK && s != GT_ETIMEDOUT) return s;
  }
  GT_TRY(gt_members_request_join(job->store, r->gen_rank));
  printf("%s: rank %d (pid %d) asks to join the running job (membership epoch %d)\n", r->name, r->gen_rank,
         (int)getpid(), epoch);
  fflush(stdout);
  for (;;) {
    int ms = (int)((deadline - gt_now()) * 1000);
    if (ms > JOIN_WAIT_SLICE_MS) ms = JOIN_WAIT_SLICE_MS;
    gt_status s = gt_members_get(job->store, r->gen_world, epoch + 1, r->members, &r->n, ms > 0 ? ms : 0);
    if (s == GT_ETIMEDOUT) {
      /* A failed look (etcd away) is looked again at the next slice. */
      if (gt_members_finished(job->store, &r->job_finished) == GT_OK && r->job_finished) return GT_OK;
      if (gt_now() < deadline) continue;
      return gt_errorf(GT_ETIMEDOUT, "the running job did not take rank %d in within %.0f s", r->gen_rank,
                       r->timeout_ms / 1000.0);
    }
    GT_TRY(s);
    if (gt_members_index(r->members, r->n, r->gen_rank) >= 0) {
      r->epoch = epoch; /* run_reshape_members then finds epoch + 1, the one with this rank */
      return GT_OK;
    }
    epoch++;
  }
}

void run_reshape_finish(run_reshape *r, gt_job *job) {
  if (!gt_job_etcd(job) || r->gen_world < 2) return;
  gt_status s = gt_members_finish(job->store);
  if (s != GT_OK)
    gt_warn("%s: cannot record that training ended (%s): a rank restarting now waits out its join timeout", r->name,
            gt_last_error());
}

gt_status run_reshape_check_joins(run_reshape *r, gt_job *job, gt_comm *world, bool *grow) {
  /* Rank 0 reads the requests and publishes the epoch with them; one
   * all-reduce tells every rank, which then reshape at the same step. */
  float flag = 0;
  if (gt_comm_rank(world) == 0 && gt_now() >= r->joins_retry_at) {
    int ranks[GT_MEMBERS_MAX], count = 0, epoch = 0;
    /* With etcd, the watcher reads the count of requests off the step
     * path: the store is asked only when it grew, so a store without a
     * quorum holds no step. GT_FAULT holdjoin: a test's restarted worker
     * joins, however slow its start. */
    int64_t known = r->watch ? gt_members_watch_join_requests(r->watch) : -1;
    double hold = r->n < r->gen_world ? gt_fault_join_hold(&r->faults) : 0, until = gt_now() + hold;
    gt_status s = GT_OK;
    if (!r->watch || hold > 0 || (known >= 0 && known != r->joins_seen))
      s = gt_members_joins(job->store, r->gen_world, r->members, r->n, &r->joins_seen, ranks, &count);
    while (s == GT_OK && count == 0 && gt_now() < until) {
      struct timespec ts = {0, 50 * 1000000L};
      nanosleep(&ts, NULL);
      s = gt_members_joins(job->store, r->gen_world, r->members, r->n, &r->joins_seen, ranks, &count);
    }
    if (s == GT_OK && count) s = gt_members_add_set(job->store, r->gen_world, ranks, count, &epoch);
    if (s == GT_OK && count) {
      printf("%s: %d rank(s) ask to join: membership epoch %d takes them in\n", r->name, count, epoch);
      fflush(stdout);
    }
    /* The store away: training needs none of it; joins wait. */
    if (s != GT_OK) {
      gt_warn("%s: cannot look for ranks asking to join (%s); training goes on, looking again in %d s", r->name,
              gt_last_error(), RUN_JOIN_RETRY_S);
      r->joins_retry_at = gt_now() + RUN_JOIN_RETRY_S;
    }
    flag = s == GT_OK && count > 0 ? 1.0f : 0.0f;
  }
  GT_TRY(gt_comm_allreduce(world, &flag, 1, GT_F32, GT_COMM_SUM));
  *grow = flag > 0;
  return GT_OK;
}
