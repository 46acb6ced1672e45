/* The run's progress on etcd (progress.h). The training loop hands each
 * step's numbers over under a mutex; the thread writes them once a second.
 * The job's step time and ETA are the step line's (observe.c): one
 * smoothed pace for both. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/peers_api.h"
#include "giant/log.h"
#include "progress.h"
#include "run_internal.h"
#ifdef GIANT_HAVE_ETCD
#include "giant/engine/progress.h"
#include "resilience/rdzv/rdzv.h"
#endif

#define PUBLISH_EVERY_S 1.0

#ifdef GIANT_HAVE_ETCD
struct run_progress {
  gt_etcd_client *etcd;
  char job_id[128];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop, dirty, lead;
  gt_progress_rank rank;
  gt_progress_job job;
  bool warned;
};

static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One write of both records; a failure is said once, then only again
 * after a write went through. */
static void publish(run_progress *p, const gt_progress_rank *rank, const gt_progress_job *job, bool lead) {
  gt_status s = gt_progress_put_rank(p->etcd, p->job_id, rank);
  if (s == GT_OK && lead) s = gt_progress_put_job(p->etcd, p->job_id, job);
  if (s != GT_OK && !p->warned) gt_warn("progress: could not write to etcd (giantrun --status): %s", gt_last_error());
  p->warned = s != GT_OK;
}

static void *progress_main(void *arg) {
  run_progress *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && !p->dirty) pthread_cond_wait(&p->cv, &p->mu);
    if (!p->dirty) break;
    gt_progress_rank rank = p->rank;
    gt_progress_job job = p->job;
    bool lead = p->lead, stop = p->stop;
    p->dirty = false;
    pthread_mutex_unlock(&p->mu);
    publish(p, &rank, &job, lead);
    pthread_mutex_lock(&p->mu);
    if (stop) break;
    /* Then a second's rest, cut short only by close. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)PUBLISH_EVERY_S;
    while (!p->stop)
      if (pthread_cond_timedwait(&p->cv, &p->mu, &until) != 0) break;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

gt_status run_progress_open(gt_run *r, run_progress **out) {
  *out = NULL;
  gt_etcd_client *etcd = gt_job_etcd(r->job);
  if (!etcd || !r->job->job_id[0]) return GT_OK;
  run_progress *p = calloc(1, sizeof *p);
  if (!p) return gt_errorf(GT_ENOMEM, "out of memory");
  p->etcd = etcd;
  snprintf(p->job_id, sizeof p->job_id, "%s", r->job->job_id);
  const char *node = getenv("GT_NODE_ID");
  snprintf(p->rank.node, sizeof p->rank.node, "%s", node && gt_rdzv_valid_id(node) ? node : "");
  p->rank.pid = (int)getpid();
  p->job.ckpt = -1;
  p->job.eta_s = -1;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (pthread_create(&p->thread, NULL, progress_main, p) != 0) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    return gt_errorf(GT_EIO, "could not start the progress thread");
  }
  *out = p;
  return GT_OK;
}

/* Rank 0 learns that a save committed when its writer ends. */
static void note_ckpt(run_progress *p, const gt_run *r) {
  gt_ckpt_stats cs;
  if (!r->ckpt) return;
  gt_ckpt_get_stats(r->ckpt, &cs);
  if (cs.finished >= 0 && cs.result == GT_OK) p->job.ckpt = cs.finished;
}

void run_progress_ckpt(run_progress *p, const gt_run *r) {
  if (!p || !r->lead) return;
  pthread_mutex_lock(&p->mu);
  note_ckpt(p, r);
  p->dirty = true;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void run_progress_step(run_progress *p, const gt_run *r, const gt_step_stats *st, int step_done) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->lead = r->lead;
  p->rank.rank = r->job->rank;
  p->rank.gen = r->job->generation;
  p->rank.world = r->job->world_size;
  p->rank.step = step_done;
  p->rank.step_ms = st->seconds * 1e3;
  p->rank.time = unix_now();
  if (r->lead) {
    gt_progress_job *j = &p->job;
    j->gen = r->job->generation;
    j->world = r->job->world_size;
    j->dp = r->plan.layout.dp;
    j->tp = r->plan.layout.tp;
    j->pp = r->plan.layout.pp;
    j->step = step_done;
    j->steps = r->o.steps;
    j->step_ms = (r->obs.step_avg > 0 ? r->obs.step_avg : st->seconds) * 1e3; /* the ETA's pace */
    j->tokens_per_s = st->tokens_per_s;
    j->mfu = st->mfu;
    j->loss = isfinite(st->loss) ? st->loss : -1;
    j->eta_s = st->eta_s; /* the step line's estimate (observe.c) */
    j->time = p->rank.time;
    note_ckpt(p, r);
  }
  p->dirty = true;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void run_progress_close(run_progress *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}
#else
struct run_progress {
  int unused;
};
gt_status run_progress_open(struct gt_run *r, run_progress **out) {
  (void)r;
  *out = NULL;
  return GT_OK;
}
void run_progress_step(run_progress *p, const struct gt_run *r, const gt_step_stats *st, int step_done) {
  (void)p, (void)r, (void)st, (void)step_done;
}
void run_progress_ckpt(run_progress *p, const struct gt_run *r) { (void)p, (void)r; }
void run_progress_close(run_progress *p) { (void)p; }
#endif
