/* The mitigation ladder in a run (giant/engine/ladder.h): when the fail-slow
 * monitor flags a rank slow in its compute, the rung this job can take
 * that predicts the least time over the steps left (S1 rows, S2 re-cut,
 * S3 exclude, S4 restart), or the one --ladder names; the ranks behind a
 * slow link (their node's own) weigh S3 and S4 against doing nothing. One
 * decision, which the run then carries out. Every input is the same on
 * every rank (the gathered telemetry, the verdicts, constants), so every
 * rank decides alike and no agreement is needed. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "giant/engine/coord.h"
#include "giant/engine/ladder.h"
#include "giant/log.h"
#include "ladder.h"
#include "giant/engine/etcd.h"
#include "giant/engine/init.h"
#include "giant/engine/plan.h"
#include "resilience/detect/failslow.h"
#include "resilience/members/members.h"

static double slowest_step(const gt_failslow_report *rep) {
  double step = 0;
  for (int q = 0; q < rep->nranks; q++)
    if (rep->telemetry[q].step_s > step) step = rep->telemetry[q].step_s;
  return step;
}

static void log_decision(const char *name, const char *what, double step, const gt_ladder_decision *d,
                         const double *cost_s, int horizon, const run_ladder_caps *caps) {
  printf("%s: ladder: %s (step %.1f ms); predicted ms per step over %d steps, plus the change:", name, what, step * 1e3,
         horizon);
  for (int q = 0; q <= 4; q++)
    if (d->step_s[q] > 0)
      printf(" %s %.1f%s", q ? gt_ladder_rung_name((gt_ladder_rung)q) : "as is", d->step_s[q] * 1e3,
             q && cost_s[q] > 0 ? " (+cost)" : "");
  printf(": %s%s\n", d->rung ? gt_ladder_rung_name(d->rung) : "as is", caps->forced_set ? " (--ladder)" : "");
  fflush(stdout);
}

/* Rank 0: the exclusion in the health records. */
static void record(run_reshape *r, gt_job *job, const gt_failslow_verdict *v, gt_health_kind kind, double step,
                   double predicted) {
  gt_etcd_client *etcd = gt_job_etcd(job);
  if (!etcd) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  gt_health_record h = {.rank = r->members[v->rank],
                        .state = GT_HEALTH_EXCLUDED,
                        .kind = kind,
                        .peer = -1,
                        .ratio = v->ratio,
                        .observed_ms = step * 1e3,
                        .predicted_ms = predicted * 1e3,
                        .step = v->step,
                        .time = (double)now.tv_sec + now.tv_nsec * 1e-9};
  if (gt_health_put(etcd, job->job_id, &h) != GT_OK)
    gt_warn("ladder: could not record rank %d's exclusion in etcd: %s", v->rank, gt_last_error());
}

/* The rung --ladder forces, when the job can take it. */
static void force(const run_ladder_caps *caps, const bool *can, gt_ladder_decision *d) {
  if (caps->forced > GT_LADDER_NONE && can[caps->forced])
    d->rung = caps->forced;
  else if (caps->forced == GT_LADDER_NONE && caps->forced_set)
    d->rung = GT_LADDER_NONE;
}

/* A rank slow in its compute: the whole ladder. */
static bool consider_compute(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                             const run_ladder_caps *caps, int horizon, bool lead, run_ladder_action *out) {
  for (int k = 0; k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (!v->flagged || v->kind != GT_FAILSLOW_COMPUTE || !(v->ratio > 1)) continue;
    double step = slowest_step(rep);
    gt_ladder_input in = {.dp = plan->layout.dp,
                          .pp = plan->layout.pp,
                          .step_s = step,
                          .slowdown = v->ratio,
                          .horizon = horizon,
                          .can = {true, caps->rows, caps->recut, caps->exclude && plan->layout.dp > 1, caps->restart},
                          .cost_s = {0, 0, RUN_COST_RECUT_S, RUN_COST_EXCLUDE_S, RUN_COST_RESTART_S},
                          .min_share = caps->rows ? 0.5 : 0};
    gt_ladder_decision d;
    if (gt_ladder_decide(&in, &d) != GT_OK) continue;
    force(caps, in.can, &d);
    if (lead) {
      char what[64];
      snprintf(what, sizeof what, "rank %d is x%.2f slow", v->rank, v->ratio);
      log_decision(r->name, what, step, &d, in.cost_s, horizon, caps);
    }
    out->rung = d.rung;
    if (d.rung == GT_LADDER_EXCLUDE && lead) record(r, job, v, GT_HEALTH_COMPUTE, step, d.step_s[GT_LADDER_EXCLUDE]);
    if (d.rung == GT_LADDER_EXCLUDE) out->ranks[out->n++] = v->rank;
    return true;
  }
  return false;
}

/* The ranks behind a slow link, flagged together: all of them, or none. */
static void consider_link(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                          const run_ladder_caps *caps, int horizon, bool lead, run_ladder_action *out) {
  int n = 0, ranks[GT_MEMBERS_MAX];
  for (int k = 0; k < rep->nverdicts && n < GT_MEMBERS_MAX; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (v->flagged && v->kind == GT_FAILSLOW_LINK && v->peer < 0) ranks[n++] = v->rank;
  }
  if (!n) return;
  /* The replicas they hold: tensor- and pipeline-parallel ranks of one
   * replica sit side by side on a node. */
  int per_replica = plan->layout.tp * plan->layout.pp, replicas = (n + per_replica - 1) / per_replica;
  double step = slowest_step(rep);
  gt_ladder_link_input in = {.dp = plan->layout.dp,
                             .replicas = replicas,
                             .step_s = step,
                             .wait_s = rep->wait_s,
                             .wait_base_s = rep->wait_base_s,
                             .horizon = horizon,
                             .can = {true, false, false, caps->exclude && replicas < plan->layout.dp, caps->restart},
                             .cost_s = {0, 0, 0, RUN_COST_EXCLUDE_S, RUN_COST_RESTART_S}};
  gt_ladder_decision d;
  if (gt_ladder_decide_link(&in, &d) != GT_OK) return;
  force(caps, in.can, &d);
  if (lead) {
    char what[96];
    snprintf(what, sizeof what, "the link of rank%s %d%s is slow (waits %.1f ms, normally %.1f ms)", n > 1 ? "s" : "",
             ranks[0], n > 1 ? " and the others behind it" : "", rep->wait_s * 1e3, rep->wait_base_s * 1e3);
    log_decision(r->name, what, step, &d, in.cost_s, horizon, caps);
  }
  out->rung = d.rung;
  if (d.rung != GT_LADDER_EXCLUDE) return;
  for (int k = 0; k < rep->nverdicts; k++) {
    const gt_failslow_verdict *v = &rep->verdicts[k];
    if (v->flagged && v->kind == GT_FAILSLOW_LINK && v->peer < 0) {
      if (lead) record(r, job, v, GT_HEALTH_LINK, step, d.step_s[GT_LADDER_EXCLUDE]);
      out->ranks[out->n++] = v->rank;
    }
  }
}

void run_ladder_decide(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                       const run_ladder_caps *caps, int steps_left, bool lead, run_ladder_action *out) {
  *out = (run_ladder_action){.rung = GT_LADDER_NONE};
  int horizon = steps_left < RUN_LADDER_HORIZON ? steps_left : RUN_LADDER_HORIZON;
  if (!rep->gathered || horizon < 1) return;
  if (!consider_compute(r, job, plan, rep, caps, horizon, lead, out))
    consider_link(r, job, plan, rep, caps, horizon, lead, out);
}

gt_status run_ladder_parse(const char *text, run_ladder_caps *caps) {
  caps->forced = GT_LADDER_NONE;
  caps->forced_set = false;
  if (!text || !strcmp(text, "auto")) return GT_OK;
  static const char *names[5] = {"none", "rows", "recut", "exclude", "restart"};
  for (int k = 0; k < 5; k++)
    if (!strcmp(text, names[k])) {
      caps->forced = (gt_ladder_rung)k;
      caps->forced_set = true;
      return GT_OK;
    }
  return gt_errorf(GT_EINVAL, "--ladder takes auto, none, rows, recut, exclude or restart, not '%s'", text);
}
