/* The device memory a backend holds, counted against its budget
 * (gt_backend_config.device_mem_limit); a second ledger counts the host
 * memory of gt_backend_host_alloc against host_mem_limit.
 *
 * Every device allocation passes gt_backend_alloc, so counting there covers
 * arenas, scratch and anything else on every backend alike: the CPU backend
 * enforces a budget exactly as the CUDA one does, which is what lets
 * offloading be tested on a machine without a GPU. gt_backend_free takes no
 * size, so the ledger remembers each live block's size in a small hash
 * table (allocations are rare: arenas cache freed blocks). The check and
 * the count change under one lock, so threads allocating together cannot
 * cross the budget between them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/backend_ledger.h"

typedef struct entry {
  const void *ptr; /* NULL: empty slot; TOMB: a removed entry */
  size_t bytes;
} entry;

static const char tomb_byte;
#define TOMB ((const void *)&tomb_byte)

struct gt_mem_ledger {
  pthread_mutex_t mu;
  const char *what, *advice; /* "device memory", and what to do when it is short */
  size_t limit, in_use, peak;
  entry *slots;
  size_t cap, used, live; /* used counts live entries and tombs */
};

static size_t hash_ptr(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

gt_status gt_mem_ledger_create(size_t limit, const char *what, const char *advice, gt_mem_ledger **out) {
  gt_mem_ledger *l = calloc(1, sizeof *l);
  if (l) l->slots = calloc(64, sizeof *l->slots);
  if (!l || !l->slots) {
    free(l);
    return gt_errorf(GT_ENOMEM, "out of host memory creating a backend");
  }
  l->cap = 64;
  l->limit = limit;
  l->what = what;
  l->advice = advice;
  pthread_mutex_init(&l->mu, NULL);
  *out = l;
  return GT_OK;
}

void gt_mem_ledger_destroy(gt_mem_ledger *l) {
  if (!l) return;
  pthread_mutex_destroy(&l->mu);
  free(l->slots);
  free(l);
}

/* Rehashes, dropping tombs: into twice the room when live entries fill a
 * quarter of it, else into the same room, so that blocks allocated and
 * freed over a long run do not grow the table. */
static bool rehash(gt_mem_ledger *l) {
  size_t cap = 4 * (l->live + 1) > l->cap ? l->cap * 2 : l->cap;
  entry *s = calloc(cap, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < l->cap; i++) {
    const entry *e = &l->slots[i];
    if (!e->ptr || e->ptr == TOMB) continue;
    size_t k = hash_ptr(e->ptr, cap);
    while (s[k].ptr) k = (k + 1) & (cap - 1);
    s[k] = *e;
  }
  free(l->slots);
  l->slots = s;
  l->cap = cap;
  l->used = l->live;
  return true;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

gt_status gt_mem_ledger_reserve(gt_mem_ledger *l, const char *backend, size_t bytes) {
  pthread_mutex_lock(&l->mu);
  if (l->limit && (bytes > l->limit || l->in_use > l->limit - bytes)) {
    size_t in_use = l->in_use, limit = l->limit;
    pthread_mutex_unlock(&l->mu);
    return gt_errorf(GT_ENOMEM,
                     "%s: %s budget exceeded: asked for %zu bytes (%.1f MiB) with %zu bytes (%.1f MiB) in use, "
                     "over the budget of %zu bytes (%.1f MiB); %s",
                     backend, l->what, bytes, mib(bytes), in_use, mib(in_use), limit, mib(limit), l->advice);
  }
  l->in_use += bytes;
  if (l->in_use > l->peak) l->peak = l->in_use;
  pthread_mutex_unlock(&l->mu);
  return GT_OK;
}

void gt_mem_ledger_unreserve(gt_mem_ledger *l, size_t bytes) {
  pthread_mutex_lock(&l->mu);
  l->in_use -= bytes;
  pthread_mutex_unlock(&l->mu);
}

gt_status gt_mem_ledger_add(gt_mem_ledger *l, const void *ptr, size_t bytes) {
  pthread_mutex_lock(&l->mu);
  if (2 * (l->used + 1) > l->cap && !rehash(l)) {
    pthread_mutex_unlock(&l->mu);
    return gt_errorf(GT_ENOMEM, "out of host memory recording an allocation of %s", l->what);
  }
  size_t k = hash_ptr(ptr, l->cap);
  while (l->slots[k].ptr && l->slots[k].ptr != TOMB) k = (k + 1) & (l->cap - 1);
  if (!l->slots[k].ptr) l->used++;
  l->live++;
  l->slots[k] = (entry){ptr, bytes};
  pthread_mutex_unlock(&l->mu);
  return GT_OK;
}

void gt_mem_ledger_remove(gt_mem_ledger *l, const void *ptr) {
  pthread_mutex_lock(&l->mu);
  size_t k = hash_ptr(ptr, l->cap);
  for (size_t n = 0; n < l->cap && l->slots[k].ptr; n++, k = (k + 1) & (l->cap - 1)) {
    if (l->slots[k].ptr != ptr) continue;
    l->in_use -= l->slots[k].bytes;
    l->slots[k].ptr = TOMB;
    l->live--;
    break;
  }
  pthread_mutex_unlock(&l->mu);
}

void gt_mem_ledger_stats(gt_mem_ledger *l, gt_device_mem *out) {
  pthread_mutex_lock(&l->mu);
  out->limit = l->limit;
  out->in_use = l->in_use;
  out->peak = l->peak;
  pthread_mutex_unlock(&l->mu);
}

void gt_mem_ledger_reset_peak(gt_mem_ledger *l) {
  pthread_mutex_lock(&l->mu);
  l->peak = l->in_use;
  pthread_mutex_unlock(&l->mu);
}
