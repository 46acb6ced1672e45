/* Worker rank 0's link to the job's coordinator: a thread that publishes
 * reports and polls the leader's decision (coord_link.h). */
#include "coord_link.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/log.h"
#include "giant/protocol.h"
#include "giant/engine/coord.h"
#include "giant/engine/etcd.h"
#include "giant/engine/init.h"

#ifdef GIANT_HAVE_ETCD
/* How often the decision is read: a few times a step at most. */
#define POLL_S 0.1

struct run_coord_link {
  gt_etcd_client *cli; /* the job's */
  char job[128];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop, pending, have;
  gt_mitigation_report report; /* to publish, when pending */
  gt_mitigation latest;        /* when have */
};

bool run_coord_led(gt_job *job) {
  const char *c = getenv(GT_ENV_COORD);
  return c && !strcmp(c, GT_COORD_LEADER) && gt_job_etcd(job) != NULL;
}

static void *link_main(void *arg) {
  run_coord_link *l = arg;
  bool warned = false;
  gt_mitigation_report *rep = malloc(sizeof *rep);
  gt_mitigation *m = malloc(sizeof *m);
  for (;;) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(POLL_S * 1e9);
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stop && !l->pending && pthread_cond_timedwait(&l->cv, &l->mu, &until) == 0) {}
    bool stop = l->stop, send = l->pending && rep;
    if (send) {
      *rep = l->report;
      l->pending = false;
    }
    pthread_mutex_unlock(&l->mu);
    if (stop || !rep || !m) break;
    gt_status s = send ? gt_mitigation_report_put(l->cli, l->job, rep) : GT_OK;
    int found = 0;
    if (s == GT_OK) s = gt_mitigation_get(l->cli, l->job, m, &found);
    if (s == GT_OK && found) {
      pthread_mutex_lock(&l->mu);
      l->latest = *m;
      l->have = true;
      pthread_mutex_unlock(&l->mu);
    }
    /* etcd away: training goes on at the shares it has. */
    if (s != GT_OK && !warned) gt_warn("rebalance: the job's coordinator: %s; retrying", gt_last_error());
    warned = s != GT_OK;
  }
  free(rep);
  free(m);
  return NULL;
}

gt_status run_coord_link_start(gt_job *job, run_coord_link **out, int64_t *epoch) {
  *out = NULL;
  run_coord_link *l = calloc(1, sizeof *l);
  if (!l) return gt_errorf(GT_ENOMEM, "out of memory for the coordinator's link");
  l->cli = gt_job_etcd(job);
  snprintf(l->job, sizeof l->job, "%s", job->job_id);
  int found = 0;
  gt_status s = gt_mitigation_get(l->cli, l->job, &l->latest, &found);
  if (s != GT_OK) {
    free(l);
    return gt_error_context(s, "reading the job's mitigation");
  }
  *epoch = found ? l->latest.epoch : 0;
  l->have = found;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  if (pthread_create(&l->thread, NULL, link_main, l) != 0) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    return gt_errorf(GT_EIO, "cannot start the coordinator's link thread");
  }
  *out = l;
  return GT_OK;
}

void run_coord_link_publish(run_coord_link *l, const gt_mitigation_report *r) {
  pthread_mutex_lock(&l->mu);
  l->report = *r;
  l->pending = true;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

bool run_coord_link_latest(run_coord_link *l, gt_mitigation *m) {
  pthread_mutex_lock(&l->mu);
  bool have = l->have;
  if (have) *m = l->latest;
  pthread_mutex_unlock(&l->mu);
  return have;
}

void run_coord_link_stop(run_coord_link *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->thread, NULL);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
#else
/* A build without etcd has no coordinator: --rebalance decides locally. */
bool run_coord_led(gt_job *job) {
  (void)job;
  return false;
}
gt_status run_coord_link_start(gt_job *job, run_coord_link **out, int64_t *epoch) {
  (void)job;
  (void)epoch;
  *out = NULL;
  return gt_errorf(GT_EUNSUPPORTED, "this build has no etcd, so no leader to decide --rebalance");
}
void run_coord_link_publish(run_coord_link *l, const gt_mitigation_report *r) {
  (void)l;
  (void)r;
}
bool run_coord_link_latest(run_coord_link *l, gt_mitigation *m) {
  (void)l;
  (void)m;
  return false;
}
void run_coord_link_stop(run_coord_link *l) { (void)l; }
#endif
