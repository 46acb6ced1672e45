/* Plans and distributed training.
 *
 * A plan resolves a layout (dp x tp x pp, from `giantrun --plan` or the
 * GT_PLAN environment variable: "dp=2,tp=2" or "auto") against the world
 * size and the model's annotations: which layers each rank holds, how each
 * is split, which slice of every parameter and of the optimizer state each
 * rank owns. Every rank computes the same plan from the same inputs.
 *
 * A gt_dist is a running job's parallel state: the process grid, the plan,
 * and the groups the model and trainer use. It can be destroyed and built
 * again at another layout inside the same process.
 */
#ifndef GIANT_PLAN_H
#define GIANT_PLAN_H

#include <stdio.h>

#include "giant/comm.h"
#include "giant/model.h"
#include "giant/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_plan {
  gt_grid_layout layout;
  int world, rank;
  gt_grid_coords me;
  bool zero1;          /* optimizer state sharded over the data-parallel group */
  bool seq_parallel;   /* sequence parallelism in split layers */
  size_t bucket_bytes; /* gradient all-reduce bucket size */
  bool automatic;      /* the layout was chosen by "auto" */
  gt_pp_kind schedule; /* pipeline schedule (pp > 1) */
  int chunks;          /* virtual stages per pipeline rank (interleaved), >= 1 */
} gt_plan;

/* "dp=2,tp=2,pp=1" (missing factors are 1, except dp, which fills the world
 * when omitted), or "auto". Unknown keys and malformed numbers are errors. */
gt_status gt_plan_parse(const char *text, int world, gt_grid_layout *out, bool *automatic);

typedef struct gt_plan_config {
  int world, rank;
  const char *layout;  /* NULL: $GT_PLAN, else "auto" */
  bool zero1, seq_parallel;
  size_t bucket_bytes; /* 0: 4 MiB */
  gt_pp_kind schedule; /* GT_PP_GPIPE (0), GT_PP_1F1B or GT_PP_INTERLEAVED */
  int chunks;          /* virtual stages per rank for interleaved (0: 2); 1 otherwise */
} gt_plan_config;

/* Checks the layout factors the world and fills the plan. "auto" picks pure
 * data parallelism (dp = world), the layout that needs no annotation. */
gt_status gt_plan_resolve(const gt_plan_config *cfg, gt_plan *out);
/* After the model is built: the constraints a layout puts on the model (a
 * split that no layer can take, pipeline stages without pipelining). The
 * message names the constraint. */
gt_status gt_plan_check_model(const gt_plan *p, const gt_model *m);
/* Before the model is built: cut its layers into the plan's pipeline stages
 * with the planner, balancing each stage's FLOPs against its rank's speed
 * (stage_speed[r] for pipeline rank r; NULL: all equal) for micro-batches
 * of (B, T). A slower rank gets fewer layers. No-op without pipelining. */
gt_status gt_plan_cut_stages(const gt_plan *p, gt_model *m, int B, int T, const double *stage_speed);

/* A table: the layout, each layer with its stage and split, each
 * parameter's local and global shape, and this rank's ZeRO shard. */
void gt_plan_print(const gt_plan *p, const gt_model *m, FILE *f);

/* ---- a running job's parallel state ---- */

typedef struct gt_dist gt_dist;

typedef struct gt_dist_config {
  gt_plan plan;
  gt_store *store;        /* bootstrap store shared by the world */
  const char *generation; /* key namespace, unique per build ("gen0") */
  gt_comm_config comm;    /* template: backend, secret, timeouts */
} gt_dist_config;

gt_status gt_dist_create(const gt_dist_config *cfg, gt_dist **out);
void gt_dist_destroy(gt_dist *d);
const gt_plan *gt_dist_plan(const gt_dist *d);
/* The key namespace this state was built under. */
const char *gt_dist_generation(const gt_dist *d);
gt_grid *gt_dist_grid(gt_dist *d);
/* The model's parallel context for this rank (set it before adding layers). */
gt_model_parallel gt_dist_model_parallel(gt_dist *d);
/* The data-parallel group as a gt_group, for reducing metrics. */
gt_group *gt_dist_dp_group(gt_dist *d);
gt_group *gt_dist_tp_group(gt_dist *d);
/* NULL without pipeline parallelism. */
gt_group *gt_dist_pp_group(gt_dist *d);

/* ---- pipeline execution ---- */

/* Runs one step's micro-batches through this rank's pipeline stages in the
 * order of the plan's schedule: activations go to the next stage and
 * gradients to the previous one over point-to-point transfers (one
 * communicator each way, so a blocked transfer in one direction never holds
 * up the other). Gradients accumulate in the model. */
typedef struct gt_pp_exec gt_pp_exec;

/* Collective over the world (it builds the communicators it needs). */
gt_status gt_pp_exec_create(gt_dist *d, gt_model *m, int micro_batches, gt_pp_exec **out);
void gt_pp_exec_destroy(gt_pp_exec *e);
/* batches[micro_batches]; weights[i] is micro-batch i's weight in the step's
 * loss (its mean loss counts weights[i] times); *loss gets the weighted sum
 * on every rank. */
gt_status gt_pp_exec_run(gt_pp_exec *e, const gt_batch *batches, const double *weights, float *loss);
/* Sums the gradients of a tied parameter whose copies live on different
 * stages (the token table on the first, the LM head's on the last), so both
 * copies take the same update. */
gt_status gt_pp_exec_sync_tied(gt_pp_exec *e);
/* Timing of the last run on this rank: its whole length, and the time spent
 * computing (forward and backward of its stages); the rest went waiting. */
void gt_pp_exec_timing(const gt_pp_exec *e, double *run_seconds, double *busy_seconds);

/* ---- data-parallel gradient averaging ---- */

/* Sums gradients over the data-parallel group: each replica's loss carries
 * its share of the step's tokens, so the sum is the step's average, even
 * when replicas hold uneven shares. The gradient buffer is cut into
 * buckets of about bucket_bytes, in backward order; a bucket's
 * all-reduce starts as soon as the backward of the lowest layer it covers
 * has run, so communication overlaps the rest of backward. With ZeRO-1 the
 * gradients are reduce-scattered instead: each rank keeps the average of its
 * shard only, updates that shard, and the parameters are all-gathered. */
typedef struct gt_dp_sync gt_dp_sync;

typedef struct gt_dp_sync_stats {
  int buckets;
  double wait_seconds;   /* time finish() spent waiting after backward ended */
} gt_dp_sync_stats;

gt_status gt_dp_sync_create(gt_model *m, gt_comm *dp, size_t bucket_bytes, bool zero1, gt_dp_sync **out);
void gt_dp_sync_destroy(gt_dp_sync *s);
/* Before a micro-batch's backward: reduce = true on the step's last
 * micro-batch (the others only accumulate). overlap = false holds every
 * bucket back to finish() (for measuring what overlap buys). */
gt_status gt_dp_sync_begin(gt_dp_sync *s, bool reduce, bool overlap);
/* After the last backward: waits for every bucket (or, with ZeRO-1, reduce-
 * scatters). The gradients are then averaged (in this rank's shard). */
gt_status gt_dp_sync_finish(gt_dp_sync *s);
/* ZeRO-1: all-gathers every rank's updated parameter shard. */
gt_status gt_dp_sync_gather_params(gt_dp_sync *s);
/* The floats [lo, hi) of the flat buffer this rank updates. */
void gt_dp_sync_shard(const gt_dp_sync *s, size_t *lo, size_t *hi);
bool gt_dp_sync_zero1(const gt_dp_sync *s);
const gt_dp_sync_stats *gt_dp_sync_last(const gt_dp_sync *s);

/* gt_group over a communicator (host buffers). */
gt_status gt_comm_group_init(gt_comm *comm, gt_group *out);

#ifdef __cplusplus
}
#endif
#endif
