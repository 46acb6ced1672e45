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
 *
 * Mitigation. Worker rank 0 of a job whose agents lead publishes what the
 * rebalancing decision needs (resilience/mitigate/rebalance.h), a gt_mitigation_report at
 * /giant/<job>/mitigation/report; the leader decides and writes a
 * gt_mitigation at /giant/<job>/mitigation/decision, in a transaction that
 * holds only while its leader key is still the one of its term, so a
 * deposed leader's write is refused. Both are one line of text.
 */
#ifndef GIANT_COORD_H
#define GIANT_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "giant/engine/etcd.h"
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
/* This node's term while it leads (the create revision of the key it
 * holds); 0 when it does not lead. */
int64_t gt_leader_term(gt_leader *l);
/* Resigns (revokes the lease, so another takes over at once) and frees l. */
void gt_leader_close(gt_leader *l);

/* ---- health records ---- */

typedef enum gt_health_state {
  GT_HEALTH_OK = 0,   /* as fast as its workload explains */
  GT_HEALTH_SLOW,     /* fail-slow: alive, slower than predicted */
  GT_HEALTH_STOPPED,  /* no progress: hung or gone */
  GT_HEALTH_EXCLUDED, /* the job reshaped without it (the ladder's S3, docs/resilience.md) */
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
  int peer;     /* with GT_HEALTH_LINK; -1 otherwise */
  double ratio; /* observed / predicted step time */
  double observed_ms, predicted_ms;
  int64_t step; /* the step the evidence ends at */
  double time;  /* seconds since the epoch, when it was recorded */
  char by[64];  /* who recorded it (a node id) */
} gt_health_record;

/* The record as its one line of text (at most GT_HEALTH_LINE_MAX bytes). */
#define GT_HEALTH_LINE_MAX 256

/* Writes r->rank's record under /giant/<job>/health/. */
gt_status gt_health_put(gt_etcd_client *c, const char *job_id, const gt_health_record *r);
/* Reads up to max records, in rank order; *n gets how many. A record that
 * does not parse fails the call with its key named. */
gt_status gt_health_list(gt_etcd_client *c, const char *job_id, gt_health_record *out, int max, int *n);
/* The records as a table, one rank a line. */
void gt_health_print(const gt_health_record *r, int n, FILE *f);

/* ---- mitigation: what the workers measured, what the leader decided ---- */

#define GT_MITIGATION_MAX_DP 256
#define GT_MITIGATION_MAX_STAGES 64 /* pipeline stages a report or a cut holds */
#define GT_MITIGATION_MAX_LAYERS 512
#define GT_MITIGATION_LINE_MAX 32768

typedef struct gt_mitigation_report {
  int64_t step;                       /* the last step the speeds cover */
  int64_t epoch;                      /* the decision the current shares come from; 0: none yet */
  int dp;                             /* data-parallel replicas (1..GT_MITIGATION_MAX_DP) */
  int cap;                            /* the most rows one replica may take */
  int urgent;                         /* 1: the fail-slow monitor flagged or cleared a rank since the last report */
  double transition_s;                /* what switching shares costs, in seconds */
  int shares[GT_MITIGATION_MAX_DP];   /* rows of every group micro-batch, each replica's */
  int micro[GT_MITIGATION_MAX_DP];    /* micro-batches a step */
  double speed[GT_MITIGATION_MAX_DP]; /* rows per second (gt_rebalance_speeds) */
  /* Pipelines (pp > 1; 0 or 1: none): what gt_rebalance_choose_cut needs. */
  int pp, layers;
  int cut[GT_MITIGATION_MAX_STAGES + 1];        /* the cut now: stage s holds layers [cut[s], cut[s+1]) */
  double stage_s[GT_MITIGATION_MAX_STAGES];     /* each stage's compute a step */
  double layer_flops[GT_MITIGATION_MAX_LAYERS]; /* each layer's forward FLOPs a micro-batch */
} gt_mitigation_report;

typedef struct gt_mitigation {
  int64_t epoch; /* 1, 2, ...: the workers apply each epoch once */
  int64_t term;  /* the term of the leader that decided */
  int64_t step;  /* the report's step it was decided on */
  int dp;
  int shares[GT_MITIGATION_MAX_DP];
  double step_now_s, step_new_s, gain_s; /* gt_rebalance_decision's */
  char by[128];                          /* the leader's node id */
  int pp;                                /* > 1: the pipeline cut to take, cut[0..pp] (gt_rebalance_cut's next) */
  int cut[GT_MITIGATION_MAX_STAGES + 1];
} gt_mitigation;

gt_status gt_mitigation_report_put(gt_etcd_client *c, const char *job_id, const gt_mitigation_report *r);
/* *found: 0 when there is none (r untouched). */
gt_status gt_mitigation_report_get(gt_etcd_client *c, const char *job_id, gt_mitigation_report *r, int *found);
/* Writes the decision only while term leads the job (the leader key's
 * create revision is term): GT_ESTATE when it does not, nothing written. */
gt_status gt_mitigation_put(gt_etcd_client *c, const char *job_id, int64_t term, const gt_mitigation *m);
gt_status gt_mitigation_get(gt_etcd_client *c, const char *job_id, gt_mitigation *m, int *found);
/* The decision as a line for people: "mitigation: epoch 1 (term 57, by x)
 * at step 40: rows 11,5; predicted 0.4000 s -> 0.2750 s a step, gain 6.19 s". */
void gt_mitigation_print(const gt_mitigation *m, FILE *f);

GT_API_END
#endif
