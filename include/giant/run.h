/* The job as a library: a program supplies its model, its data and its
 * options; Giant runs the job with its resilience (docs/resilience.md).
 *
 *   gt_run_options o;
 *   gt_run_options_init(&o);                           // then the program's own defaults, if any
 *   int rc = gt_run_parse(argc, argv, usage, my_flags, n, &o);  // --help lists the run's flags too
 *   if (rc >= 0) return rc;
 *   gt_run *run;
 *   gt_status s = gt_run_open(&o, &run);               // joins the job (giantrun's environment)
 *   if (s == GT_OK) s = gt_run_prepare(run, make_data, &me); // rank 0 makes the data, the others wait
 *   if (s == GT_OK) s = gt_run_start(run, &model);     // plans, builds, resumes from the newest checkpoint
 *   if (s == GT_OK) s = gt_run_train(run);             // trains to --steps
 *   rc = gt_run_exit_status(run, s);
 *   gt_run_destroy(run);
 *
 * What gt_run_start and gt_run_train do, in order: plan from the model's
 * annotations, --plan and the planner with the measured peak; build the
 * model and its trainer; resume from the newest committed checkpoint at
 * whatever layout it was taken; train, writing metrics (--metrics,
 * --tensorboard), evaluating (--eval-every; docs/observability.md) and
 * saving checkpoints asynchronously (--ckpt-*); watch for fail-slow ranks
 * (--failslow) and carry out the mitigation ladder's decision: rows
 * between replicas and the pipeline re-cut (--rebalance), leaving a slow
 * rank out (--reshape), or a restart from a checkpoint of the step
 * (--ckpt-dir; --ladder forces a rung); reshape in-process when a rank
 * dies (--reshape), taking the state from the peers, or rolling back to
 * the newest checkpoint where no rank left holds some of it; take back
 * ranks that rejoin; skip non-finite steps
 * (--skip-nonfinite); and end cleanly, letting the save in flight commit.
 *
 * The data is --data's token file, or rows the program gives
 * (gt_run_set_source).
 *
 * The worker's side of giantrun's protocol is here too: the exit statuses
 * below, GT_RESHAPE, GT_JOIN, GT_COORD and GT_CKPT_*. */
#ifndef GIANT_RUN_H
#define GIANT_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/data.h"
#include "giant/model.h"
#include "giant/options.h"
#include "giant/protocol.h"
#include "giant/status.h"

GT_API_BEGIN

/* A worker's exit statuses, GT_RUN_EXIT_*, are giantrun's protocol:
 * giant/protocol.h. */

/* The run's flags, each with its default (gt_run_options_init). */
typedef struct gt_run_options {
  const char *program; /* in log lines ("gpt: reshaped in ..."): argv[0]'s base name */
  /* data */
  const char *data; /* --data: the token file */
  bool documents;   /* --documents: micro-batches cut at document boundaries */
  /* training */
  int steps, batch, global_batch, seq, accum, warmup, skip_nonfinite;
  const char *optimizer, *precision;
  const char *recompute;                /* --recompute: none, attention or block (gt_recompute) */
  float lr, min_lr, clip, weight_decay; /* weight_decay < 0: the optimizer's default */
  uint64_t seed;
  /* parallelism */
  const char *plan, *schedule, *speeds;
  int chunks, bucket_kib, mem_mib, mirror_every;
  int zero; /* --zero: the ZeRO stage, -1 not given (--zero1 is --zero 1) */
  bool zero1, seq_parallel, print_plan, no_overlap, rebalance, rebalance_local, reshape;
  const char *ladder; /* --ladder: auto (the cheapest rung), or none, rows, recut, exclude, restart */
  /* the device and offloading */
  const char *device, *offload_optimizer;
  int threads, device_mem_mib, host_mem_mib, offload, offload_prefetch;
  bool update_per_layer, delayed_update;
  /* checkpoints and metrics */
  const char *ckpt_dir;
  int ckpt_every, ckpt_keep;
  const char *init_from, *init_names; /* --init-from, --init-names: the weights to start from */
  const char *metrics;
  int print_every;
  const char *tensorboard; /* --tensorboard DIR: the lead's TensorBoard event files (docs/observability.md) */
  /* the validation loss: every eval_every steps (0 never), over eval_rows
   * rows (0: 64) of eval_data, or of the last eval_split of --data, which
   * training then leaves out */
  int eval_every, eval_rows;
  const char *eval_data;
  float eval_split;
  /* fail-slow detection */
  bool failslow;
  const char *failslow_clock; /* auto, cpu or wall: how a CPU rank's compute is timed (gt_trainer_config) */
  float failslow_theta;
  int failslow_k, failslow_warmup, failslow_window, failslow_every, failslow_probe_rounds, failslow_probe_bytes;
} gt_run_options;

/* The defaults: --data data/fortunes.tok --steps 300 --batch 8 --seq 128
 * --optimizer adamw --lr 1e-3 --min-lr 1e-4 --warmup 20 --clip 1 ... */
void gt_run_options_init(gt_run_options *o);
/* The run's sections of --help. */
const char *gt_run_usage(void);
/* Parses argv into o, which holds the defaults (gt_run_options_init, then
 * any the program changes): the run's flags and the program's own (extra,
 * nextra; their defaults set by the caller too), then fills what the
 * flags leave unset from giantrun's environment (GT_CKPT_DIR,
 * GT_CKPT_EVERY, GT_CKPT_KEEP, GT_RESHAPE) and checks the names the flags
 * give (optimizer, precision, schedule, device) and that they agree. --help prints usage (the program's part) and gt_run_usage.
 * Returns -1 to go on, else the exit status: 0 after --help, 2 after an
 * error it has printed. */
int gt_run_parse(int argc, char **argv, const char *usage, const gt_opt_spec *extra, int nextra, gt_run_options *o);

/* The program's model: its layers for any layout. */
typedef struct gt_run_model {
  /* Adds the layers, with their annotations, to an empty model (Giant
   * cuts, splits and builds it). Called more than once: for the planner,
   * and again at every reshape and re-cut. */
  gt_status (*add_layers)(gt_model *m, void *user);
  /* Whether the model splits tp ways (NULL: every size is tried, and a
   * layer that cannot split says so when the model is built). */
  bool (*can_split)(int tp, void *user);
  void *user;
} gt_run_model;

typedef struct gt_run gt_run;

/* Joins the job from giantrun's environment (alone without it) and starts
 * the backend. *out is set even on failure, for gt_run_exit_status. */
gt_status gt_run_open(const gt_run_options *o, gt_run **out);
/* Rank 0 runs prepare (it makes --data, say) while the others wait; a
 * rank that joins a running job skips it. NULL prepare: a no-op. */
gt_status gt_run_prepare(gt_run *r, gt_status (*prepare)(const gt_run_options *o, void *user), void *user);
/* The training rows from the program (giant/data.h: a callback that
 * returns row i of the sample sequence) instead of --data's token file;
 * before gt_run_start. src stays the caller's, alive until gt_run_destroy.
 * Every rank gives the same rows: each replica reads its share of them. */
gt_status gt_run_set_source(gt_run *r, const gt_loader_source *src);
/* Plans, builds the model and its trainer, resumes from the newest
 * checkpoint, and starts what the options ask for. --print-plan prints
 * the plan here; gt_run_train then does nothing. */
gt_status gt_run_start(gt_run *r, const gt_run_model *model);
/* Trains to --steps, with everything above; GT_OK when training ended,
 * for this rank too (it may have been left out as slow: gt_run_trained_model is
 * then NULL). */
gt_status gt_run_train(gt_run *r);
/* After gt_run_train: the trained model, on a rank that trained to the
 * end (every rank of the final layout, which must all take part in what
 * runs it: tensor-parallel forwards are collective), else NULL. */
gt_model *gt_run_trained_model(gt_run *r);
/* This rank's place in the job now: rank 0 is the one that prints. */
int gt_run_rank(const gt_run *r);
int gt_run_pipeline_stages(const gt_run *r);
/* The exit status for the process, from how the run went and s (the last
 * call's status): one of GT_RUN_EXIT_*, or 128 + a signal that stopped
 * it. A failure's message was printed when it happened, prefixed with the
 * program's name and what the run was doing. */
int gt_run_exit_status(gt_run *r, gt_status s);
/* Waits for the save in flight, stops the threads, frees everything. NULL
 * is a no-op. */
void gt_run_destroy(gt_run *r);

GT_API_END
#endif
