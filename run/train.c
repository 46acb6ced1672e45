/* The training loop (giant/run.h, gt_run_train): a step, the checkpoint
 * after it, the fail-slow monitor and the ladder's decision, rebalancing,
 * the copies of single-owner state, exclusions, joins, and the in-process
 * reshape after a failed step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "giant/engine/grid.h"
#include "giant/log.h"
#include "events.h"
#include "failslow.h"
#include "ladder.h"
#include "run_internal.h"
#include "core/data/loader_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/dist.h"
#include "giant/engine/init.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"
#include "resilience/detect/failslow.h"
#include "resilience/members/members.h"
#include "resilience/mitigate/rebalance.h"

/* --reshape with --failslow: a slow rank, or the ranks behind a slow
 * link, may be left out (the ladder's S3); they leave, in one epoch, and
 * the others reshape without them. Returns whether this rank left. */
static bool leave_if_excluded(gt_run *r, const int *excluded, int nexcl, int step, gt_status *s) {
  bool me = false;
  for (int k = 0; k < nexcl; k++) me |= excluded[k] == r->job->rank;
  if (!me) return false;
  int epoch = 0, gen[GT_MEMBERS_MAX];
  for (int k = 0; k < nexcl; k++) gen[k] = r->rsh.members[excluded[k]];
  *s = gt_members_remove_set(r->job->store, r->rsh.gen_world, gen, nexcl, &epoch);
  printf("%s: excluded after step %d (pid %d): membership epoch %d goes on without rank %d\n", r->o.program, step,
         (int)getpid(), epoch, r->rsh.gen_rank);
  if (*s != GT_OK)
    run_fail(r, GT_RUN_EXIT_FAILED, "leaving the job", *s);
  else
    r->rc = GT_RUN_EXIT_OK;
  return true;
}

/* After a failed step (failed) or with ranks to take in: the ranks left
 * go on at a new layout, trying the next membership epoch when another
 * rank is lost meanwhile (the old layout is intact until a reshape
 * succeeds). */
static gt_status reshape_and_go_on(gt_run *r, bool failed, int step) {
  /* Fail-slow monitoring and rebalancing were set up for the old layout. */
  run_rebalance_destroy(r->rb);
  r->rb = NULL;
  gt_failslow_destroy(r->failslow);
  r->failslow = NULL;
  if (!failed) gt_job_step(r->job, step);
  /* The fault is the lead's to tell (note_fault); when the lead is the
   * rank lost, the new lead tells it after the reshape. */
  bool was_lead = r->lead;
  char why[256];
  snprintf(why, sizeof why, "%s", failed ? gt_last_error() : "");
  gt_status s = run_reshape_now(r, !failed);
  for (int retry = 0; s != GT_OK && s != GT_ECANCELED && !r->rsh.state_lost && retry < RUN_RESHAPE_RETRIES; retry++) {
    run_report(r, "reshaping (trying the next membership epoch)", s);
    s = run_reshape_now(r, false);
  }
  if (s != GT_OK) /* GT_ECANCELED: the job went on without this rank */
    return run_fail(r, s == GT_ECANCELED ? GT_RUN_EXIT_FAILED : GT_RUN_EXIT_RESTART, "reshaping", s);
  GT_TRY(run_after_reshape(r));
  int at = gt_trainer_step_index(r->tr);
  if (failed && !was_lead) run_event(r, "fault", step - 1, "step %d failed: %s", step - 1, why);
  run_event(r, "reshape", at, "reshaped to dp=%d tp=%d pp=%d (world %d), going on at step %d", r->plan.layout.dp,
            r->plan.layout.tp, r->plan.layout.pp, r->job->world_size, at);
  return GT_OK;
}

/* What the ladder may do in this job now (ladder.h). */
static run_ladder_caps ladder_caps(const gt_run *r) {
  run_ladder_caps c = r->ladder;
  c.rows = r->rb && r->plan.layout.dp > 1;
  c.recut = r->rb && run_rebalance_recut_enabled(r->rb);
  c.exclude = r->o.reshape;
  c.restart = r->ckpt && r->job->world_size > 1;
  return c;
}

/* The ladder's S4: a checkpoint of this step, committed, then every rank
 * exits for giantrun to restart the job from it in fresh processes. */
static gt_status restart_now(gt_run *r) {
  int step = gt_trainer_step_index(r->tr);
  gt_status s = step % r->ckpt_args.every ? gt_ckpt_save(r->ckpt) : GT_OK; /* this step's, unless saved already */
  if (s == GT_OK) s = gt_ckpt_wait(r->ckpt);
  if (s != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "saving before the ladder's restart", s);
  if (r->lead)
    printf(
        "%s: ladder: restart: checkpoint of step %d committed; every worker exits %d for giantrun to restart the "
        "job from it\n",
        r->o.program, step, GT_RUN_EXIT_RESTART);
  fflush(stdout);
  gt_job_done(r->job);
  r->rc = GT_RUN_EXIT_RESTART;
  return GT_OK;
}

/* A failed step whose cause is the data file (changed under the loader)
 * is the input's: no retry, no reshape. */
static bool input_failed(const gt_run *r) { return gt_loader_file_failed(r->loader); }

/* A step that diverged failed on every rank alike (the loss and the norm
 * are the job's): the job ends with it, at once, rather than reshaping or
 * restarting into the same steps. */
static bool diverged(const gt_run *r) { return gt_trainer_diverged(r->tr); }

/* --eval-every: the validation loss after the step, on every rank (the
 * data-parallel replicas share the rows); none at a pipeline layout, which
 * a reshape may have come to. */
static gt_status evaluate(gt_run *r, gt_step_stats *st) {
  if (!run_eval_due(&r->eval, st->step, r->o.steps) || r->plan.layout.pp > 1 || !r->m) return GT_OK;
  GT_TRY(run_eval_loss(&r->eval, r->m, r->dist, &r->plan, r->cap, &st->eval_loss));
  st->has_eval = true;
  return GT_OK;
}

/* A failed step, in the event file: what failed, before the run reshapes,
 * restarts or ends. */
static void note_fault(gt_run *r, int step, gt_status s) {
  char why[512];
  snprintf(why, sizeof why, "%s", gt_last_error());
  run_event(r, "fault", step, "step %d failed: %s (%s)", step, why, gt_status_name(s));
  gt_errorf(s, "%s", why); /* what the run reports next */
}

/* The fail-slow monitor's verdicts of this step, in the event file. */
static void note_verdicts(gt_run *r, const gt_failslow_report *rep) {
  for (int k = 0; rep->gathered && k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    char what[64] = "";
    if (v->kind == GT_FAILSLOW_LINK && v->peer >= 0) snprintf(what, sizeof what, " link to rank %d", v->peer);
    if (v->kind == GT_FAILSLOW_LINK && v->peer < 0) snprintf(what, sizeof what, " links (its node's)");
    run_event(r, v->flagged ? "flagged" : "recovered", v->step, "rank %d%s %s x%.2f (evidence from step %d)", v->rank,
              what, v->flagged ? "slow" : "recovered", v->ratio, v->onset);
  }
}

/* The ladder's decision, in the event file. */
static void note_ladder(gt_run *r, int step, const run_ladder_action *act) {
  if (act->rung == GT_LADDER_NONE) return;
  char ranks[256] = "";
  for (int k = 0, at = 0; k < act->n && at < (int)sizeof ranks - 16; k++)
    at += snprintf(ranks + at, sizeof ranks - (size_t)at, "%s%d", k ? "," : " ranks ", act->ranks[k]);
  run_event(r, "ladder", step, "after step %d: %s%s", step, gt_ladder_rung_name(act->rung), ranks);
}

/* Where this rank's device memory peaked, by category (the ledger). */
static void log_memory_peak(const gt_run *r) {
  gt_memory_ledger l;
  if (!r->m || gt_model_memory_ledger(r->m, &l) != GT_OK) return;
  char line[512];
  gt_memory_ledger_format(&l, false, line, sizeof line);
  gt_info("device memory, rank %d: %s (the backend's peak %.1f MiB)", r->job->rank, line,
          (double)l.device_peak / (1 << 20));
}

gt_status gt_run_train(gt_run *r) {
  if (!r || !r->started || r->rsh.job_finished) return GT_OK; /* --print-plan, or nothing left to join */
  const gt_run_options *a = &r->o;
  gt_status s = GT_OK;
  gt_step_stats st = {0}, first = {0};
  gt_failslow_report report;
  int cut_first[GT_REBALANCE_MAX_STAGES + 1];
  int start = gt_trainer_step_index(r->tr);
  if (!r->progress && (s = run_progress_open(r, &r->progress)) != GT_OK)
    return run_fail(r, GT_RUN_EXIT_FAILED, "starting the progress records", s);
  if (start > 0 && !r->joining)
    run_event(r, "resume", start, "resumed at step %d (generation %ld, world %d)", start, r->job->generation,
              r->job->world_size);
  for (int i = start; i < a->steps; i++) {
    bool failed = (s = gt_trainer_step(r->tr, r->loader, &st)) != GT_OK ||
                  (!st.skipped && (s = evaluate(r, &st)) != GT_OK) ||
                  (!st.skipped && (s = run_observe_step(&r->obs, r->lead, &st)) != GT_OK) ||
                  (s = run_ckpt_after_step(&r->ckpt_args, r->ckpt, r->tr, r->lead)) != GT_OK ||
                  (s = run_failslow_after_step(r->failslow, &st, &report)) != GT_OK;
    if (failed) note_fault(r, i, s);
    if (!failed && r->failslow) {
      run_observe_failslow(&r->obs, r->lead, &report);
      note_verdicts(r, &report);
    }
    /* The ladder's one decision on what the monitor found, then its rung. */
    run_ladder_action act = {.rung = GT_LADDER_NONE};
    if (!failed && r->failslow) {
      run_ladder_caps caps = ladder_caps(r);
      run_ladder_decide(&r->rsh, r->job, &r->plan, &report, &caps, a->steps - (i + 1), r->lead, &act);
      note_ladder(r, i, &act);
    }
    bool already_failed = failed;
    bool urge = act.rung == GT_LADDER_REBALANCE || act.rung == GT_LADDER_RECUT;
    failed = failed ||
             (r->rb && (s = run_rebalance_after_step(r->rb, r->tr, &st, r->failslow ? &report : NULL, urge, r->lead)) !=
                           GT_OK) ||
             (a->reshape && (s = run_mirror_after_step(&r->rsh, r->tr, st.seconds, r->lead)) != GT_OK);
    if (failed && !already_failed) note_fault(r, i, s);
    if (failed && input_failed(r)) return run_fail(r, GT_RUN_EXIT_INPUT, "training", s);
    if (failed && diverged(r)) return run_fail(r, GT_RUN_EXIT_DIVERGED, "training", s);
    if (!failed && act.rung == GT_LADDER_RESTART) return restart_now(r);
    if (leave_if_excluded(r, act.ranks, act.rung == GT_LADDER_EXCLUDE ? act.n : 0, i + 1, &s)) return s;
    /* --reshape: ranks restarted alone ask to join, every few steps. */
    bool grow = act.rung == GT_LADDER_EXCLUDE && act.n > 0;
    if (!failed && !grow && a->reshape && r->dist && (i + 1) % RUN_JOIN_CHECK_EVERY == 0)
      failed = (s = run_reshape_check_joins(&r->rsh, r->job, gt_grid_world(gt_dist_grid(r->dist)), &grow)) != GT_OK;
    if (failed || grow) {
      if (failed) run_fail(r, GT_RUN_EXIT_FAILED, "training", s);
      if (failed && (!a->reshape || r->job->world_size == 1 || run_ckpt_stop_signal())) return s;
      GT_TRY(reshape_and_go_on(r, failed, i + 1));
      i = gt_trainer_step_index(r->tr) - 1;
      continue;
    }
    if (run_rebalance_take_recut(r->rb, cut_first)) {
      gt_ckpt_destroy(r->ckpt); /* after the save in flight; made again on the new trainer */
      r->ckpt = NULL;
      s = run_recut(r, r->shares[r->plan.me.dp], cut_first);
      if (s == GT_OK) s = run_ckpt_rebind(&r->ckpt_args, r->job, r->tr, r->loader, &r->ckpt);
      if (s != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "re-cutting the pipeline", s);
    }
    if (i == start) first = st;
    gt_job_step(r->job, i + 1); /* giantrun's hang detection watches this */
    run_progress_step(r->progress, r, &st, i + 1);
    if (run_ckpt_stop_signal()) {
      if (r->lead) printf("%s: signal %d: stopping after step %d\n", r->o.program, run_ckpt_stop_signal(), i + 1);
      r->rc = 128 + run_ckpt_stop_signal();
      return GT_OK;
    }
  }
  /* --delayed-update: the last step's gradients are still held. */
  if ((s = gt_trainer_flush(r->tr)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "applying the last update", s);
  run_ckpt_finish(&r->ckpt_args, r->ckpt, r->tr, r->lead);
  run_progress_ckpt(r->progress, r);
  if (a->reshape && r->lead) run_reshape_finish(&r->rsh, r->job); /* for a rank still asking to join */
  gt_job_done(r->job);
  run_failslow_summary(r->failslow, r->lead);
  /* A run that resumed where training ends (a restart after the last
   * step's checkpoint) took no step: it has no loss to show. */
  if (r->lead && start < a->steps)
    printf("loss %.6f -> %.6f over steps %d..%d\n", first.loss, st.loss, start, a->steps);
  else if (r->lead)
    printf("no steps left: resumed at step %d of %d\n", start, a->steps);
  log_memory_peak(r);
  r->trained = true;
  r->rc = GT_RUN_EXIT_OK;
  return GT_OK;
}
