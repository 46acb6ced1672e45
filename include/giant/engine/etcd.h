/* gt_etcd: a client for etcd's v3 API (gRPC), and a gt_store on it.
 *
 * One gt_etcd_client talks to a cluster through one or more endpoints and
 * fails over between them. Every call has a deadline (the client's timeout):
 * a call that cannot complete in time fails with GT_ETIMEDOUT, or GT_ECONN
 * when no endpoint could be reached. Calls are thread-safe. Keys are
 * NUL-terminated strings; values are bytes.
 *
 * A call refused by an unavailable endpoint is sent to the next one, and
 * again until the deadline; the client reconnects by itself when a server
 * comes back. A put or delete whose connection broke mid-call may thus be
 * applied twice (same result). A transaction is retried only when it was
 * never sent; otherwise it fails with GT_ECONN saying it may or may not
 * have been applied.
 *
 * Background work (lease keepalives, watches) runs on threads the library
 * owns; their callbacks run on those threads, one at a time per handle.
 * Like gRPC below it, a client does not survive fork(): make clients in
 * the process that uses them (after forking, or in the exec'ed program).
 */
#ifndef GIANT_ETCD_H
#define GIANT_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"
#include "giant/engine/store.h"

GT_API_BEGIN

typedef struct gt_etcd_client gt_etcd_client;

typedef struct gt_etcd_config {
  /* Comma-separated endpoints: "host:port", "http://host:port" or
   * "https://host:port". Required. */
  const char *endpoints;
  /* PEM files. A CA (or an https:// endpoint) turns TLS on; cert and key
   * give a client certificate (both or neither). NULL = unused. */
  const char *cacert;
  const char *cert;
  const char *key;
  /* User and password: the client authenticates on connect and again
   * whenever the server says its token is no longer valid. */
  const char *user;
  const char *password;
  int timeout_ms;   /* deadline of each call; 0 = 5000 */
  int keepalive_ms; /* HTTP/2 ping period that detects a frozen server; 0 = 10000 */
} gt_etcd_config;

/* Reads a password from the file at path into out (cap bytes, NUL-
 * terminated): one line, its newline dropped. The file must be a regular
 * file that only its owner may read (mode 0600 or stricter), as ssh asks
 * of a private key; anything else is GT_EINVAL with what to do. */
gt_status gt_etcd_read_password(const char *path, char *out, size_t cap);

/* Creates a client. With a user it authenticates now (so a wrong password
 * or an unreachable cluster is reported here); without one it connects
 * lazily and the first call reports an unreachable cluster. */
gt_status gt_etcd_connect(const gt_etcd_config *cfg, gt_etcd_client **out);
/* Stops the client's threads and frees it. Watches and keepalives made on
 * it must be closed first. NULL is a no-op. */
void gt_etcd_close(gt_etcd_client *c);
/* Changes the per-call deadline. */
void gt_etcd_set_timeout(gt_etcd_client *c, int timeout_ms);
/* The endpoint the client used last ("127.0.0.1:2379"). */
const char *gt_etcd_endpoint(const gt_etcd_client *c);

/* ---- key-value ---------------------------------------------------------- */

typedef struct gt_etcd_kv {
  char *key; /* NUL-terminated copy */
  size_t key_len;
  uint8_t *value; /* NUL-terminated one byte past value_len; NULL if keys_only */
  size_t value_len;
  int64_t create_revision, mod_revision, version, lease;
} gt_etcd_kv;

typedef struct gt_etcd_kvs {
  gt_etcd_kv *kvs;
  size_t n;
  int more;         /* a limit cut the result short */
  int64_t count;    /* keys in the range, regardless of limit */
  int64_t revision; /* store revision the read saw */
} gt_etcd_kvs;

typedef struct gt_etcd_get_opts {
  int prefix;       /* every key that starts with key */
  int64_t limit;    /* at most this many keys; 0 = all */
  int64_t revision; /* read as of this revision; 0 = latest */
  int keys_only;    /* leave values out */
  int serializable; /* answer from the member's local state, without a
                       consensus round: faster, may be slightly stale */
} gt_etcd_get_opts;

/* Reads key (or a prefix); opts may be NULL. An absent key gives n == 0. */
gt_status gt_etcd_get(gt_etcd_client *c, const char *key, const gt_etcd_get_opts *opts, gt_etcd_kvs *out);
/* Reads one key's value; GT_ENOTFOUND when absent. *val is malloc'ed and
 * NUL-terminated one byte past *len. mod_revision may be NULL. */
gt_status gt_etcd_get_value(gt_etcd_client *c, const char *key, void **val, size_t *len, int64_t *mod_revision);
void gt_etcd_kvs_free(gt_etcd_kvs *kvs);
void gt_etcd_kv_free(gt_etcd_kv *kv);

/* Writes key. lease 0 = none. When prev is not NULL it receives the old
 * pair (prev->key == NULL when there was none); free with gt_etcd_kv_free.
 * revision (may be NULL) receives the store revision of the write. */
gt_status gt_etcd_put(gt_etcd_client *c, const char *key, const void *val, size_t len, int64_t lease, gt_etcd_kv *prev,
                      int64_t *revision);
/* Deletes key, or every key under it with prefix != 0. deleted may be NULL. */
gt_status gt_etcd_del(gt_etcd_client *c, const char *key, int prefix, int64_t *deleted);

/* ---- transactions --------------------------------------------------------- */

typedef enum gt_etcd_cmp_target {
  GT_ETCD_CMP_VALUE,
  GT_ETCD_CMP_VERSION,
  GT_ETCD_CMP_CREATE_REVISION, /* 0 when the key is absent */
  GT_ETCD_CMP_MOD_REVISION,
} gt_etcd_cmp_target;

typedef enum gt_etcd_cmp_op {
  GT_ETCD_EQUAL,
  GT_ETCD_GREATER,
  GT_ETCD_LESS,
  GT_ETCD_NOT_EQUAL,
} gt_etcd_cmp_op;

typedef struct gt_etcd_cmp {
  const char *key;
  gt_etcd_cmp_target target;
  gt_etcd_cmp_op op;
  int64_t number;    /* for version and revisions */
  const void *value; /* for GT_ETCD_CMP_VALUE */
  size_t value_len;
} gt_etcd_cmp;

typedef enum gt_etcd_op_type { GT_ETCD_OP_GET, GT_ETCD_OP_PUT, GT_ETCD_OP_DEL } gt_etcd_op_type;

typedef struct gt_etcd_op {
  gt_etcd_op_type type;
  const char *key;
  const void *value; /* PUT */
  size_t value_len;  /* PUT */
  int64_t lease;     /* PUT */
  int prefix;        /* GET, DEL */
} gt_etcd_op;

typedef struct gt_etcd_txn_result {
  int succeeded; /* every compare held, so the success ops ran */
  int64_t revision;
  size_t n;             /* one result per op that ran */
  gt_etcd_kvs *results; /* GET: the pairs; DEL: count = keys deleted; PUT: empty */
} gt_etcd_txn_result;

/* If every compare holds, runs the success ops, else the failure ops, all
 * atomically. res may be NULL; else free it with gt_etcd_txn_result_free. */
gt_status gt_etcd_txn(gt_etcd_client *c, const gt_etcd_cmp *cmps, size_t ncmp, const gt_etcd_op *success,
                      size_t nsuccess, const gt_etcd_op *failure, size_t nfailure, gt_etcd_txn_result *res);
void gt_etcd_txn_result_free(gt_etcd_txn_result *res);

/* Puts key only if it does not exist; *created says whether it did. */
gt_status gt_etcd_create(gt_etcd_client *c, const char *key, const void *val, size_t len, int64_t lease, int *created);
/* Replaces key's value only if it equals expect; *swapped says whether it
 * did. An absent key never matches. */
gt_status gt_etcd_cas(gt_etcd_client *c, const char *key, const void *expect, size_t expect_len, const void *val,
                      size_t len, int *swapped);

/* ---- leases --------------------------------------------------------------- */

/* Grants a lease of ttl_s seconds; *id receives its id. */
gt_status gt_etcd_lease_grant(gt_etcd_client *c, int64_t ttl_s, int64_t *id);
/* Revokes a lease and deletes its keys. GT_ENOTFOUND if it does not exist. */
gt_status gt_etcd_lease_revoke(gt_etcd_client *c, int64_t id);
/* Seconds left (ttl) and granted. GT_ENOTFOUND once expired or revoked. */
gt_status gt_etcd_lease_ttl(gt_etcd_client *c, int64_t id, int64_t *ttl_s, int64_t *granted_s);

typedef struct gt_etcd_keepalive gt_etcd_keepalive;
/* Called once, from the keepalive's thread, when the lease is lost:
 * expired, revoked, or not renewed within its TTL. */
typedef void (*gt_etcd_lease_lost_cb)(void *arg, int64_t id);

/* Keeps a lease alive from a background thread (a renewal every third of
 * its TTL on a bidirectional stream, reconnecting and failing over as
 * needed). on_lost may be NULL; gt_etcd_keepalive_lost can be polled. */
gt_status gt_etcd_keepalive_start(gt_etcd_client *c, int64_t id, gt_etcd_lease_lost_cb on_lost, void *arg,
                                  gt_etcd_keepalive **out);
/* 1 once the lease is lost. */
int gt_etcd_keepalive_lost(gt_etcd_keepalive *ka);
/* Seconds of TTL the server reported at the last renewal. */
int64_t gt_etcd_keepalive_ttl(gt_etcd_keepalive *ka);
/* Stops renewing (the lease then expires unless revoked) and frees ka. */
void gt_etcd_keepalive_stop(gt_etcd_keepalive *ka);

/* ---- watches -------------------------------------------------------------- */

typedef enum gt_etcd_event_type {
  GT_ETCD_EVENT_PUT,
  GT_ETCD_EVENT_DELETE,
  /* The watch ended: its next revision was compacted away
   * (revision = the compaction revision) or the server refused it. No event
   * follows; the watch must be closed. */
  GT_ETCD_EVENT_COMPACTED,
  GT_ETCD_EVENT_ERROR,
} gt_etcd_event_type;

typedef struct gt_etcd_event {
  gt_etcd_event_type type;
  gt_etcd_kv kv;    /* PUT: the new pair; DELETE: key and mod_revision */
  int64_t revision; /* the event's revision (COMPACTED: compaction revision) */
} gt_etcd_event;

typedef struct gt_etcd_watch gt_etcd_watch;
/* Called on the watch's thread, in revision order; ev is valid only during
 * the call. */
typedef void (*gt_etcd_watch_cb)(void *arg, const gt_etcd_event *ev);

typedef struct gt_etcd_watch_opts {
  int prefix;             /* every key that starts with key */
  int64_t start_revision; /* first revision to report; 0 = changes after now */
} gt_etcd_watch_opts;

/* Watches key (or a prefix). Events go to cb, or, with cb NULL, to a queue
 * read with gt_etcd_watch_next. Returns once the server has accepted the
 * watch, so every change after the call is reported. A broken stream is
 * re-created from the last reported revision + 1: no event is lost or
 * repeated. */
gt_status gt_etcd_watch_start(gt_etcd_client *c, const char *key, const gt_etcd_watch_opts *opts, gt_etcd_watch_cb cb,
                              void *arg, gt_etcd_watch **out);
/* Takes the next queued event (queue mode), waiting up to timeout_ms.
 * GT_ETIMEDOUT if none came. Free ev with gt_etcd_event_free. */
gt_status gt_etcd_watch_next(gt_etcd_watch *w, gt_etcd_event *ev, int timeout_ms);
void gt_etcd_event_free(gt_etcd_event *ev);
/* The last revision reported (0 before the first event). */
int64_t gt_etcd_watch_revision(gt_etcd_watch *w);
/* GT_OK while the watch runs; else why it ended (GT_ERANGE: compacted). */
gt_status gt_etcd_watch_status(gt_etcd_watch *w);
/* Cancels the watch; no callback runs after it returns. Frees w. */
void gt_etcd_watch_cancel(gt_etcd_watch *w);

/* ---- gt_store on etcd ----------------------------------------------------- */

/* A gt_store whose keys live under prefix (e.g. "/giant/job1/"). get and
 * wait use watches, add is a compare-and-swap loop on a decimal integer.
 * The client must outlive the store. */
gt_status gt_etcd_store_create(gt_etcd_client *c, const char *prefix, gt_store **out);

GT_API_END
#endif
