/* The CPU backend's copy engine and the device memory budget.
 *
 * Copies queued on the copy stream (or a stream of one's own) run on a
 * thread of their own; events order them against the compute stream and
 * each other exactly as on a GPU. The budget (device_mem_limit) holds for
 * every allocation, from any number of threads at once, and its error
 * names what was asked for, what is in use and the budget.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gt_test.h"
#include "core/arena.h"
#include "giant/backend.h"
#include "core/backend_engine.h"
#include "giant/engine/device.h"

static gt_backend *cpu(size_t limit) {
  gt_backend *be = NULL;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 2, .device_mem_limit = limit}, &be));
  return be;
}

static void fill(float *x, size_t n, float base) {
  for (size_t i = 0; i < n; i++) x[i] = base + (float)(i % 1000003);
}

/* A chain across three streams: the copy stream copies src to a, the
 * compute stream scales a once the copy's event says so, a stream of our
 * own copies a to b after the compute's event. Each step must see the
 * previous one's result whole. */
static void test_copies_ordered_by_events(void **state) {
  (void)state;
  gt_backend *be = cpu(0);
  size_t n = (size_t)16 << 20; /* 64 MiB: copies long enough to be caught mid-way */
  float *src, *a, *b;
  OK(gt_backend_host_alloc(be, n * sizeof(float), (void **)&src));
  OK(gt_backend_alloc(be, n * sizeof(float), (void **)&a));
  OK(gt_backend_host_alloc(be, n * sizeof(float), (void **)&b));
  fill(src, n, 1.0f);
  memset(a, 0, n * sizeof(float));
  gt_event *e1, *e2;
  gt_stream *mine;
  OK(gt_event_create(be, &e1));
  OK(gt_event_create(be, &e2));
  OK(gt_stream_create(be, &mine));
  gt_stream *copy = gt_backend_copy_stream(be);

  OK(gt_backend_memcpy(be, a, src, n * sizeof(float), GT_COPY_H2D, copy));
  OK(gt_event_record(be, e1, copy));
  OK(gt_stream_wait_event(be, NULL, e1));
  OK(gt_op_scale(be, a, 2.0f, n));
  OK(gt_event_record(be, e2, NULL));
  OK(gt_stream_wait_event(be, mine, e2));
  OK(gt_backend_memcpy(be, b, a, n * sizeof(float), GT_COPY_D2H, mine));
  OK(gt_stream_sync(be, mine));
  for (size_t i = 0; i < n; i += 4099) assert_true(b[i] == 2.0f * src[i]);
  assert_true(b[n - 1] == 2.0f * src[n - 1]);

  /* A stream waiting on another async stream's event: `mine` copies what
   * the copy stream wrote, after it, without the host in between. */
  OK(gt_backend_memset(be, a, 0, n * sizeof(float), copy));
  OK(gt_backend_memcpy(be, a, src, n / 2 * sizeof(float), GT_COPY_H2D, copy));
  OK(gt_event_record(be, e1, copy));
  OK(gt_stream_wait_event(be, mine, e1));
  OK(gt_backend_memcpy(be, b, a, n * sizeof(float), GT_COPY_D2H, mine));
  OK(gt_event_record(be, e2, mine));
  OK(gt_event_sync(be, e2));
  assert_true(b[0] == src[0] && b[n / 2 - 1] == src[n / 2 - 1]);
  assert_true(b[n / 2] == 0.0f && b[n - 1] == 0.0f);

  /* Destroying a stream finishes what it holds. */
  OK(gt_backend_memcpy(be, b, src, n * sizeof(float), GT_COPY_H2D, mine));
  gt_stream_destroy(be, mine);
  assert_true(b[n - 1] == src[n - 1] && b[n / 2] == src[n / 2]);

  gt_event_destroy(be, e1);
  gt_event_destroy(be, e2);
  gt_backend_host_free(be, src);
  gt_backend_host_free(be, b);
  gt_backend_free(be, a);
  gt_backend_destroy(be);
}

static void test_unrecorded_event(void **state) {
  (void)state;
  gt_backend *be = cpu(0);
  gt_event *e;
  OK(gt_event_create(be, &e));
  assert_int_equal(gt_event_sync(be, e), GT_ESTATE);
  assert_int_equal(gt_stream_wait_event(be, gt_backend_copy_stream(be), e), GT_ESTATE);
  assert_non_null(strstr(gt_last_error(), "never recorded"));
  /* Recorded on the compute stream, it is complete at once. */
  OK(gt_event_record(be, e, NULL));
  OK(gt_event_sync(be, e));
  gt_event_destroy(be, e);
  gt_backend_destroy(be);
}

static void test_budget(void **state) {
  (void)state;
  size_t MiB = 1 << 20;
  gt_backend *be = cpu(4 * MiB);
  void *a, *b, *c;
  OK(gt_backend_alloc(be, 3 * MiB, &a));
  gt_device_mem m = gt_backend_mem(be);
  assert_int_equal(m.limit, 4 * MiB);
  assert_int_equal(m.in_use, 3 * MiB);
  assert_int_equal(gt_backend_alloc(be, 2 * MiB, &b), GT_ENOMEM);
  assert_null(b);
  const char *msg = gt_last_error();
  assert_non_null(strstr(msg, "asked for 2097152 bytes"));
  assert_non_null(strstr(msg, "3145728 bytes (3.0 MiB) in use"));
  assert_non_null(strstr(msg, "budget of 4194304 bytes"));
  /* Host memory is not the device's. */
  OK(gt_backend_host_alloc(be, 8 * MiB, &c));
  assert_int_equal(gt_backend_host_mem(be).in_use, 8 * MiB);
  assert_int_equal(gt_backend_host_mem(be).limit, 0);
  gt_backend_host_free(be, c);
  assert_int_equal(gt_backend_host_mem(be).in_use, 0);
  gt_backend_free(be, a);
  OK(gt_backend_alloc(be, 2 * MiB, &b));
  m = gt_backend_mem(be);
  assert_int_equal(m.in_use, 2 * MiB);
  assert_int_equal(m.peak, 3 * MiB);
  gt_backend_reset_mem_peak(be);
  assert_int_equal(gt_backend_mem(be).peak, 2 * MiB);
  gt_backend_free(be, b);
  assert_int_equal(gt_backend_mem(be).in_use, 0);

  /* An arena over the backend fails the same way, naming the budget. */
  gt_arena *ar;
  OK(gt_arena_create(be, 0, &ar));
  OK(gt_arena_alloc(ar, 3 * MiB, &a));
  assert_int_equal(gt_arena_alloc(ar, 2 * MiB, &b), GT_ENOMEM);
  assert_non_null(strstr(gt_last_error(), "device memory budget exceeded"));
  assert_int_equal(gt_arena_current(ar), 3 * MiB);
  gt_arena_destroy(ar);
  assert_int_equal(gt_backend_mem(be).in_use, 0);
  gt_backend_destroy(be);
}

/* Threads allocating together never hold more than the budget between
 * them: the check and the count change under one lock. The budget holds
 * 16 blocks of 64 KiB; each of 4 threads first takes 5 (20 asked for, so
 * at least 4 refusals whatever the interleaving), then all churn at once. */
enum { NT = 4, HELD = 5 };
typedef struct {
  gt_backend *be;
  gt_arena *arena;
  pthread_barrier_t *bar;
  int refused;
} race_arg;

static gt_status take(race_arg *r, void **p) {
  return r->arena ? gt_arena_alloc(r->arena, 65536, p) : gt_backend_alloc(r->be, 65536, p);
}
static void give(race_arg *r, void *p) {
  if (r->arena)
    gt_arena_free(r->arena, p);
  else
    gt_backend_free(r->be, p);
}

static void *race(void *p) {
  race_arg *r = p;
  void *held[8] = {0};
  for (int k = 0; k < HELD; k++)
    if (take(r, &held[k]) != GT_OK) {
      r->refused++;
      held[k] = NULL;
    }
  pthread_barrier_wait(r->bar);
  for (int it = 0; it < 4000; it++) {
    int k = it % 8;
    if (held[k]) {
      give(r, held[k]);
      held[k] = NULL;
    } else if (take(r, &held[k]) != GT_OK) {
      held[k] = NULL;
    }
  }
  for (int k = 0; k < 8; k++) give(r, held[k]);
  return NULL;
}

/* The host budget (host_mem_limit) counts gt_backend_host_alloc alike,
 * with its own message, and leaves device memory alone. */
static void test_host_budget(void **state) {
  (void)state;
  size_t MiB = 1 << 20;
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1, .host_mem_limit = 4 * MiB}, &be));
  void *a, *b, *d;
  OK(gt_backend_host_alloc(be, 3 * MiB, &a));
  assert_int_equal(gt_backend_host_alloc(be, 2 * MiB, &b), GT_ENOMEM);
  assert_null(b);
  const char *msg = gt_last_error();
  assert_non_null(strstr(msg, "host memory budget exceeded"));
  assert_non_null(strstr(msg, "asked for 2097152 bytes"));
  assert_non_null(strstr(msg, "3145728 bytes (3.0 MiB) in use"));
  assert_non_null(strstr(msg, "keep the optimizer state on disk"));
  OK(gt_backend_alloc(be, 16 * MiB, &d)); /* the device's is not the host's */
  assert_int_equal(gt_backend_mem(be).in_use, 16 * MiB);
  gt_backend_host_free(be, a);
  OK(gt_backend_host_alloc(be, 4 * MiB, &b));
  gt_device_mem h = gt_backend_host_mem(be);
  assert_int_equal(h.limit, 4 * MiB);
  assert_int_equal(h.in_use, 4 * MiB);
  assert_int_equal(h.peak, 4 * MiB);
  gt_backend_host_free(be, b);
  gt_backend_free(be, d);
  assert_int_equal(gt_backend_host_mem(be).in_use, 0);
  gt_backend_destroy(be);
}

static void test_budget_threads(void **state) {
  (void)state;
  for (int use_arena = 0; use_arena < 2; use_arena++) {
    gt_backend *be = cpu(use_arena ? 0 : 16 * 65536);
    gt_arena *ar = NULL;
    if (use_arena) OK(gt_arena_create(be, 16 * 65536, &ar));
    pthread_t t[NT];
    race_arg r[NT];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, NT);
    for (int i = 0; i < NT; i++) {
      r[i] = (race_arg){.be = be, .arena = ar, .bar = &bar};
      assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    int refused = 0;
    for (int i = 0; i < NT; i++) {
      pthread_join(t[i], NULL);
      refused += r[i].refused;
    }
    pthread_barrier_destroy(&bar);
    assert_int_equal(refused, NT * HELD - 16);
    if (ar) {
      assert_true(gt_arena_peak(ar) <= 16 * 65536);
      assert_int_equal(gt_arena_current(ar), 0);
      gt_arena_destroy(ar);
    } else {
      gt_device_mem m = gt_backend_mem(be);
      assert_true(m.peak <= 16 * 65536);
      assert_int_equal(m.in_use, 0);
    }
    gt_backend_destroy(be);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copies_ordered_by_events),
      cmocka_unit_test(test_unrecorded_event),
      cmocka_unit_test(test_budget),
      cmocka_unit_test(test_host_budget),
      cmocka_unit_test(test_budget_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
