/* --reshape: when a rank is lost, the ranks left agree on where training
 * stands and go on at a new layout in the same processes (docs/resilience.md).
 * This part is the agreement; rebuild.c rebuilds the layout. */
#ifndef GIANT_RUN_RESHAPE_H
#define GIANT_RUN_RESHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/ckpt.h"
#include "giant/engine/comm.h"
#include "giant/data.h"
#include "resilience/detect/failslow.h"
#include "optim/fault/fault.h"
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "giant/engine/init.h"
#include "resilience/members/members.h"
#include "giant/engine/trainer.h"
#include "ckpt/peers_api.h"

/* Reshapes tried after the first fails (each at the next membership epoch). */
#define RUN_RESHAPE_RETRIES 3

typedef struct run_reshape {
  const char *name;        /* the program, in log lines */
  int gen_world, gen_rank; /* this worker in its generation (epoch 0) */
  int epoch;               /* the membership epoch the ranks train in */
  int members[GT_MEMBERS_MAX], n;
  int timeout_ms; /* waiting for a new epoch, and for the others' states */
  /* Redundancy: a copy of this rank's single-owner state on a peer,
   * taken every `every` steps, chosen so that it costs at most
   * RUN_MIRROR_BUDGET of a step. */
  gt_ckpt_mirror *mirror;
  int every, taken;
  int fixed_every;         /* --mirror-every: > 0 fixes `every` */
  double update_s, step_s; /* sums over the calibration updates */
  int64_t joins_seen;      /* rank 0: join requests taken so far */
  double joins_retry_at;   /* rank 0: after a failed look, the next one not before this (gt_now) */
  gt_fault_plan faults;    /* GT_FAULT's holdjoin, played where joins are looked for */
  /* A cut-off peer (a partitioned node) breaks no connection: the watcher
   * aborts `grid`'s communicators once the epoch without it stands
   * (resilience/members/members.h), so the step blocked on it fails at once. */
  gt_members_watch *watch;
  gt_grid *grid;
  /* The last reshape could not gather the state (floats held by no rank
   * left): another epoch would not bring them back; a restart from the
   * newest checkpoint does. */
  bool state_lost;
  /* A joining rank: training ended before the job took it in. */
  bool job_finished;
} run_reshape;

/* Of the watcher: how long a newer epoch stands before the communicators
 * are aborted (a planned reshape moves every rank within milliseconds). */
#define RUN_WATCH_GRACE_MS 2000

#define RUN_MIRROR_BUDGET 0.02 /* of the step time */
#define RUN_MIRROR_CALIBRATE 5 /* updates at every step before `every` is chosen */

/* Where training goes on after the agreement. */
typedef struct run_resume_point {
  int world, rank;    /* in the new epoch */
  int step;           /* the step every member is at, once the pending one is resolved */
  uint64_t row;       /* the data stream's next row */
  bool apply_pending; /* this rank applies its pending step (gt_trainer_resolve_step) */
} run_resume_point;

void run_reshape_init(run_reshape *r, const gt_job *job, const char *name);
/* Rank 0, after the last step: training ended, for any rank still waiting
 * to join (a warning when it cannot be recorded). */
void run_reshape_finish(run_reshape *r, gt_job *job);
/* Starts (again, after a reshape) the copies of single-owner state on the
 * peer on the next node (stride: ranks per node, 1 on one node). */
gt_status run_mirror_start(run_reshape *r, gt_trainer *tr, const gt_job *job, bool lead);
/* After each step: the copy, every `every` steps. Collective. */
gt_status run_mirror_after_step(run_reshape *r, gt_trainer *tr, double step_seconds, bool lead);
void run_reshape_destroy(run_reshape *r);
/* Aborts every communicator of grid: operations blocked on a lost peer
 * fail at once, here and on the ranks still in the group. */
void run_abort_grid(gt_grid *grid);
/* The watcher, when the store is etcd's (the agents publish epochs there);
 * it watches for epochs after r->epoch while training runs on grid. */
gt_status run_watch_start(run_reshape *r, gt_job *job, gt_grid *grid);
/* Around a reshape: the watcher stands aside, then watches the new grid. */
void run_watch_pause(run_reshape *r);
void run_watch_resume(run_reshape *r, gt_grid *grid);
/* A worker restarted alone (GT_JOIN=1): asks to join the running job and
 * waits for a membership epoch that has it; then reshape as the others
 * do, with no state of its own. When training ends first, it returns
 * GT_OK with r->job_finished. */
gt_status run_reshape_join(run_reshape *r, gt_job *job);
/* Between steps, every RUN_JOIN_CHECK_EVERY steps: whether ranks asked to
 * join, in which case rank 0 has published the epoch with them and every
 * rank reshapes now (*grow). Collective over world. */
#define RUN_JOIN_CHECK_EVERY 5
#define RUN_JOIN_RETRY_S 5
gt_status run_reshape_check_joins(run_reshape *r, gt_job *job, gt_comm *world, bool *grow);
/* After a failed step: waits for a newer membership epoch (giantrun
 * publishes one when a worker dies) and gives this rank's place in it.
 * GT_ECANCELED when this rank is not a member any more; any other failure
 * means a restart. */
gt_status run_reshape_members(run_reshape *r, gt_job *job, int *world, int *rank);
/* Then, over the new world's communicator (NULL: alone), decides with the
 * others where training goes on: each rank's step and data position are
 * all-gathered. rows_per_step: rows of the whole job per step. */
gt_status run_reshape_decide(run_reshape *r, gt_comm *world, gt_trainer *tr, gt_loader *loader, uint64_t rows_per_step,
                             run_resume_point *out);

#endif
