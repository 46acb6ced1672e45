/* The training loop: micro-batches forward and backward with gradient
 * accumulation, global-norm clipping, a learning-rate schedule, one
 * optimizer update, and metrics. */
#ifndef GIANT_TRAINER_H
#define GIANT_TRAINER_H

#include "giant/data.h"
#include "giant/metrics.h"
#include "giant/engine/model.h"
#include "giant/optim.h"

GT_API_BEGIN

typedef struct gt_trainer_config {
  gt_optim_config optim;
  gt_lr_schedule schedule;
  float grad_clip;          /* max global grad norm; 0 = no clipping */
  int grad_accum;           /* micro-batches per step, >= 1; 0: the model's pipeline(m) annotation, else 1 */
  const char *metrics_path; /* JSON lines; NULL = none */
  int print_every;          /* print a line every N steps; 0 = never */
  /* Distributed training (giant/engine/plan.h): gradients averaged over the data-
   * parallel group (bucketed, overlapping backward), optionally ZeRO-1; the
   * loss and gradient norm reduced over every group. NULL = one process. */
  struct gt_dist *dist;
  bool no_overlap; /* hold gradient reduction back until backward ends */
  /* Matrix products in fp32 (the default) or mixed bf16 with fp32 master
   * weights, accumulation and optimizer state (giant/backend.h). */
  gt_precision precision;
  /* Distributed: before each update every rank of the job votes, in one
   * all-reduce of a float, that every reduction of the step is done. When
   * a rank dies during a step, the ranks left can then agree on it
   * (gt_trainer_resolve_step): no rank applies an update the others drop. */
  bool commit_vote;
  /* A step whose loss or gradient norm is not finite changes nothing.
   * 0: it fails (training diverged). N > 0: with a loader, it runs again
   * once on the same samples, which clears a transient fault (a flipped
   * bit, a bad read); if it fails again its samples are skipped and
   * training goes on, and the step fails only once N steps in a row were
   * skipped. Every rank sees the same reduced loss and norm, so all decide
   * alike. */
  int skip_nonfinite;
  /* An offloaded model, with any layout but ZeRO-1 (or a replicated
   * region): the optimizer updates each layer on a host thread as soon as
   * its gradients are final (averaged over the replicas as the buckets
   * end; pipelined, after its last micro-batch, or the stages' sum of a
   * tied weight), while backward goes on below it (docs/offload.md). It needs grad_clip = 0 and
   * skip_nonfinite = 0: an update that has begun before the norm is known
   * cannot be scaled or taken back. The result is the same, bit for bit. */
  bool update_per_layer;
  /* An offloaded model, under the same conditions: a one-step delayed
   * update, as ZeRO-Offload's. Step t computes its gradients at parameters
   * that do not yet have step t-1's update; that update is applied layer by
   * layer on a host thread during step t's backward, from step t-1's gradients
   * held aside, with the learning rate and clipping of step t-1 (its norm
   * is known by then, so clipping and skip_nonfinite work). The parameters
   * therefore follow p[t+1] = p[t] - update(g(p[t-1])): a different
   * trajectory, which the caller opts into. A run's last step leaves its
   * gradients held: gt_trainer_flush applies them. gt_ckpt_save flushes
   * first, so a checkpoint holds everything and a run resumed from it
   * follows the run that saved it exactly (a save is a step whose update
   * is not delayed). */
  bool delayed_update;
  /* On the CPU backend, what a step's compute time is (its telemetry, which
   * fail-slow detection judges): false, the compute thread's CPU time, so
   * that the OS sharing oversubscribed cores among the job's own ranks is
   * no rank's slowness; true, wall time, which counts what other processes
   * took of the rank's cores (ranks with cores of their own: a noisy
   * neighbour is then the rank's slowness). Other backends measure the
   * device's busy time either way. */
  bool compute_wall_time;
} gt_trainer_config;

typedef struct gt_trainer gt_trainer;

gt_status gt_trainer_create(gt_model *m, const gt_trainer_config *cfg, gt_trainer **out);
/* With delayed_update: applies the gradients the last step held aside (at
 * the end of training; gt_ckpt_save calls it). Does nothing otherwise. */
gt_status gt_trainer_flush(gt_trainer *t);
void gt_trainer_destroy(gt_trainer *t);

/* One optimizer step over grad_accum micro-batches from the loader. A step
 * whose loss or gradient is not finite changes no parameter: it fails, or
 * is run again and then skipped (stats->skipped) as skip_nonfinite says. */
gt_status gt_trainer_step(gt_trainer *t, gt_loader *loader, gt_step_stats *stats);
/* The same over micro-batches the caller provides (n == grad_accum). */
gt_status gt_trainer_step_batches(gt_trainer *t, const gt_batch *batches, int n, gt_step_stats *stats);
int gt_trainer_step_index(const gt_trainer *t);
/* Resuming from a checkpoint: the index the next step takes, which fixes
 * the learning-rate schedule's position. */
void gt_trainer_set_step_index(gt_trainer *t, int step);
gt_model *gt_trainer_model(gt_trainer *t);
/* NULL for one process. */
struct gt_dist *gt_trainer_dist(gt_trainer *t);
gt_optimizer *gt_trainer_optimizer(gt_trainer *t);
/* Turns the overlap of gradient reduction with backward on or off. */
void gt_trainer_set_overlap(gt_trainer *t, bool overlap);
/* True when the last step failed on a non-finite loss or gradient norm
 * that skip_nonfinite could not get past ("training diverged"). Both are
 * reduced over the job, so every rank fails that step alike. */
bool gt_trainer_diverged(const gt_trainer *t);

GT_API_END
#endif
