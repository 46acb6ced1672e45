/* The trainer's functions for the run library and checkpoints: the rows a
 * replica takes, a step begun but not resolved, moving state into a
 * trainer cut differently, and the executors it drives. Internal to
 * libgiant (shared with the layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_OPTIM_TRAINER_ENGINE_H
#define GIANT_OPTIM_TRAINER_ENGINE_H

#include "giant/engine/trainer.h"
#include "parallel/dp_sync.h"
#include "parallel/pp_exec.h"

/* With update_per_layer: the layers whose update was done by the time the
 * last step's backward ended (the rest were finished after it). */
int gt_trainer_layers_updated_early(const gt_trainer *t);

/* ZeRO-1: true between an update and the all-gather of the updated
 * shards, so after one that failed: of the parameters, only this rank's
 * shard is current. */
bool gt_trainer_params_partial(const gt_trainer *t);

/* The pipeline executor (NULL without pipeline parallelism). */
struct gt_pp_exec *gt_trainer_pp_exec(gt_trainer *t);

/* The data-parallel gradient sync (NULL without data parallelism). */
struct gt_dp_sync *gt_trainer_dp_sync(gt_trainer *t);

/* Moves this data-parallel replica to a new share of every group micro-
 * batch from the next gt_trainer_step on: B rows at `offset` of `total`
 * (giant/data.h, gt_loader_reshare), B at most the model's B_max. Every
 * replica must call it before the same step, with shares that tile
 * 0..total; the step weighs every token alike whatever the shares. */
gt_status gt_trainer_set_rows(gt_trainer *t, int B, int offset, int total);

/* Re-cutting pipeline stages: moves everything `from` trains (parameters,
 * optimizer state, the optimizer's update count and the step index) into
 * `to`, a trainer on the same gt_dist of the same model whose layers are
 * cut into stages differently (gt_plan_cut_stages with other speeds). A
 * layer that stays on its stage is copied on each rank; one that changes
 * stage goes from the old stage's rank to the new one's, at the same data-
 * and tensor-parallel coordinates, through the pipeline communicator.
 * Collective over the job. Not with ZeRO-1, nor moving a layer that holds
 * a tied parameter (GT_EUNSUPPORTED). */
gt_status gt_trainer_move_state(gt_trainer *from, gt_trainer *to);

/* After a failed step under commit_vote: true when this rank failed in
 * the vote itself, every reduction done, so that it can still apply the
 * step. Steps are refused until gt_trainer_resolve_step. Another rank
 * that completed the vote applied it, so every rank could vote: apply it
 * where any rank did, drop it where none did. */
bool gt_trainer_step_pending(const gt_trainer *t);

/* Applies (the step index advances) or drops the pending step. Applying
 * needs no communication: under ZeRO-1 this rank's shard alone is updated
 * (gt_trainer_params_partial). */
gt_status gt_trainer_resolve_step(gt_trainer *t, bool apply);

/* Where the data stream stood when the last gt_trainer_step began: the
 * loader's next row (gt_loader_next_row) and that step's index; false
 * before the first. A step that does not finish leaves the loader past
 * its rows: this is where to restart it. */
bool gt_trainer_step_row(const gt_trainer *t, uint64_t *row, int *step);

#endif
