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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

GT_API_BEGIN

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

/* ---- the TCP store: hosted by one process (a server thread), used by all ---- */

typedef struct gt_store_tcp_config {
  const char *host;   /* server address to connect to ("127.0.0.1") */
  int port;           /* server port; with is_host, 0 picks a free one */
  bool is_host;       /* start the server in this process, then connect */
  const char *secret; /* job secret, at least 16 bytes; NULL = $GT_JOB_SECRET */
  int timeout_ms;     /* connect timeout (the server may start later) */
} gt_store_tcp_config;

/* Opens a store client (and, with is_host, the server it talks to; the
 * server stops when this store is destroyed). */
gt_status gt_store_tcp_open(const gt_store_tcp_config *cfg, gt_store **out);
/* The port of the server this store talks to. */
int gt_store_tcp_port(const gt_store *s);

/* A barrier over the store: every one of `n` participants calls it with the
 * same name; returns when all have arrived. */
gt_status gt_store_barrier(gt_store *s, const char *name, int rank, int n, int timeout_ms);

GT_API_END
#endif
