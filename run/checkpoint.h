/* A run's checkpoints: --ckpt-dir, --ckpt-every and --ckpt-keep (or
 * GT_CKPT_DIR, GT_CKPT_EVERY and GT_CKPT_KEEP, which giantrun sets), a
 * resume from the newest committed checkpoint, and a save every N steps. */
#ifndef GIANT_RUN_CHECKPOINT_H
#define GIANT_RUN_CHECKPOINT_H

#include "giant/ckpt.h"
#include "giant/engine/init.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/trainer.h"

typedef struct run_ckpt_args {
  const char *dir; /* NULL: no checkpoints */
  int every, keep;
  int logged; /* the step of the last save whose end was logged */
} run_ckpt_args;

/* Opens the checkpointer (NULL *out when a->dir is NULL) and resumes from
 * the newest committed checkpoint if there is one, saying on rank 0 which
 * one and how many steps were lost since the last run's progress. */
gt_status run_ckpt_start(const run_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **out);
/* The checkpointer again on another trainer (the pipeline re-cut), with
 * nothing loaded: NULL without --ckpt-dir. */
gt_status run_ckpt_rebind(const run_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **out);
/* After each step: saves every a->every steps, records progress, and on
 * the lead rank logs each save's commit with the step it was seen at. */
gt_status run_ckpt_after_step(run_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead);
/* SIGTERM (what giantrun sends to stop workers) and SIGINT no longer end
 * the process at once: training stops after the step under way and the
 * exit waits for the save in flight, which commits if every rank's shard
 * was written. giantrun's --stop-grace bounds the wait (then SIGKILL); a
 * second signal ends the process. run_ckpt_stop_signal: the signal
 * caught, 0 when none. */
void run_ckpt_catch_stop(void);
int run_ckpt_stop_signal(void);
/* After the last step: waits for the save in flight and logs its end. */
void run_ckpt_finish(run_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead);

#endif
