/* --reshape with --failslow: the ladder's S3, leaving out ranks the
 * fail-slow monitor flags (giant/ladder.h). A rank slow in its compute is
 * weighed against the other rungs; the ranks behind a slow link (their
 * node's own) against doing nothing. Every input is the same on every
 * rank (the gathered telemetry, the verdicts, constants), so every rank
 * decides alike and no agreement is needed. */
#include <stdio.h>
#include <time.h>

#include "giant/coord.h"
#include "giant/ladder.h"
#include "giant/log.h"
#include "reshape.h"

static double slowest_step(const gt_failslow_report *rep) {
  double step = 0;
  for (int q = 0; q < rep->nranks; q++)
    if (rep->telemetry[q].step_s > step) step = rep->telemetry[q].step_s;
  return step;
}

static void log_decision(const char *name, const char *what, double step, const gt_ladder_decision *d, const double *cost_s,
                         int horizon) {
  printf("%s: ladder: %s (step %.1f ms); predicted ms per step over %d steps, plus the change:", name, what, step * 1e3,
         horizon);
  for (int q = 0; q <= 4; q++)
    if (d->step_s[q] > 0)
      printf(" %s %.1f%s", q ? gt_ladder_rung_name((gt_ladder_rung)q) : "as is", d->step_s[q] * 1e3,
             q && cost_s[q] > 0 ? " (+cost)" : "");
  printf(": %s\n", d->rung ? gt_ladder_rung_name(d->rung) : "as is");
  fflush(stdout);
}

/* Rank 0: the exclusion in the health records. */
static void record(run_reshape *r, gt_job *job, const gt_failslow_verdict *v, gt_health_kind kind, double step,
                   double predicted) {
  gt_etcd_client *etcd = gt_job_etcd(job);
  if (!etcd) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  gt_health_record h = {.rank = r->members[v->rank], .state = GT_HEALTH_EXCLUDED, .kind = kind, .peer = -1,
                        .ratio = v->ratio, .observed_ms = step * 1e3, .predicted_ms = predicted * 1e3,
                        .step = v->step, .time = (double)now.tv_sec + now.tv_nsec * 1e-9};
  if (gt_health_put(etcd, job->job_id, &h) != GT_OK)
    gt_warn("ladder: could not record rank %d's exclusion in etcd: %s", v->rank, gt_last_error());
}

/* A rank slow in its compute: the whole ladder. */
static int consider_compute(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                            bool can_rebalance, bool can_restart, int horizon, bool lead, int *out) {
  for (int k = 0; k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (!v->flagged || v->kind != GT_FAILSLOW_COMPUTE || !(v->ratio > 1)) continue;
    double step = slowest_step(rep);
    gt_ladder_input in = {.dp = plan->layout.dp, .pp = plan->layout.pp, .step_s = step, .slowdown = v->ratio,
                          .horizon = horizon, .can = {true, can_rebalance, can_rebalance, true, can_restart},
                          .cost_s = {0, 0, RUN_COST_RECUT_S, RUN_COST_EXCLUDE_S, RUN_COST_RESTART_S},
                          .min_share = can_rebalance ? 0.5 : 0};
    gt_ladder_decision d;
    if (gt_ladder_decide(&in, &d) != GT_OK) continue;
    if (lead) {
      char what[64];
      snprintf(what, sizeof what, "rank %d is x%.2f slow", v->rank, v->ratio);
      log_decision(r->name, what, step, &d, in.cost_s, horizon);
    }
    if (d.rung != GT_LADDER_EXCLUDE) continue;
    if (lead) record(r, job, v, GT_HEALTH_COMPUTE, step, d.step_s[GT_LADDER_EXCLUDE]);
    out[0] = v->rank;
    return 1;
  }
  return 0;
}

/* The ranks behind a slow link, flagged together: all of them, or none. */
static int consider_link(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                         bool can_restart, int horizon, bool lead, int *out) {
  int n = 0;
  for (int k = 0; k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (v->flagged && v->kind == GT_FAILSLOW_LINK && v->peer < 0) out[n++] = v->rank;
  }
  if (!n) return 0;
  /* The replicas they hold: tensor- and pipeline-parallel ranks of one
   * replica sit side by side on a node. */
  int per_replica = plan->layout.tp * plan->layout.pp, replicas = (n + per_replica - 1) / per_replica;
  double step = slowest_step(rep);
  gt_ladder_link_input in = {.dp = plan->layout.dp, .replicas = replicas, .step_s = step, .wait_s = rep->wait_s,
                             .wait_base_s = rep->wait_base_s, .horizon = horizon,
                             .can = {true, false, false, true, can_restart},
                             .cost_s = {0, 0, 0, RUN_COST_EXCLUDE_S, RUN_COST_RESTART_S}};
  gt_ladder_decision d;
  if (gt_ladder_decide_link(&in, &d) != GT_OK) return 0;
  if (lead) {
    char what[96];
    snprintf(what, sizeof what, "the link of rank%s %d%s is slow (waits %.1f ms, normally %.1f ms)",
             n > 1 ? "s" : "", out[0], n > 1 ? " and the others behind it" : "", rep->wait_s * 1e3,
             rep->wait_base_s * 1e3);
    log_decision(r->name, what, step, &d, in.cost_s, horizon);
  }
  if (d.rung != GT_LADDER_EXCLUDE) return 0;
  for (int k = 0; lead && k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (v->flagged && v->kind == GT_FAILSLOW_LINK && v->peer < 0)
      record(r, job, v, GT_HEALTH_LINK, step, d.step_s[GT_LADDER_EXCLUDE]);
  }
  return n;
}

int run_reshape_consider_exclusion(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                                   bool can_rebalance, bool can_restart, int steps_left, bool lead, int *out) {
  int horizon = steps_left < RUN_LADDER_HORIZON ? steps_left : RUN_LADDER_HORIZON;
  if (!rep->gathered || plan->layout.dp < 2 || horizon < 1) return 0;
  int n = consider_compute(r, job, plan, rep, can_rebalance, can_restart, horizon, lead, out);
  return n ? n : consider_link(r, job, plan, rep, can_restart, horizon, lead, out);
}
