/* The job's leader on this node. Every agent campaigns for its job's
 * leadership (giant/engine/coord.h) for as long as it runs; the one that leads
 * decides the workers' fail-slow mitigation. Its thread reads the report
 * worker rank 0 publishes (the replicas' measured speeds and shares), runs
 * the rebalancing decision on it (predicted step before and after, the
 * switch's cost over a horizon, hysteresis), logs it with its numbers and
 * writes the decision under its term, so that a deposed leader's write is
 * refused. The workers pick the decision up and apply it at one step
 * boundary (docs/failslow.md). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/engine/coord.h"
#include "giant/log.h"
#include "launch/agent.h"
#include "giant/engine/etcd.h"
#include "resilience/mitigate/decide.h"
#include "resilience/mitigate/rebalance.h"
#include "resilience/rdzv/rdzv.h"

/* How often the leader looks for a new report: a report comes every few
 * steps, and a step is rarely shorter than this. */
#define LEAD_POLL_S 0.2
/* The decision's horizon and hysteresis, as the workers' local decision
 * (run/rebalance.c) has them: a switch must pay back its cost
 * over HORIZON steps and shrink the predicted step by MIN_GAIN. */
#define HORIZON 50
#define MIN_GAIN 0.07
/* Reports in a row that must agree on a change (a report comes every few
 * steps), unless the monitor flagged a rank; more after a recent switch:
 * the leader damps its switches as the workers' own decision does. */
#define AGREE 2

struct lead {
  gt_leader *leader;
  gt_etcd_client *cli;
  char job[GT_RDZV_ID_MAX + 1], node[GT_RDZV_ID_MAX + 1];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  /* What the thread last judged: the report's step and epoch, the shares
   * it proposed and how many reports in a row did, and the damping of the
   * switches it decided (a new leader starts undamped). */
  int64_t seen_step, seen_epoch;
  int proposed[GT_MITIGATION_MAX_DP], agreed;
  int cut_proposed[GT_REBALANCE_MAX_STAGES + 1], cut_agreed; /* the same for the pipeline cut */
  gt_rebalance_damping rows_damping, cut_damping;
};

static void print_list(char *buf, size_t len, const char *sep, int n, const int *ints, const double *reals) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && at < len; i++) {
    int w = ints ? snprintf(buf + at, len - at, "%s%d", i ? sep : "", ints[i])
                 : snprintf(buf + at, len - at, "%s%.1f", i ? sep : "", reals[i]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

/* Writes the decision for rep, epoch cur + 1, under term: false when the
 * write was refused (logged). */
static bool decide_write(struct lead *l, const gt_mitigation_report *rep, const int *next,
                         const gt_rebalance_decision *d, int64_t term, int64_t cur) {
  gt_mitigation m = {.epoch = cur + 1,
                     .term = term,
                     .step = rep->step,
                     .dp = rep->dp,
                     .step_now_s = d->step_now_s,
                     .step_new_s = d->step_new_s,
                     .gain_s = d->gain_s};
  memcpy(m.shares, next, (size_t)rep->dp * sizeof *next);
  snprintf(m.by, sizeof m.by, "%s", l->node);
  char from[2048], to[2048], speeds[4096];
  print_list(from, sizeof from, ",", rep->dp, rep->shares, NULL);
  print_list(to, sizeof to, ",", rep->dp, next, NULL);
  print_list(speeds, sizeof speeds, " ", rep->dp, NULL, rep->speed);
  if (gt_mitigation_put(l->cli, l->job, term, &m) != GT_OK) {
    gt_warn("giantrun: leader %s: %s", l->node, gt_last_error());
    return false;
  }
  gt_info("giantrun: leader %s (term %" PRId64 ") decides at step %" PRId64
          ": rows %s -> %s (replica speeds %s "
          "rows/s; predicted step %.6f s -> %.6f s, transition %.6f s over %d steps: gain %.4f s); epoch %" PRId64,
          l->node, term, rep->step, from, to, speeds, d->step_now_s, d->step_new_s, rep->transition_s, HORIZON,
          d->gain_s, m.epoch);
  return true;
}

/* Writes a pipeline cut for rep, epoch cur + 1, under term (the rows as
 * they are): false when the write was refused (logged). */
static bool decide_cut_write(struct lead *l, const gt_mitigation_report *rep, const gt_rebalance_cut *c, int64_t term,
                             int64_t cur) {
  gt_mitigation m = {.epoch = cur + 1,
                     .term = term,
                     .step = rep->step,
                     .dp = rep->dp,
                     .step_now_s = c->step_now_s,
                     .step_new_s = c->step_new_s,
                     .gain_s = c->gain_s,
                     .pp = c->pp};
  memcpy(m.shares, rep->shares, (size_t)rep->dp * sizeof *rep->shares);
  memcpy(m.cut, c->next, (size_t)(c->pp + 1) * sizeof *c->next);
  snprintf(m.by, sizeof m.by, "%s", l->node);
  char from[1024], to[1024], speeds[2048];
  print_list(from, sizeof from, ",", c->pp, c->now, NULL);
  print_list(to, sizeof to, ",", c->pp, c->next, NULL);
  print_list(speeds, sizeof speeds, " ", c->pp, NULL, c->speed);
  if (gt_mitigation_put(l->cli, l->job, term, &m) != GT_OK) {
    gt_warn("giantrun: leader %s: %s", l->node, gt_last_error());
    return false;
  }
  gt_info("giantrun: leader %s (term %" PRId64 ") decides at step %" PRId64
          ": pipeline cut %s -> %s of %d (stage "
          "speeds %s; predicted slowest stage %.6f s -> %.6f s: gain %.4f s over %d steps); epoch %" PRId64,
          l->node, term, rep->step, from, to, c->layers, speeds, c->step_now_s, c->step_new_s, c->gain_s, HORIZON,
          m.epoch);
  return true;
}

/* The pipeline cut on rep: true when a new one was decided (and written). */
static gt_status judge_cut(struct lead *l, const gt_mitigation_report *rep, int64_t term, int64_t epoch, bool *wrote) {
  *wrote = false;
  if (rep->pp < 2) return GT_OK;
  gt_rebalance_cut c;
  double min_gain = gt_rebalance_damping_gain(&l->cut_damping, rep->step, MIN_GAIN);
  GT_TRY(gt_mitigation_decide_cut(rep, HORIZON, min_gain, &c));
  int agreed = gt_rebalance_agree(l->cut_proposed, &l->cut_agreed, c.change, c.next, c.pp + 1);
  int agree = gt_rebalance_damping_persist(&l->cut_damping, rep->step, AGREE);
  if (c.change && (agreed >= agree || rep->urgent)) {
    *wrote = decide_cut_write(l, rep, &c, term, rep->epoch > epoch ? rep->epoch : epoch);
    if (*wrote) gt_rebalance_damping_note(&l->cut_damping, rep->step);
    l->cut_agreed = 0;
    l->agreed = 0;
  }
  return GT_OK;
}

/* One look at the report, as the leader of term. */
static gt_status judge(struct lead *l, int64_t term) {
  gt_mitigation_report rep;
  gt_mitigation cur;
  int have_rep = 0, have_cur = 0;
  GT_TRY(gt_mitigation_report_get(l->cli, l->job, &rep, &have_rep));
  if (!have_rep || (rep.step == l->seen_step && rep.epoch == l->seen_epoch)) return GT_OK;
  GT_TRY(gt_mitigation_get(l->cli, l->job, &cur, &have_cur));
  int64_t epoch = have_cur ? cur.epoch : 0;
  /* A report at other shares than the latest decision's is stale (the
   * workers have not applied it yet, or it predates it): wait for theirs.
   * A report ahead of the decisions (a job that outlived a record's
   * removal) is judged as it stands. */
  if (rep.epoch < epoch) return GT_OK;
  if (rep.epoch != l->seen_epoch) l->agreed = 0;
  l->seen_step = rep.step;
  l->seen_epoch = rep.epoch;
  bool cut;
  GT_TRY(judge_cut(l, &rep, term, epoch, &cut));
  if (cut) return GT_OK; /* the rows are judged at the new cut */
  int next[GT_MITIGATION_MAX_DP];
  gt_rebalance_decision d;
  double min_gain = gt_rebalance_damping_gain(&l->rows_damping, rep.step, MIN_GAIN);
  GT_TRY(gt_mitigation_decide(&rep, HORIZON, min_gain, next, &d));
  int agreed = gt_rebalance_agree(l->proposed, &l->agreed, d.change, next, rep.dp);
  int agree = gt_rebalance_damping_persist(&l->rows_damping, rep.step, AGREE);
  if (d.change && (agreed >= agree || rep.urgent)) {
    if (decide_write(l, &rep, next, &d, term, rep.epoch > epoch ? rep.epoch : epoch))
      gt_rebalance_damping_note(&l->rows_damping, rep.step);
    l->agreed = 0;
  }
  return GT_OK;
}

/* Waits s seconds or until stop; returns stop. */
static int nap(struct lead *l, double s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ns = ts.tv_nsec + (long long)(s * 1e9);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  pthread_mutex_lock(&l->mu);
  if (!l->stop) pthread_cond_timedwait(&l->cv, &l->mu, &ts);
  int stop = l->stop;
  pthread_mutex_unlock(&l->mu);
  return stop;
}

static void *lead_main(void *arg) {
  struct lead *l = arg;
  int warned = 0;
  while (!nap(l, LEAD_POLL_S)) {
    int64_t term = gt_leader_term(l->leader); /* leader.c logs when it starts to lead */
    if (!term) continue;
    if (judge(l, term) != GT_OK) {
      if (!warned) gt_warn("giantrun: leader %s: %s; retrying", l->node, gt_last_error());
      warned = 1;
    } else {
      warned = 0;
    }
  }
  return NULL;
}

gt_status lead_start(lead **out, const agent_opts *o, const char *endpoints) {
  *out = NULL;
  struct lead *l = calloc(1, sizeof *l);
  if (!l) return gt_errorf(GT_ENOMEM, "out of memory");
  snprintf(l->job, sizeof l->job, "%s", o->job_id);
  snprintf(l->node, sizeof l->node, "%s", o->node_id);
  l->seen_step = -1;
  gt_rebalance_damping_init(&l->rows_damping, HORIZON);
  gt_rebalance_damping_init(&l->cut_damping, HORIZON);
  gt_etcd_config ec = {.endpoints = endpoints,
                       .cacert = o->cacert,
                       .cert = o->cert,
                       .key = o->key,
                       .user = o->user,
                       .password = o->user ? o->password : NULL};
  gt_leader_config lc = {.etcd = ec, .job_id = o->job_id, .node_id = o->node_id, .ttl_s = o->ttl_s};
  gt_status s = gt_etcd_connect(&ec, &l->cli);
  if (s == GT_OK) s = gt_leader_open(&lc, &l->leader);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  if (s == GT_OK && pthread_create(&l->thread, NULL, lead_main, l) != 0)
    s = gt_errorf(GT_EIO, "cannot start the leader's thread");
  if (s != GT_OK) {
    gt_leader_close(l->leader);
    gt_etcd_close(l->cli);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    return gt_error_context(s, "campaigning for the leadership of job %s", o->job_id);
  }
  *out = l;
  return GT_OK;
}

void lead_stop(lead *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->thread, NULL);
  gt_leader_close(l->leader); /* resigns: another agent leads at once */
  gt_etcd_close(l->cli);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
