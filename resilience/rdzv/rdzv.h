/* Rendezvous and membership on etcd: what `giantrun` agents (one per node)
 * use to agree on a generation, a world and ranks, and to notice when that
 * world changes.
 *
 * Keys live under /giant/<job>/:
 *   current                 "<generation> <restarts>": the generation in force
 *   secret                  the job secret (hex), made by the first round closer,
 *                           on a lease every agent keeps alive: it goes a TTL
 *                           after the last agent of the job
 *   failures                with a restart window: times of its failures
 *   done                    "ok gen<N>" or "failed: <why>": the job ended
 *   gen<N>/nodes/<node>     "<nproc>", on the node's lease: registered for round N
 *   gen<N>/closed           the round's members in rank order, "<node> <nproc>" lines
 *   gen<N>/barrier/<node>   the node saw the closed round
 *   gen<N>/finished/<node>  every worker of the node exited 0 (no lease)
 *   gen<N>/reason           why the job left generation N
 *   gen<N>/store/           the workers' gt_store (GT_STORE points here)
 *
 * What stays: an ended job keeps only `done` (its agents delete the rest
 * as they exit); a job whose agents were all stopped keeps `current` (and
 * `failures`), so a relaunch goes on counting; a job whose agents were all
 * killed keeps its last generation until it is relaunched.
 *
 * A round opens when `current` names it. Nodes register; the round closes
 * (one transaction, so exactly one closer) when MIN nodes are in and either
 * MAX are in or the settle time has passed since MIN were seen. Node ranks
 * follow the sorted node ids. Every member then passes a barrier.
 *
 * While a round runs, an agent polls it: a member whose lease lapsed, or a
 * worker that failed, moves the job to the next generation and counts as a
 * restart; a node waiting to join while the round has fewer than MAX nodes
 * (and before any member finished) moves it too, without counting. More
 * restarts than allowed end the job as failed, for every agent. A failure
 * before every member finished runs every node's workers again, also those
 * that had exited 0. The job succeeds when every member of one round has
 * finished. Closing round N deletes generation N-1's keys.
 *
 * An agent that finds itself listed in a closed round it never joined is a
 * relaunch of a node whose agent died: it moves the job to a new generation
 * (not counted as a restart), so no one reads the dead round's keys.
 *
 * Every wait polls etcd (cfg.poll_ms) and is bounded; gt_rdzv_check reads
 * the round only when a watch on the job's keys saw a change outside the
 * workers' store (and at least every 5 s).
 */
#ifndef GIANT_RDZV_H
#define GIANT_RDZV_H

#include <signal.h>

#include "giant/status.h"
#include "giant/engine/store.h"

#define GT_RDZV_ID_MAX 100 /* longest job or node id */
#define GT_RDZV_MAX_NODES 1024

typedef struct gt_rdzv gt_rdzv;

typedef struct gt_rdzv_config {
  const char *endpoints;           /* etcd: "host:port[,host:port...]" */
  const char *cacert, *cert, *key; /* TLS PEM files, or NULL */
  const char *user, *password;     /* etcd authentication, or NULL */
  const char *job_id;              /* [A-Za-z0-9._-], at most GT_RDZV_ID_MAX */
  const char *node_id;             /* same alphabet; unique per agent */
  int min_nodes, max_nodes;
  int nproc;            /* workers on this node */
  int max_restarts;     /* failures the job survives */
  int restart_window_s; /* ... within this many seconds; 0 = ever */
  int ttl_s;            /* lease TTL: silent this long = gone; 0 = 10 */
  int settle_ms;        /* wait for more than MIN; 0 = none, <0 = 5000 */
  int join_timeout_ms;  /* one rendezvous at most this; 0 = 600000 */
  int call_timeout_ms;  /* each etcd call; 0 = 5000 */
  int poll_ms;          /* period of the waits; 0 = 100 */
  /* A member node that leaves the running round (its lease lapsed: the
   * node died or is cut off) is released instead of starting a new round:
   * its ranks leave the round's membership (resilience/members/members.h) and the
   * others reshape in-process without them (giantrun --reshape). When the
   * node comes back (a new agent, or the link healed), it rejoins that
   * round (gt_rdzv_round.rejoin) rather than start a new one. */
  int reshape;
  /* When it becomes non-zero (a signal handler sets it) waits end with
   * GT_ECANCELED. May be NULL. */
  const volatile sig_atomic_t *cancel;
} gt_rdzv_config;

typedef struct gt_rdzv_round {
  long generation;
  int restarts; /* failures the job has had so far */
  int nnodes, node_rank;
  int nproc;     /* this node's workers */
  int rank_base; /* global rank of this node's first worker */
  int world_size;
  char secret[72];                        /* hex */
  char store_prefix[GT_RDZV_ID_MAX + 48]; /* "/giant/<job>/gen<N>/store/" */
  /* cfg.reshape: this node left the running round (its agent died and a
   * new one started, or it was cut off) and takes its ranks again while
   * the others train on: its workers join the running job (GT_JOIN=1). */
  int rejoin;
} gt_rdzv_round;

typedef enum gt_rdzv_event {
  GT_RDZV_RUNNING = 0, /* nothing to do */
  GT_RDZV_RESTART,     /* the job left this generation: stop workers, join again */
  GT_RDZV_DONE,        /* the job ended: every worker of a round exited 0 */
  GT_RDZV_FAILED,      /* the job ended failed (see gt_rdzv_reason) */
} gt_rdzv_event;

/* Checks the config, connects, grants this node's lease and keeps it alive.
 * An unreachable etcd or a TLS failure is reported here. */
gt_status gt_rdzv_open(const gt_rdzv_config *cfg, gt_rdzv **out);
/* Takes part in the next round. *ev is GT_RDZV_RUNNING with *round filled,
 * or GT_RDZV_DONE / GT_RDZV_FAILED when the job ended meanwhile. */
gt_status gt_rdzv_join(gt_rdzv *r, gt_rdzv_round *round, gt_rdzv_event *ev);
/* One look at the running round (call it every poll period). Moves the job
 * on when a member is gone or a node waits, and ends it when every member
 * has finished. */
gt_status gt_rdzv_check(gt_rdzv *r, gt_rdzv_event *ev);
/* This node's workers failed: moves the job to the next generation, or ends
 * it as failed when no restart is left. Then call gt_rdzv_check or join. */
gt_status gt_rdzv_fail(gt_rdzv *r, const char *why);
/* This node's workers failed in a way a restart cannot mend (a usage or
 * configuration error): ends the job as failed at once. */
gt_status gt_rdzv_abort(gt_rdzv *r, const char *why);
/* A worker of the current round (generation rank `rank`) died and the
 * others reshape without it: publishes a membership epoch without it in
 * the round's store (resilience/members/members.h). */
gt_status gt_rdzv_member_lost(gt_rdzv *r, int rank);
/* The same for ranks first .. first + count - 1 at once, in one epoch (a
 * node's ranks, when the node is lost). */
gt_status gt_rdzv_members_lost(gt_rdzv *r, int first, int count);
/* Every worker of this node exited 0 in the current round. */
gt_status gt_rdzv_finish(gt_rdzv *r);
/* Why the job moved on or ended (for logs). */
const char *gt_rdzv_reason(const gt_rdzv *r);
/* Revokes the lease (so others see this node leave at once) and frees r.
 * After the job ended it deletes the job's keys but `done`; a member that
 * leaves a running job deletes its generation's keys. */
void gt_rdzv_close(gt_rdzv *r);

/* 1 when s is a valid job or node id. */
int gt_rdzv_valid_id(const char *s);

#endif
