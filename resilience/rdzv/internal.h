/* Shared by the rendezvous files: the handle, and one consistent look at a
 * generation's keys (a transaction of reads). */
#ifndef GIANT_RDZV_INTERNAL_H
#define GIANT_RDZV_INTERNAL_H

#include "giant/engine/etcd.h"
#include "resilience/rdzv/rdzv.h"

typedef struct rdzv_member {
  char id[GT_RDZV_ID_MAX + 1];
  int nproc;
  /* cfg.reshape: the node left the running round and its ranks left the
   * membership; the round goes on without it. */
  int released;
} rdzv_member;

struct gt_rdzv {
  gt_rdzv_config cfg; /* strings point into the copies below */
  char *endpoints, *cacert, *cert, *key, *job, *node, *user, *password;
  gt_etcd_client *cli;
  int64_t lease;
  gt_etcd_keepalive *ka;
  /* The job lease holds the secret: every agent keeps it alive, so the
   * secret lasts while any agent of the job does. */
  int64_t job_lease;
  gt_etcd_keepalive *job_ka;
  char root[GT_RDZV_ID_MAX + 16]; /* "/giant/<job>/" */
  /* The round this node takes part in (after a successful join). */
  long gen;
  int restarts;
  rdzv_member *members;
  int nmembers;
  char reason[512];
  int ended; /* the job ended (done seen): its keys can go */
  /* A watch on the job's keys lets gt_rdzv_check skip reading etcd while
   * nothing but the workers' store changed. */
  gt_etcd_watch *watch;
  double last_read;
};

/* What one transaction of reads saw under the root and generation gen. */
typedef struct rdzv_snap {
  long gen; /* from `current` */
  int restarts;
  char current[64]; /* its raw value, for compare-and-swap */
  int done;         /* 1 ok, -1 failed, 0 running */
  char done_val[400];
  const char *failures;   /* `failures`: unix times of recent failures, or "" */
  gt_etcd_txn_result res; /* [0] current [1] done [2] closed [3] nodes [4] barrier [5] finished
                             [6] failures */
} rdzv_snap;

gt_status rdzv_snap_read(gt_rdzv *r, long gen, rdzv_snap *s);
void rdzv_snap_free(rdzv_snap *s);
const gt_etcd_kvs *rdzv_snap_closed(const rdzv_snap *s);
const gt_etcd_kvs *rdzv_snap_nodes(const rdzv_snap *s);
const gt_etcd_kvs *rdzv_snap_barrier(const rdzv_snap *s);
const gt_etcd_kvs *rdzv_snap_finished(const rdzv_snap *s);
/* 1 when a key "<prefix><id>" is among kvs. */
int rdzv_kvs_has(const gt_etcd_kvs *kvs, const char *prefix, const char *id);

/* "<root><suffix>" */
void rdzv_key(const gt_rdzv *r, char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Grants a fresh lease when the current one was lost. */
gt_status rdzv_ensure_lease(gt_rdzv *r);
/* Moves the job from the generation s saw to the next one, counting a
 * restart when `counts`; with no restart left it ends the job as failed.
 * Losing the race to another agent is not an error. */
gt_status rdzv_advance(gt_rdzv *r, const rdzv_snap *s, int counts, const char *why);
/* Ends the job: writes `done` unless a done exists and, when s is given,
 * only if `current` still holds what s saw. *ended says whether this call
 * ended it. (Each agent deletes the job's other keys as it exits.) */
gt_status rdzv_end_job(gt_rdzv *r, const rdzv_snap *s, const char *done, int *ended);
/* Deletes every key of the job but `done` and the health records (best
 * effort: the job is over). */
void rdzv_purge(gt_rdzv *r);
/* Parses a closed round's members ("<node> <nproc>" lines). */
gt_status rdzv_parse_members(const char *text, size_t len, rdzv_member **out, int *n);
int rdzv_cancelled(const gt_rdzv *r);
void rdzv_nap_ms(int ms);
double rdzv_now(void);

#endif
