/* CPU backend: streams and events, with a thread that plays the copy engine.
 *
 * The compute stream is the calling thread: kernels and the copies queued
 * on it run before the call returns. Every other stream (the backend's copy
 * stream, and those gt_stream_create makes) is a queue served in order by
 * a thread of its own, started at the first operation queued, so copies
 * really overlap compute here as they do on a GPU, with the same ordering
 * rules: work on one stream runs in order, and an event orders work across
 * streams. Tests of overlapped transfers therefore mean the same thing on
 * both backends.
 *
 * An event records a position in a stream's queue (the count of operations
 * queued when it was recorded); it is complete once the stream has finished
 * that many. On the compute stream that is at once. A stream told to wait
 * for an event queues a wait for that position, so a later event or the
 * event's destruction cannot change what it waits for.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

typedef enum { OP_COPY, OP_SET, OP_WAIT } op_kind;

typedef struct op {
  op_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  gt_stream *on;  /* OP_WAIT: the stream ... */
  uint64_t until; /* ... and how many of its operations must be done */
  struct op *next;
} op;

struct gt_stream {
  bool async; /* false: the compute stream, run inline */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* signalled when work is queued, done, or stop */
  pthread_t thread;
  bool started, stop;
  op *head, *tail;
  uint64_t queued, done;
};

struct gt_event {
  gt_stream *s; /* NULL: complete (recorded on the compute stream) */
  uint64_t seq;
  bool recorded;
};

static void wait_done(gt_stream *s, uint64_t until) {
  pthread_mutex_lock(&s->mu);
  while (s->done < until) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static void *serve(void *arg) {
  gt_stream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break; /* stopping, and nothing left */
    op *o = s->head;
    pthread_mutex_unlock(&s->mu);
    if (o->kind == OP_COPY)
      memmove(o->dst, o->src, o->bytes);
    else if (o->kind == OP_SET)
      memset(o->dst, o->value, o->bytes);
    else if (o->on != s)
      wait_done(o->on, o->until);
    pthread_mutex_lock(&s->mu);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->done++;
    free(o);
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Queues o on an async stream, starting its thread the first time. */
static gt_status enqueue(gt_stream *s, op *o) {
  pthread_mutex_lock(&s->mu);
  if (!s->started) {
    if (pthread_create(&s->thread, NULL, serve, s) != 0) {
      pthread_mutex_unlock(&s->mu);
      free(o);
      return gt_errorf(GT_EIO, "cpu: cannot start the thread of a copy stream (out of threads?)");
    }
    s->started = true;
  }
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->queued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return GT_OK;
}

static gt_status queue_op(gt_stream *s, const op *proto) {
  op *o = malloc(sizeof *o);
  if (!o) return gt_errorf(GT_ENOMEM, "cpu: out of memory queueing a copy");
  *o = *proto;
  o->next = NULL;
  return enqueue(s, o);
}

/* On the compute stream a large copy or fill is split over the backend's
 * threads: one core does not reach the memory's bandwidth, and a step
 * clears its gradients (tens of MB) and zeroes buffers this way. Below
 * this size waking the pool costs more than it saves. */
#define GT_CPU_PAR_BYTES ((size_t)1 << 20)

static bool split_ok(gt_backend *be, size_t bytes) {
  return bytes >= GT_CPU_PAR_BYTES && be->num_threads > 1 && !omp_in_parallel();
}

gt_status gt_cpu_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s) {
  (void)kind;
  if (!bytes) return GT_OK;
  if (!s->async) {
    const char *from = src;
    char *to = dst;
    /* Overlapping ranges keep memmove's order; disjoint ones split. */
    if (!split_ok(be, bytes) || (to < from + bytes && from < to + bytes)) {
      memmove(dst, src, bytes);
      return GT_OK;
    }
    int n = gt_cpu_threads(be);
#pragma omp parallel num_threads(n)
    {
      int64_t lo, hi;
      gt_cpu_share((int64_t)bytes, 64, &lo, &hi);
      if (hi > lo) memcpy(to + lo, from + lo, (size_t)(hi - lo));
    }
    return GT_OK;
  }
  return queue_op(s, &(op){.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes});
}

gt_status gt_cpu_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s) {
  if (!bytes) return GT_OK;
  if (!s->async) {
    if (!split_ok(be, bytes)) {
      memset(dst, value, bytes);
      return GT_OK;
    }
    int n = gt_cpu_threads(be);
    char *to = dst;
#pragma omp parallel num_threads(n)
    {
      int64_t lo, hi;
      gt_cpu_share((int64_t)bytes, 64, &lo, &hi);
      if (hi > lo) memset(to + lo, value, (size_t)(hi - lo));
    }
    return GT_OK;
  }
  return queue_op(s, &(op){.kind = OP_SET, .dst = dst, .value = value, .bytes = bytes});
}

static gt_status new_stream(bool async, gt_stream **out) {
  gt_stream *s = calloc(1, sizeof *s);
  if (!s) return gt_errorf(GT_ENOMEM, "cpu: out of memory creating a stream");
  s->async = async;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  *out = s;
  return GT_OK;
}

gt_status gt_cpu_compute_stream_create(gt_stream **s) { return new_stream(false, s); }

gt_status gt_cpu_stream_create(gt_backend *be, gt_stream **s) {
  (void)be;
  return new_stream(true, s);
}

/* Finishes the queued work first: a stream's copies are never dropped. */
void gt_cpu_stream_destroy(gt_backend *be, gt_stream *s) {
  (void)be;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  bool started = s->started;
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (started) pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

gt_status gt_cpu_stream_sync(gt_backend *be, gt_stream *s) {
  (void)be;
  if (s->async) {
    pthread_mutex_lock(&s->mu);
    uint64_t until = s->queued;
    pthread_mutex_unlock(&s->mu);
    wait_done(s, until);
  }
  return GT_OK;
}

gt_status gt_cpu_event_create(gt_backend *be, gt_event **e) {
  (void)be;
  *e = calloc(1, sizeof **e);
  return *e ? GT_OK : gt_errorf(GT_ENOMEM, "cpu: out of memory creating an event");
}

void gt_cpu_event_destroy(gt_backend *be, gt_event *e) {
  (void)be;
  free(e);
}

gt_status gt_cpu_event_record(gt_backend *be, gt_event *e, gt_stream *s) {
  (void)be;
  e->recorded = true;
  e->s = NULL;
  e->seq = 0;
  if (s->async) {
    pthread_mutex_lock(&s->mu);
    e->s = s;
    e->seq = s->queued;
    pthread_mutex_unlock(&s->mu);
  }
  return GT_OK;
}

static gt_status need_recorded(const gt_event *e) {
  if (!e->recorded) return gt_errorf(GT_ESTATE, "cpu: waiting on an event that was never recorded");
  return GT_OK;
}

gt_status gt_cpu_event_sync(gt_backend *be, gt_event *e) {
  (void)be;
  GT_TRY(need_recorded(e));
  if (e->s) wait_done(e->s, e->seq);
  return GT_OK;
}

gt_status gt_cpu_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e) {
  GT_TRY(need_recorded(e));
  if (!e->s || e->s == s) return GT_OK; /* complete, or ordered by the queue itself */
  /* The compute stream is this thread: waiting is waiting here. */
  if (!s->async) return gt_cpu_event_sync(be, e);
  return queue_op(s, &(op){.kind = OP_WAIT, .on = e->s, .until = e->seq});
}
