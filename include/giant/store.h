/* gt_store: a small key-value store that ranks use to find each other.
 *
 * Communicators bootstrap through it (addresses, NCCL unique ids, barriers).
 * One interface, several implementations: a TCP store hosted by one rank
 * (parallel/), and one on etcd (resilience/etcd). Keys are strings, values
 * are bytes. Every call that waits takes a timeout in milliseconds and fails
 * with GT_ETIMEDOUT when it runs out.
 */
#ifndef GIANT_STORE_H
#define GIANT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_store gt_store;

typedef struct gt_store_ops {
  gt_status (*set)(gt_store *s, const char *key, const void *val, size_t len);
  /* Waits until key exists; *val is malloc'ed (caller frees), NUL-terminated
   * one byte past *len for convenience. */
  gt_status (*get)(gt_store *s, const char *key, void **val, size_t *len, int timeout_ms);
  /* Waits until every key exists. */
  gt_status (*wait)(gt_store *s, const char *const *keys, int nkeys, int timeout_ms);
  /* Atomically adds delta to the integer at key (absent = 0); returns the sum. */
  gt_status (*add)(gt_store *s, const char *key, int64_t delta, int64_t *result);
  gt_status (*del)(gt_store *s, const char *key);
  void (*destroy)(gt_store *s);
} gt_store_ops;

struct gt_store {
  const gt_store_ops *ops;
  void *impl;
};

gt_status gt_store_set(gt_store *s, const char *key, const void *val, size_t len);
gt_status gt_store_get(gt_store *s, const char *key, void **val, size_t *len, int timeout_ms);
gt_status gt_store_wait(gt_store *s, const char *const *keys, int nkeys, int timeout_ms);
gt_status gt_store_add(gt_store *s, const char *key, int64_t delta, int64_t *result);
gt_status gt_store_del(gt_store *s, const char *key);
void gt_store_destroy(gt_store *s);

/* A barrier over the store: every one of `n` participants calls it with the
 * same name; returns when all have arrived. */
gt_status gt_store_barrier(gt_store *s, const char *name, int rank, int n, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
