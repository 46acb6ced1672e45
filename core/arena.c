/* A counting, caching arena over a backend's allocator.
 *
 * Blocks are rounded up to a size class (multiples of 256 bytes up to 4 KiB,
 * then four classes per power of two) so that a freed block can serve the
 * next request of a similar size; freed blocks stay cached until trim or
 * destroy. A side table maps each live pointer to its class, because device
 * memory cannot carry an inline header. A mutex makes it safe to share
 * between a training thread and communication threads.
 *
 * Each live block also remembers its category (gt_mem_kind), and part of
 * it another's, so that the arena keeps the memory ledger: the bytes of
 * each category now, and their breakdown when the total last peaked, which
 * costs a copy of a few counters at each new peak.
 */
#include "core/arena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "giant/backend.h"

typedef struct block {
  void *ptr;
  size_t size; /* class size */
  size_t part; /* of it, bytes counted as part_kind; the rest as kind */
  gt_mem_kind kind, part_kind;
  struct block *next;
} block;

#define NBUCKETS 1024 /* hash buckets of live blocks */

struct gt_arena {
  gt_backend *be;
  pthread_mutex_t mu;
  size_t budget, current, peak, cached, device_allocs;
  /* The ledger: bytes held by category now, and when current peaked. */
  size_t kinds[GT_MEM_KINDS], peak_kinds[GT_MEM_KINDS];
  block *live[NBUCKETS];
  block *free_list; /* cached blocks, any size, unsorted */
};

static size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + 255) & ~(size_t)255;
  size_t p = 4096;
  while (p < n) p <<= 1;
  size_t q = p / 8; /* four classes between p/2 and p */
  return (n + q - 1) / q * q;
}

size_t gt_arena_block_size(size_t bytes) { return size_class(bytes); }

static size_t bucket_of(const void *p) { return ((uintptr_t)p >> 8) % NBUCKETS; }

gt_status gt_arena_create(gt_backend *be, size_t budget_bytes, gt_arena **out) {
  gt_arena *a = calloc(1, sizeof *a);
  if (!a) return gt_errorf(GT_ENOMEM, "out of host memory creating an arena");
  a->be = be;
  a->budget = budget_bytes;
  pthread_mutex_init(&a->mu, NULL);
  *out = a;
  return GT_OK;
}

void gt_arena_trim(gt_arena *a) {
  pthread_mutex_lock(&a->mu);
  block *b = a->free_list;
  a->free_list = NULL;
  a->cached = 0;
  pthread_mutex_unlock(&a->mu);
  while (b) {
    block *n = b->next;
    gt_backend_free(a->be, b->ptr);
    free(b);
    b = n;
  }
}

void gt_arena_destroy(gt_arena *a) {
  if (!a) return;
  gt_arena_trim(a);
  for (int i = 0; i < NBUCKETS; i++) {
    for (block *b = a->live[i], *n; b; b = n) {
      n = b->next;
      gt_backend_free(a->be, b->ptr);
      free(b);
    }
  }
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* Counts a block's bytes into its categories (sign -1 takes them out). */
static void count_kinds(gt_arena *a, gt_mem_kind kind, gt_mem_kind part_kind, size_t cls, size_t part, int sign) {
  size_t rest = cls - part;
  a->kinds[kind] = sign > 0 ? a->kinds[kind] + rest : a->kinds[kind] - rest;
  a->kinds[part_kind] = sign > 0 ? a->kinds[part_kind] + part : a->kinds[part_kind] - part;
}

gt_status gt_arena_alloc(gt_arena *a, size_t bytes, void **ptr) {
  return gt_arena_alloc_parts(a, GT_MEM_OTHER, bytes, GT_MEM_OTHER, 0, ptr);
}

gt_status gt_arena_alloc_as(gt_arena *a, gt_mem_kind kind, size_t bytes, void **ptr) {
  return gt_arena_alloc_parts(a, kind, bytes, kind, 0, ptr);
}

gt_status gt_arena_alloc_parts(gt_arena *a, gt_mem_kind kind, size_t bytes, gt_mem_kind part_kind, size_t part,
                               void **ptr) {
  if ((unsigned)kind >= GT_MEM_KINDS) kind = GT_MEM_OTHER;
  if ((unsigned)part_kind >= GT_MEM_KINDS) part_kind = GT_MEM_OTHER;
  size_t cls = size_class(bytes);
  if (part > cls) part = cls;
  pthread_mutex_lock(&a->mu);
  if (a->budget && a->current + cls > a->budget) {
    size_t cur = a->current, budget = a->budget;
    pthread_mutex_unlock(&a->mu);
    return gt_errorf(GT_ENOMEM,
                     "%s memory budget exceeded: %zu bytes in use + %zu requested > budget %zu; "
                     "lower the batch size or raise the budget",
                     gt_backend_name(a->be), cur, cls, budget);
  }
  /* Counted now, under the lock that checked the budget, so that threads
   * allocating together cannot all pass the check; undone on failure. */
  a->current += cls;
  count_kinds(a, kind, part_kind, cls, part, 1);
  if (a->current > a->peak) {
    a->peak = a->current;
    memcpy(a->peak_kinds, a->kinds, sizeof a->kinds);
  }
  /* Reuse a cached block of exactly this class. */
  block **pp = &a->free_list, *b = NULL;
  for (; *pp; pp = &(*pp)->next) {
    if ((*pp)->size == cls) {
      b = *pp;
      *pp = b->next;
      a->cached -= cls;
      break;
    }
  }
  pthread_mutex_unlock(&a->mu);
  gt_status s = GT_OK;
  bool fresh = !b;
  if (fresh) {
    b = malloc(sizeof *b);
    s = b ? gt_backend_alloc(a->be, cls, &b->ptr) : gt_errorf(GT_ENOMEM, "out of host memory for arena bookkeeping");
    if (s != GT_OK && b) {
      /* Give cached memory back and try once more before failing. */
      gt_arena_trim(a);
      s = gt_backend_alloc(a->be, cls, &b->ptr);
    }
    if (s != GT_OK) {
      free(b);
      pthread_mutex_lock(&a->mu);
      a->current -= cls;
      count_kinds(a, kind, part_kind, cls, part, -1);
      pthread_mutex_unlock(&a->mu);
      return s;
    }
    b->size = cls;
  }
  b->part = part;
  b->kind = kind;
  b->part_kind = part_kind;
  pthread_mutex_lock(&a->mu);
  if (fresh) a->device_allocs++;
  size_t k = bucket_of(b->ptr);
  b->next = a->live[k];
  a->live[k] = b;
  pthread_mutex_unlock(&a->mu);
  *ptr = b->ptr;
  return GT_OK;
}

void gt_arena_free(gt_arena *a, void *ptr) {
  if (!ptr) return;
  pthread_mutex_lock(&a->mu);
  block **pp = &a->live[bucket_of(ptr)];
  while (*pp && (*pp)->ptr != ptr) pp = &(*pp)->next;
  block *b = *pp;
  if (b) {
    *pp = b->next;
    a->current -= b->size;
    count_kinds(a, b->kind, b->part_kind, b->size, b->part, -1);
    a->cached += b->size;
    b->next = a->free_list;
    a->free_list = b;
  }
  pthread_mutex_unlock(&a->mu);
}

#define ARENA_GETTER(name, field)                    \
  size_t gt_arena_##name(const gt_arena *a) {        \
    pthread_mutex_lock((pthread_mutex_t *)&a->mu);   \
    size_t v = a->field;                             \
    pthread_mutex_unlock((pthread_mutex_t *)&a->mu); \
    return v;                                        \
  }
ARENA_GETTER(current, current)
ARENA_GETTER(peak, peak)
ARENA_GETTER(budget, budget)
ARENA_GETTER(device_allocs, device_allocs)

size_t gt_arena_reserved(const gt_arena *a) {
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);
  size_t v = a->current + a->cached;
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
  return v;
}

void gt_arena_reset_peak(gt_arena *a) {
  pthread_mutex_lock(&a->mu);
  a->peak = a->current;
  memcpy(a->peak_kinds, a->kinds, sizeof a->kinds);
  pthread_mutex_unlock(&a->mu);
}

void gt_arena_kinds(const gt_arena *a, size_t *current, size_t *peak) {
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);
  if (current) memcpy(current, a->kinds, sizeof a->kinds);
  if (peak) memcpy(peak, a->peak_kinds, sizeof a->peak_kinds);
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
}

void gt_arena_set_budget(gt_arena *a, size_t budget_bytes) {
  pthread_mutex_lock(&a->mu);
  a->budget = budget_bytes;
  pthread_mutex_unlock(&a->mu);
}
