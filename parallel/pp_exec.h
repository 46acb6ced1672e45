/* The pipeline executor: one step's micro-batches through this rank's
 * stages, in the order of the plan's schedule (giant/engine/pipeline.h).
 */
#ifndef GIANT_PP_EXEC_H
#define GIANT_PP_EXEC_H

#include "giant/data.h"
#include "giant/engine/dist.h"
#include "giant/model.h"
#include "giant/status.h"

/* Runs one step's micro-batches through this rank's pipeline stages in the
 * order of the plan's schedule: activations go to the next stage and
 * gradients to the previous one over point-to-point transfers (one
 * communicator per link and direction, so a blocked transfer in one
 * direction never holds up the other, and receives posted ahead never hold
 * up sends: pp_links.h). Gradients accumulate in the model. */
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
/* The last run's busy time split into its forwards and its backwards: the
 * stage times a simulation of the schedule (gt_pp_simulate) takes. */
void gt_pp_exec_busy_split(const gt_pp_exec *e, double *forward_seconds, double *backward_seconds);
/* Of the last run, the time blocked receiving from each pipeline peer: the
 * previous pipeline rank's activations, the next one's gradients. */
void gt_pp_exec_peer_waits(const gt_pp_exec *e, double *prev_seconds, double *next_seconds);

#endif
