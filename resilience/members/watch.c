/* The watcher of newer membership epochs (resilience/members/members.h). */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/log.h"
#include "resilience/members/members.h"
#include "giant/engine/store.h"

/* Each wait for the next epoch lasts at most this: arming and stopping
 * are seen within it. */
#define WATCH_POLL_MS 200
/* How often the count of join requests is read (gt_members_watch_joins). */
#define JOINS_POLL_MS 500

struct gt_members_watch {
  pthread_t thread;
  pthread_mutex_t mu; /* held while fn runs: arm and stop wait for it */
  pthread_cond_t cv;
  gt_store *store;
  int world, grace_ms;
  gt_members_newer_fn fn;
  void *arg;
  int armed;       /* the epoch trained in, or -1 */
  int fired;       /* fn ran for this armed epoch */
  double newer_at; /* when an epoch that lost a rank was first seen, 0: not yet */
  /* The newest epoch seen that lost no rank of the armed one (epochs that
   * only add ranks are joins, which the training loop takes in at a step
   * boundary), and its ranks. */
  int watching;
  int *cur, ncur;
  bool joins_on;     /* read the count of join requests */
  int64_t joins;     /* the count last read, -1: none */
  double joins_next; /* the next read not before this (gt_now) */
  bool stop;
};

static void wait_ms(gt_members_watch *w, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ns = ts.tv_nsec + (long long)ms * 1000000LL;
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* 1 when every rank of a[0..na) is in b[0..nb): b only adds ranks. */
static int keeps_all(const int *a, int na, const int *b, int nb) {
  for (int i = 0; i < na; i++)
    if (gt_members_index(b, nb, a[i]) < 0) return 0;
  return 1;
}

static void *watch_main(void *arg) {
  gt_members_watch *w = arg;
  int *ranks = malloc(sizeof(int) * GT_MEMBERS_MAX);
  w->cur = malloc(sizeof(int) * GT_MEMBERS_MAX);
  w->watching = -1;
  pthread_mutex_lock(&w->mu);
  while (!w->stop && ranks && w->cur) {
    if (w->joins_on && gt_now() >= w->joins_next) {
      w->joins_next = gt_now() + JOINS_POLL_MS / 1000.0;
      pthread_mutex_unlock(&w->mu);
      int64_t total = 0;
      gt_status st = gt_members_join_requests(w->store, &total);
      pthread_mutex_lock(&w->mu);
      if (st == GT_OK && w->joins_on) w->joins = total;
      continue;
    }
    int armed = w->armed;
    if (armed < 0 || w->fired) {
      wait_ms(w, WATCH_POLL_MS);
      continue;
    }
    if (w->newer_at > 0) {
      /* Seen: wait out the grace, unless the rank moves on meanwhile. */
      double left_ms = (w->newer_at + w->grace_ms / 1000.0 - gt_now()) * 1000.0;
      if (left_ms > 0) {
        wait_ms(w, left_ms < WATCH_POLL_MS ? (int)left_ms + 1 : WATCH_POLL_MS);
        continue;
      }
      w->fired = 1;
      gt_warn(
          "membership epoch %d, without a rank of epoch %d, stands for %d ms while this rank trains in epoch %d: "
          "its communicators are aborted, so that it reshapes",
          w->watching + 1, armed, w->grace_ms, armed);
      w->fn(w->arg, w->watching + 1);
      continue;
    }
    int watching = w->watching;
    bool reload = watching < armed; /* newly armed (epochs only grow): the ranks it trains with */
    pthread_mutex_unlock(&w->mu);
    gt_status loaded = reload ? gt_members_get(w->store, w->world, armed, w->cur, &w->ncur, WATCH_POLL_MS) : GT_OK;
    if (reload) watching = armed;
    int n = 0;
    gt_status st =
        loaded == GT_OK ? gt_members_get(w->store, w->world, watching + 1, ranks, &n, WATCH_POLL_MS) : loaded;
    pthread_mutex_lock(&w->mu);
    if (w->armed != armed) continue; /* re-armed meanwhile: start over */
    if (loaded != GT_OK) {           /* the armed epoch's ranks unread (etcd away): again */
      wait_ms(w, WATCH_POLL_MS);
      continue;
    }
    w->watching = watching;
    if (st == GT_OK && keeps_all(w->cur, w->ncur, ranks, n)) {
      w->watching = watching + 1; /* a join: the training loop takes it in */
      memcpy(w->cur, ranks, (size_t)n * sizeof *ranks);
      w->ncur = n;
      continue;
    }
    if (st == GT_OK && w->newer_at == 0) w->newer_at = gt_now();
    /* etcd away, or no newer epoch: look again (a failed call is not
     * waited on, so nap before the next). */
    if (st != GT_OK && st != GT_ETIMEDOUT) wait_ms(w, WATCH_POLL_MS);
  }
  pthread_mutex_unlock(&w->mu);
  free(ranks);
  return NULL;
}

gt_status gt_members_watch_start(gt_store *s, int world, int grace_ms, gt_members_newer_fn fn, void *arg,
                                 gt_members_watch **out) {
  *out = NULL;
  if (!s || !fn || world < 1 || world > GT_MEMBERS_MAX || grace_ms < 0)
    return gt_errorf(GT_EINVAL,
                     "gt_members_watch_start: need a store, a callback, a world size in 1..%d and a "
                     "grace >= 0 ms",
                     GT_MEMBERS_MAX);
  gt_members_watch *w = calloc(1, sizeof *w);
  if (!w) return gt_errorf(GT_ENOMEM, "out of memory");
  *w = (gt_members_watch){
      .store = s, .world = world, .grace_ms = grace_ms, .fn = fn, .arg = arg, .armed = -1, .joins = -1};
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    return gt_errorf(GT_EIO, "cannot start the membership watcher's thread");
  }
  *out = w;
  return GT_OK;
}

void gt_members_watch_arm(gt_members_watch *w, int epoch) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->armed = epoch;
  w->fired = 0;
  w->newer_at = 0;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void gt_members_watch_joins(gt_members_watch *w, bool on) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  if (on && !w->joins_on) w->joins_next = 0; /* read at once */
  if (!on) w->joins = -1;
  w->joins_on = on;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

int64_t gt_members_watch_join_requests(gt_members_watch *w) {
  if (!w) return -1;
  pthread_mutex_lock(&w->mu);
  int64_t n = w->joins;
  pthread_mutex_unlock(&w->mu);
  return n;
}

void gt_members_watch_stop(gt_members_watch *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  free(w->cur);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}
