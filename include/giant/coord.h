/* The job's coordinator on etcd: who leads, and what is known of each
 * rank's health.
 *
 * Leadership. Every agent of a job campaigns; one leads. The leader holds
 * the key /giant/<job>/leader (its value: the leader's node id) on a lease
 * it keeps alive. When the leader dies its lease expires, etcd deletes the
 * key, and the others, watching it, campaign again: a new leader takes over
 * within the lease's TTL. A leader that loses its lease (partitioned from
 * etcd for a TTL) stops leading before anyone else can start. The key's
 * create revision is the term: it grows with every new leader, so a
 * decision stamped with a term can be told from a stale one.
 *
 * Health. /giant/<job>/health/<rank> holds one line of text per rank:
 *   state=slow kind=compute peer=-1 ratio=2.05 observed_ms=412.0
 *   predicted_ms=201.0 step=57 time=1795000000.25 by=node-a
 * readable with any etcd client and watchable by anyone; giant-etcd health
 * JOB prints them as a table.
 */
#ifndef GIANT_COORD_H
#define GIANT_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "giant/etcd.h"
#include "giant/status.h"

GT_API_BEGIN

/* ---- leadership ---- */

typedef struct gt_leader gt_leader;

typedef struct gt_leader_config {
  /* Endpoints and TLS as for gt_etcd_connect; the leader has a client (and
   * threads) of its own. */
  gt_etcd_config etcd;
  const char *job_id;  /* [A-Za-z0-9._-], as giantrun's --job-id */
  const char *node_id; /* this campaigner, as giantrun's node id */
  int ttl_s;           /* the lease: a dead leader is replaced within it; 0: 10 */
} gt_leader_config;

/* Connects, takes a lease and campaigns in the background. */
gt_status gt_leader_open(const gt_leader_config *cfg, gt_leader **out);
/* Whether this node leads now. */
bool gt_leader_is_leader(gt_leader *l);
/* Waits up to timeout_ms for this node to lead: GT_OK, or GT_ETIMEDOUT. */
gt_status gt_leader_wait(gt_leader *l, int timeout_ms);
/* The leader as etcd has it now: its node id ("" with no leader) and term
 * (the leader key's create revision; 0 with no leader). */
gt_status gt_leader_current(gt_leader *l, char *node, size_t node_len, int64_t *term);
/* Resigns (revokes the lease, so another takes over at once) and frees l. */
void gt_leader_close(gt_leader *l);

/* ---- health records ---- */

typedef enum gt_health_state {
  GT_HEALTH_OK = 0,  /* as fast as its workload explains */
  GT_HEALTH_SLOW,    /* fail-slow: alive, slower than predicted */
  GT_HEALTH_STOPPED, /* no progress: hung or gone */
} gt_health_state;

typedef enum gt_health_kind {
  GT_HEALTH_NONE = 0, /* nothing to localise (state ok) */
  GT_HEALTH_COMPUTE,  /* the rank's own computation is slow */
  GT_HEALTH_LINK,     /* a link to `peer` is slow */
} gt_health_kind;

typedef struct gt_health_record {
  int rank;
  gt_health_state state;
  gt_health_kind kind;
  int peer;            /* with GT_HEALTH_LINK; -1 otherwise */
  double ratio;        /* observed / predicted step time */
  double observed_ms, predicted_ms;
  int64_t step;        /* the step the evidence ends at */
  double time;         /* seconds since the epoch, when it was recorded */
  char by[64];         /* who recorded it (a node id) */
} gt_health_record;

const char *gt_health_state_name(gt_health_state s);
const char *gt_health_kind_name(gt_health_kind k);
/* The record as its one line of text (at most GT_HEALTH_LINE_MAX bytes). */
#define GT_HEALTH_LINE_MAX 256
gt_status gt_health_format(const gt_health_record *r, char *line, size_t len);
/* Parses a line of gt_health_format; rank is taken from the caller (it is
 * in the key). A malformed line is GT_EFORMAT, naming what is wrong. */
gt_status gt_health_parse(const char *line, size_t len, int rank, gt_health_record *out);

/* Writes r->rank's record under /giant/<job>/health/. */
gt_status gt_health_put(gt_etcd_client *c, const char *job_id, const gt_health_record *r);
/* Reads up to max records, in rank order; *n gets how many. A record that
 * does not parse fails the call with its key named. */
gt_status gt_health_list(gt_etcd_client *c, const char *job_id, gt_health_record *out, int max, int *n);
/* The records as a table, one rank a line. */
void gt_health_print(const gt_health_record *r, int n, FILE *f);

GT_API_END
#endif
