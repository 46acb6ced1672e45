/* The run's handle, shared by its files: run.c opens and ends it, start.c
 * starts it, train.c trains; rebuild.c builds the model for a layout and
 * rebuilds it at a reshape or a re-cut. */
#ifndef GIANT_RUN_INTERNAL_H
#define GIANT_RUN_INTERNAL_H

#include "giant/ckpt.h"
#include "giant/data.h"
#include "giant/engine/dist.h"
#include "resilience/detect/failslow.h"
#include "giant/engine/init.h"
#include "giant/engine/plan.h"
#include "giant/run.h"
#include "giant/engine/trainer.h"
#include "checkpoint.h"
#include "eval.h"
#include "ladder.h"
#include "observe.h"
#include "progress.h"
#include "rebalance.h"
#include "reshape.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"

struct gt_run {
  gt_run_options o;
  gt_run_model model;
  gt_job *job;
  gt_backend *be;
  gt_precision precision;
  gt_recompute recompute; /* --recompute: the model's default */
  gt_optim_kind kind;
  gt_pp_kind schedule;
  const char *state_dir; /* --offload-optimizer disk:DIR */
  double peak;           /* FLOP/s the planner works with, the same on every rank */
  bool lead, joining;
  bool started, trained; /* gt_run_start took the layout; training reached --steps here */
  int rc;                /* the exit status so far */
  int total;             /* rows of every micro-batch, all replicas together */
  gt_plan plan, launch_plan;
  gt_model_config mc;
  gt_model_parallel mp;
  gt_trainer_config tc;
  gt_dist *dist;
  gt_model *m;
  gt_loader *loader;
  const gt_loader_source *source; /* the program's rows, or NULL: --data */
  gt_trainer *tr;
  gt_ckpt *ckpt;
  run_ckpt_args ckpt_args;
  run_rebalance *rb;
  int *shares;    /* every replica's rows of each micro-batch */
  int cap;        /* the most one replica may take: its activations' rows */
  int launch_cap; /* cap at launch, which a reshape keeps within */
  gt_failslow *failslow;
  run_ladder_caps ladder; /* --ladder, parsed once; what the job can do is filled at each decision */
  run_reshape rsh;        /* --reshape: the membership, and the copies on a peer */
  run_progress *progress; /* the step and ETA on etcd, for giantrun --status; NULL without etcd */
  char metrics[4096];     /* this rank's metrics file, "" for none */
  run_eval eval;          /* --eval-every: the validation loss's rows */
  run_observe obs;        /* the metrics line, the step line and TensorBoard's events, written by the run */
  char reshaped_gen[96];
};

/* The exit status a failure gets, the message printed with what the run
 * was doing. Returns s. */
gt_status run_fail(gt_run *r, int code, const char *what, gt_status s);
/* The message alone (a failure the run recovers from). */
void run_report(const gt_run *r, const char *what, gt_status s);

/* A failure to read the data is the input's, unless memory ran out. */
static inline int run_input_code(gt_status s) { return s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : GT_RUN_EXIT_INPUT; }
/* After a reshape (start.c): this rank's place, and rebalancing and the
 * fail-slow monitor started again at the new layout. */
gt_status run_after_reshape(gt_run *r);

/* The model cut into the plan's pipeline stages at first (first[s]: stage
 * s's first layer), or by the stage speeds when first is NULL (NULL speeds:
 * all alike), built. */
gt_status run_build_model(const gt_run *r, const gt_model_config *mc, const gt_model_parallel *mp, const gt_plan *plan,
                          int rows, const double *speeds, const int *first, gt_model **out);
/* --rebalance at a pipeline layout: the model and trainer rebuilt at the
 * cut first, the state moved into them; on failure the old ones stay. */
gt_status run_recut(gt_run *r, int rows, const int *first);
/* In-process reshaping (--reshape), after a failed step or, planned, to
 * take joining ranks in at a step boundary. */
gt_status run_reshape_now(gt_run *r, bool planned);

#endif
