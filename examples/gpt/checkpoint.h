/* The example's checkpoints: --ckpt-dir, --ckpt-every and --ckpt-keep (or
 * GT_CKPT_DIR, GT_CKPT_EVERY and GT_CKPT_KEEP, which giantrun sets), a
 * resume from the newest committed checkpoint, and a save every N steps. */
#ifndef GIANT_EXAMPLE_GPT_CHECKPOINT_H
#define GIANT_EXAMPLE_GPT_CHECKPOINT_H

#include "giant/ckpt.h"
#include "giant/init.h"

typedef struct gpt_ckpt_args {
  const char *dir; /* NULL: no checkpoints */
  int every, keep;
  int logged; /* the step of the last save whose end was logged */
} gpt_ckpt_args;

/* Flags win; the environment fills what they leave unset. */
gt_status gpt_ckpt_args_from_env(gpt_ckpt_args *a);

/* Opens the checkpointer (NULL *out when a->dir is NULL) and resumes from
 * the newest committed checkpoint if there is one, saying on rank 0 which
 * one and how many steps were lost since the last run's progress. */
gt_status gpt_ckpt_start(const gpt_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **out);
/* The checkpointer again on another trainer (the pipeline re-cut), with
 * nothing loaded: NULL without --ckpt-dir. */
gt_status gpt_ckpt_rebind(const gpt_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **out);
/* After each step: saves every a->every steps, records progress, and on
 * the lead rank logs each save's commit with the step it was seen at. */
gt_status gpt_ckpt_after_step(gpt_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead);
/* SIGTERM (what giantrun sends to stop workers) and SIGINT no longer end
 * the process at once: training stops after the step under way and the
 * exit waits for the save in flight, which commits if every rank's shard
 * was written. giantrun's --stop-grace bounds the wait (then SIGKILL); a
 * second signal ends the process. gpt_ckpt_stop_signal: the signal
 * caught, 0 when none. */
void gpt_ckpt_catch_stop(void);
int gpt_ckpt_stop_signal(void);
/* After the last step: waits for the save in flight and logs its end. */
void gpt_ckpt_finish(gpt_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead);

#endif
