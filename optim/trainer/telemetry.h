/* The trainer's per-step telemetry (gt_step_telemetry in giant/metrics.h):
 * a few clock reads a step, kept out of trainer.c. */
#ifndef GIANT_OPTIM_TELEMETRY_H
#define GIANT_OPTIM_TELEMETRY_H

#include "giant/data.h"
#include "parallel/dp_sync.h"
#include "giant/metrics.h"
#include "giant/model.h"
#include "parallel/pp_exec.h"

/* At the step's start, on the thread that runs it. */
void gt_telemetry_begin(void);
/* gt_loader_next, timed into tel->data_s. */
gt_status gt_telemetry_load(gt_loader *l, gt_batch *b, gt_step_telemetry *tel);
/* Counts a micro-batch's workload. */
void gt_telemetry_add_batch(gt_step_telemetry *tel, const gt_batch *b);
/* After the step's forward and backward (begun at t0): this rank's compute
 * time (with a pipeline, the executor's busy time, its waits apart; on the
 * CPU backend, unless wall_time, the thread's CPU time since
 * gt_telemetry_begin), the rank (as launched) and the layers it holds. The
 * trainer then plays GT_FAULT's faults for the step (gt_fault_step) and adds
 * their sleeps to the compute time, since they stand for a slow device. */
void gt_telemetry_after_compute(gt_step_telemetry *tel, gt_model *m, const gt_pp_exec *pipe, double t0, bool wall_time,
                                int rank);
/* After the gradient reduction: the time it blocked. */
void gt_telemetry_after_reduce(gt_step_telemetry *tel, gt_dp_sync *sync);

#endif
