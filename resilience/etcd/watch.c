/* Watches: one Watch stream per watch, run by its own thread, which
 * re-creates the stream from the last reported revision + 1 whenever it
 * breaks, so events arrive once each and in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

typedef struct qnode {
  gt_etcd_event ev;
  struct qnode *next;
} qnode;

struct gt_etcd_watch {
  gt_etcd_client *c;
  char *key;
  int prefix;
  gt_etcd_watch_cb cb;
  void *arg;
  pthread_t thread;
  atomic_int stop;
  _Atomic int64_t next_rev; /* first revision not yet reported; 0 = not known */
  _Atomic int64_t last_rev;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int created;            /* the first stream was accepted (under mu) */
  gt_status status;       /* GT_OK while running (under mu) */
  char error[512];        /* why it ended, for the starter (under mu) */
  gt_status retry_status; /* why the last stream broke (under mu) */
  qnode *head, *tail;
  grpc_call *live; /* the stream's call while one is open (under mu): cancel ends it at once */
};

static void finish(gt_etcd_watch *w, gt_status st) {
  pthread_mutex_lock(&w->mu);
  if (w->status == GT_OK) {
    w->status = st;
    snprintf(w->error, sizeof w->error, "%s", gt_last_error());
  }
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void deliver(gt_etcd_watch *w, gt_etcd_event *ev) {
  if (w->cb) {
    w->cb(w->arg, ev);
    gt_etcd_event_free(ev);
    return;
  }
  qnode *n = malloc(sizeof *n);
  if (!n) {
    gt_etcd_event_free(ev);
    finish(w, gt_errorf(GT_ENOMEM, "out of memory queueing an etcd watch event"));
    return;
  }
  n->ev = *ev;
  n->next = NULL;
  pthread_mutex_lock(&w->mu);
  if (w->tail)
    w->tail->next = n;
  else
    w->head = n;
  w->tail = n;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void deliver_end(gt_etcd_watch *w, gt_etcd_event_type type, int64_t rev) {
  gt_etcd_event ev;
  memset(&ev, 0, sizeof ev);
  ev.type = type;
  ev.revision = rev;
  deliver(w, &ev);
}

/* Handles one response; returns 1 when the watch is over. */
static int on_response(gt_etcd_watch *w, const Etcdserverpb__WatchResponse *r) {
  if (r->created) {
    if (atomic_load(&w->next_rev) == 0 && r->header) atomic_store(&w->next_rev, r->header->revision + 1);
    pthread_mutex_lock(&w->mu);
    w->created = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
  int64_t next = atomic_load(&w->next_rev), top = next;
  for (size_t i = 0; i < r->n_events; i++) {
    const Mvccpb__Event *e = r->events[i];
    if (!e->kv) continue;
    int64_t rev = e->kv->mod_revision;
    /* A revision reported before a reconnect is not reported again. */
    if (rev < next) continue;
    gt_etcd_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? GT_ETCD_EVENT_DELETE : GT_ETCD_EVENT_PUT;
    ev.revision = rev;
    if (et_kv_copy(e->kv, &ev.kv) != GT_OK) {
      finish(w, GT_ENOMEM);
      return 1;
    }
    deliver(w, &ev);
    atomic_store(&w->last_rev, rev);
    if (rev + 1 > top) top = rev + 1;
  }
  /* An empty response that is neither creation nor cancellation is a
   * progress notification: every change up to its revision was sent. It
   * keeps a quiet watch's resume point ahead of compaction. */
  if (r->n_events == 0 && !r->created && !r->canceled && r->header && r->header->revision + 1 > top)
    top = r->header->revision + 1;
  atomic_store(&w->next_rev, top);
  if (r->canceled) {
    if (r->compact_revision > 0) {
      gt_errorf(GT_ERANGE,
                "etcd watch on '%s': revision %lld was compacted (oldest kept: %lld); "
                "events were lost, re-read the state and watch again",
                w->key, (long long)atomic_load(&w->next_rev), (long long)r->compact_revision);
      finish(w, GT_ERANGE);
      deliver_end(w, GT_ETCD_EVENT_COMPACTED, r->compact_revision);
    } else {
      gt_errorf(GT_EBACKEND, "etcd cancelled the watch on '%s': %s", w->key,
                r->cancel_reason && *r->cancel_reason ? r->cancel_reason : "no reason given");
      finish(w, GT_EBACKEND);
      deliver_end(w, GT_ETCD_EVENT_ERROR, 0);
    }
    return 1;
  }
  return 0;
}

/* Runs one stream; returns 1 when the watch is over, 0 to reconnect. */
static int run_stream(gt_etcd_watch *w) {
  et_stream s;
  if (et_stream_open(&s, w->c, ET_WATCH) != GT_OK) return 0;
  pthread_mutex_lock(&w->mu);
  w->live = s.call;
  if (atomic_load(&w->stop)) grpc_call_cancel(s.call, NULL); /* cancelled while it opened */
  pthread_mutex_unlock(&w->mu);
  Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
  cr.key.data = (uint8_t *)w->key;
  cr.key.len = strlen(w->key);
  if (w->prefix && et_prefix_end(w->key, &cr.range_end) != GT_OK) {
    et_stream_close(&s);
    finish(w, GT_ENOMEM);
    return 1;
  }
  cr.start_revision = atomic_load(&w->next_rev);
  cr.progress_notify = 1;
  Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
  req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
  req.create_request = &cr;
  gt_status st = et_stream_write(&s, &req.base);
  free(cr.range_end.data);
  int over = 0;
  while (st == GT_OK && !over && !atomic_load(&w->stop)) {
    ProtobufCMessage *m = NULL;
    et_ev ev = et_stream_poll(&s, gt_now() + 0.1, &etcdserverpb__watch_response__descriptor, &m);
    if (ev == ET_EV_END) {
      if (w->c->user && et_is_auth_error(s.code, NULL)) {
        unsigned gen;
        free(et_token(w->c, &gen));
        et_reauth(w->c, gen);
      } else if (s.code != GRPC_STATUS_UNAVAILABLE && s.code != GRPC_STATUS_CANCELLED && s.code != GRPC_STATUS_OK &&
                 s.code != GRPC_STATUS_DEADLINE_EXCEEDED && s.code != GRPC_STATUS_INTERNAL &&
                 s.code != GRPC_STATUS_UNKNOWN) {
        /* Permission denied, bad key: retrying would not help. */
        finish(w, et_stream_status(&s, "etcd watch"));
        deliver_end(w, GT_ETCD_EVENT_ERROR, 0);
        over = 1;
      } else {
        /* Remember why, for a starter still waiting for acceptance. */
        gt_status why = et_stream_status(&s, "etcd watch");
        pthread_mutex_lock(&w->mu);
        w->retry_status = why;
        snprintf(w->error, sizeof w->error, "%s", gt_last_error());
        pthread_mutex_unlock(&w->mu);
      }
      break;
    }
    if (ev != ET_EV_READ) continue;
    if (!m) continue;
    over = on_response(w, (Etcdserverpb__WatchResponse *)m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  pthread_mutex_lock(&w->mu);
  w->live = NULL;
  pthread_mutex_unlock(&w->mu);
  et_stream_close(&s);
  return over;
}

static void *watch_main(void *arg) {
  gt_etcd_watch *w = arg;
  double backoff = 0.02;
  while (!atomic_load(&w->stop)) {
    double t0 = gt_now();
    if (run_stream(w)) break;
    if (atomic_load(&w->stop)) break;
    int ep = atomic_load(&w->c->cur);
    atomic_compare_exchange_strong(&w->c->cur, &ep, (ep + 1) % w->c->nep);
    if (gt_now() - t0 > 1.0) backoff = 0.02;
    for (double until = gt_now() + backoff; gt_now() < until && !atomic_load(&w->stop);) et_sleep(0.01);
    backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
  }
  return NULL;
}

static struct timespec abs_time(double seconds_from_now) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + seconds_from_now;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  return ts;
}

gt_status gt_etcd_watch_start(gt_etcd_client *c, const char *key, const gt_etcd_watch_opts *opts, gt_etcd_watch_cb cb,
                              void *arg, gt_etcd_watch **out) {
  if (!c || !key || !out) return gt_errorf(GT_EINVAL, "etcd watch: NULL client, key or handle");
  *out = NULL;
  gt_etcd_watch_opts o = {0};
  if (opts) o = *opts;
  if (o.start_revision < 0) return gt_errorf(GT_EINVAL, "etcd watch '%s': start revision must not be negative", key);
  gt_etcd_watch *w = calloc(1, sizeof *w);
  if (!w || !(w->key = strdup(key))) {
    free(w);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  w->c = c;
  w->prefix = o.prefix;
  w->cb = cb;
  w->arg = arg;
  atomic_init(&w->stop, 0);
  atomic_init(&w->next_rev, o.start_revision);
  atomic_init(&w->last_rev, 0);
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->key);
    free(w);
    return gt_errorf(GT_EIO, "cannot start the etcd watch thread");
  }
  int timeout = atomic_load(&c->timeout_ms);
  struct timespec until = abs_time(timeout / 1000.0);
  pthread_mutex_lock(&w->mu);
  while (!w->created && w->status == GT_OK)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
  int ok = w->created && w->status == GT_OK;
  gt_status st = w->status != GT_OK ? w->status : w->retry_status;
  char why[512];
  snprintf(why, sizeof why, "%s", w->error);
  pthread_mutex_unlock(&w->mu);
  if (!ok) {
    gt_etcd_watch_cancel(w);
    if (st == GT_OK) st = GT_ETIMEDOUT;
    return gt_errorf(st, "etcd watch '%s' was not accepted within %d ms%s%s", key, timeout,
                     *why ? ": " : " (no endpoint answered)", why);
  }
  *out = w;
  return GT_OK;
}

gt_status gt_etcd_watch_next(gt_etcd_watch *w, gt_etcd_event *ev, int timeout_ms) {
  if (!w || !ev) return gt_errorf(GT_EINVAL, "etcd watch next: NULL watch or event");
  if (w->cb) return gt_errorf(GT_ESTATE, "etcd watch on '%s' delivers to a callback, not a queue", w->key);
  struct timespec until = abs_time(timeout_ms / 1000.0);
  pthread_mutex_lock(&w->mu);
  while (!w->head)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
  qnode *n = w->head;
  if (n) {
    w->head = n->next;
    if (!w->head) w->tail = NULL;
  }
  pthread_mutex_unlock(&w->mu);
  if (!n) return gt_errorf(GT_ETIMEDOUT, "no change to etcd key '%s' within %d ms", w->key, timeout_ms);
  *ev = n->ev;
  free(n);
  return GT_OK;
}

void gt_etcd_event_free(gt_etcd_event *ev) {
  if (ev) gt_etcd_kv_free(&ev->kv);
}

int64_t gt_etcd_watch_revision(gt_etcd_watch *w) { return atomic_load(&w->last_rev); }

gt_status gt_etcd_watch_status(gt_etcd_watch *w) {
  pthread_mutex_lock(&w->mu);
  gt_status st = w->status;
  if (st != GT_OK) gt_errorf(st, "%s", w->error);
  pthread_mutex_unlock(&w->mu);
  return st;
}

void gt_etcd_watch_cancel(gt_etcd_watch *w) {
  if (!w) return;
  atomic_store(&w->stop, 1);
  /* The stream's poll would otherwise notice the stop only at the end of
   * its slice: a cancelled call ends it now (grpc_call_cancel may be called
   * from any thread). */
  pthread_mutex_lock(&w->mu);
  if (w->live) grpc_call_cancel(w->live, NULL);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  for (qnode *n = w->head, *next; n; n = next) {
    next = n->next;
    gt_etcd_event_free(&n->ev);
    free(n);
  }
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w->key);
  free(w);
}
