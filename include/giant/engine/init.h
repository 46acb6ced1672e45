/* gt_init: a worker's view of its job, read from the environment that
 * `giantrun` sets. One call gives the ranks, the generation, the plan, the
 * job secret and a connected store for the communicators.
 *
 * The environment (all set by giantrun):
 *   GT_RANK, GT_WORLD_SIZE              this worker's global rank, of how many
 *   GT_LOCAL_RANK, GT_LOCAL_WORLD_SIZE  the same on this node
 *   GT_NODE_RANK, GT_NNODES             this node's rank, of how many
 *   GT_GENERATION                       the job's generation (0, 1, ...)
 *   GT_RESTART_COUNT                    failures the job has had so far
 *   GT_JOB_ID                           the job id
 *   GT_STORE                            etcd://HOST:PORT[,HOST:PORT]/PREFIX,
 *                                       etcds://... when etcd speaks TLS, or
 *                                       tcp://HOST:PORT (rank 0 hosts it)
 *   GT_STORE_CACERT, GT_STORE_CERT, GT_STORE_KEY   TLS files for that etcd
 *   GT_STORE_USER, GT_STORE_PASSWORD_FILE          its user, and a file (mode
 *                                       0600) holding the password
 *   GT_JOB_SECRET                       the job secret (hex)
 *   GT_PLAN                             the layout (--plan), may be unset
 *   GT_PROGRESS_FD                      a pipe to the agent for gt_job_step
 *
 * Without GT_WORLD_SIZE the process is a job of its own: rank 0 of 1, with a
 * private TCP store in the process and a fresh random secret.
 */
#ifndef GIANT_INIT_H
#define GIANT_INIT_H

#include "giant/engine/etcd.h"
#include "giant/status.h"
#include "giant/engine/store.h"

GT_API_BEGIN

typedef struct gt_job {
  int rank, world_size, local_rank, local_world_size, node_rank;
  long generation;
  char generation_name[32]; /* "gen<N>": a key namespace for gt_dist_config.generation */
  char job_id[128];
  char plan[128];   /* GT_PLAN or "" */
  gt_store *store;  /* connected: etcd under the generation's prefix, or a private TCP store */
  char secret[128]; /* GT_JOB_SECRET */
} gt_job;

/* Reads the environment and connects the store. Malformed or inconsistent
 * values are GT_EINVAL with a message naming the variable. */
gt_status gt_init(gt_job **out);
/* Tells the agent that this worker reached step (a count that grows): the
 * agent's hang detection (giantrun --hang-timeout) watches it. One small
 * write that never blocks; a no-op without giantrun. */
gt_status gt_job_step(gt_job *job, long long step);
/* Tells the agent that this worker's training is over (what is left is
 * winding down: saves, threads, exit): its step is no longer watched, and
 * its wait to exit is no stall. Later gt_job_step calls are no-ops. */
void gt_job_done(gt_job *job);
/* The job's etcd client when its store is on etcd (GT_STORE=etcd://...),
 * for health records (giant/engine/coord.h); NULL with a TCP store or alone. The
 * job owns it. */
gt_etcd_client *gt_job_etcd(gt_job *job);
/* Closes the store and frees the job. NULL is a no-op. */
void gt_job_destroy(gt_job *job);

GT_API_END
#endif
