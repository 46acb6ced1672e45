/* The round's etcd thread: looks at the round every poll period and records
 * this node's finish, retrying while etcd is away. The agent's main loop
 * reads what it saw under a mutex and never calls etcd while workers run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/log.h"
#include "launch/agent.h"
#include "resilience/rdzv/rdzv.h"

/* A finish that etcd refused is tried again after this, doubling to the cap. */
#define FINISH_RETRY_MIN_S 0.1
#define FINISH_RETRY_MAX_S 2.0

struct monitor {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  gt_rdzv *r;
  int poll_ms;
  int want_finish, stop; /* asked by the main loop */
  int lost[64], nlost;   /* generation ranks to publish as lost (--reshape) */
  int kick;              /* wake the thread before its poll period ends */
  monitor_state st;      /* seen by the thread */
};

static void note_error(monitor *m, const char *what) {
  pthread_mutex_lock(&m->mu);
  snprintf(m->st.error, sizeof m->st.error, "%s: %s", what, gt_last_error());
  pthread_mutex_unlock(&m->mu);
}

static void note_ok(monitor *m) {
  pthread_mutex_lock(&m->mu);
  m->st.etcd_ok_at = gt_now();
  m->st.error[0] = 0;
  pthread_mutex_unlock(&m->mu);
}

/* Waits s seconds or until stop is asked; returns stop. */
static int nap(monitor *m, double s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ns = ts.tv_nsec + (long long)(s * 1e9);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  pthread_mutex_lock(&m->mu);
  while (!m->stop && !m->kick)
    if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) != 0) break;
  m->kick = 0;
  int stop = m->stop;
  pthread_mutex_unlock(&m->mu);
  return stop;
}

static void *monitor_main(void *arg) {
  monitor *m = arg;
  double retry = FINISH_RETRY_MIN_S, next_finish = 0;
  for (;;) {
    pthread_mutex_lock(&m->mu);
    int stop = m->stop, finish = m->want_finish && !m->st.finished;
    int lost = m->nlost ? m->lost[0] : -1;
    pthread_mutex_unlock(&m->mu);
    if (stop) break;
    if (lost >= 0) {
      if (gt_rdzv_member_lost(m->r, lost) == GT_OK) {
        note_ok(m);
        pthread_mutex_lock(&m->mu);
        memmove(m->lost, m->lost + 1, (size_t)(--m->nlost) * sizeof *m->lost);
        pthread_mutex_unlock(&m->mu);
        continue;
      }
      note_error(m, "publishing the membership without a lost worker");
    }
    if (finish && gt_now() >= next_finish) {
      if (gt_rdzv_finish(m->r) == GT_OK) {
        note_ok(m);
        pthread_mutex_lock(&m->mu);
        m->st.finished = 1;
        pthread_mutex_unlock(&m->mu);
      } else {
        note_error(m, "recording that this node's workers finished");
        next_finish = gt_now() + retry;
        retry = retry * 2 < FINISH_RETRY_MAX_S ? retry * 2 : FINISH_RETRY_MAX_S;
      }
    }
    gt_rdzv_event ev;
    if (gt_rdzv_check(m->r, &ev) == GT_OK) {
      note_ok(m);
      if (ev != GT_RDZV_RUNNING) {
        pthread_mutex_lock(&m->mu);
        m->st.ended = 1;
        m->st.ev = ev;
        pthread_mutex_unlock(&m->mu);
        break;
      }
    } else {
      note_error(m, "checking the job in etcd");
    }
    if (nap(m, m->poll_ms / 1000.0)) break;
  }
  return NULL;
}

gt_status monitor_start(monitor **out, gt_rdzv *r, int poll_ms) {
  *out = NULL;
  monitor *m = calloc(1, sizeof *m);
  if (!m) return gt_errorf(GT_ENOMEM, "out of memory");
  m->r = r;
  m->poll_ms = poll_ms;
  m->st.etcd_ok_at = gt_now();
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  if (pthread_create(&m->thread, NULL, monitor_main, m) != 0) {
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    return gt_errorf(GT_EIO, "cannot start the agent's etcd thread");
  }
  *out = m;
  return GT_OK;
}

void monitor_finish(monitor *m) {
  pthread_mutex_lock(&m->mu);
  m->want_finish = 1;
  m->kick = 1;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

void monitor_member_lost(monitor *m, int rank) {
  pthread_mutex_lock(&m->mu);
  if (m->nlost < (int)(sizeof m->lost / sizeof *m->lost)) m->lost[m->nlost++] = rank;
  m->kick = 1;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

void monitor_get(monitor *m, monitor_state *st) {
  pthread_mutex_lock(&m->mu);
  *st = m->st;
  pthread_mutex_unlock(&m->mu);
}

void monitor_stop(monitor *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
  pthread_join(m->thread, NULL);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m);
}
