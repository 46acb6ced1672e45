/* --rebalance: data-parallel replicas trade rows of every micro-batch by
 * their measured speed while training (resilience/mitigate/rebalance.h decides,
 * gt_trainer_set_rows applies). docs/failslow.md, "Mitigation:
 * rebalancing". */
#ifndef GIANT_RUN_REBALANCE_H
#define GIANT_RUN_REBALANCE_H

#include <stdbool.h>

#include "giant/engine/dist.h"
#include "resilience/detect/failslow.h"
#include "giant/engine/init.h"
#include "resilience/mitigate/rebalance.h"
#include "giant/engine/trainer.h"
#include "giant/engine/plan.h"

typedef struct run_rebalance run_rebalance;

/* shares: every replica's rows of each micro-batch now (copied); cap: the
 * most one replica may take, what the model's activations hold. When the
 * job's agents lead (giantrun) and local is false, the leader decides. */
gt_status run_rebalance_create(const gt_plan *plan, gt_dist *dist, gt_backend *be, const int *shares, int cap,
                               gt_job *job, bool local, run_rebalance **out);
void run_rebalance_destroy(run_rebalance *r);
/* After every step, on every rank: gathers the step's telemetry and, once
 * a window of steps at the current shares is in, decides (or, under a
 * leader, rank 0 reports to it, and every rank applies its decisions);
 * new shares take effect at the next step on every rank alike. The lead
 * prints a line when they change. With the fail-slow monitor running
 * (fs_report not NULL) its gathered telemetry is used instead of a gather
 * of its own (steps it did not gather are skipped). urge: the ladder chose
 * rows or a re-cut for a rank the monitor flagged this step; that, or a
 * rank it cleared, is acted on at the next change proposed, without
 * waiting for PERSIST decisions to agree: the detector has already
 * weighed the evidence. */
gt_status run_rebalance_after_step(run_rebalance *r, gt_trainer *tr, const gt_step_stats *st,
                                   const gt_failslow_report *fs_report, bool urge, bool lead);
/* Pipeline layouts (not ZeRO-1, not interleaved): also judge the stage cut
 * by measured speed, for micro-batches of B rows of T tokens. Every rank
 * decides alike on the same window. */
void run_rebalance_enable_recut(run_rebalance *r, int B, int T);
/* Whether the stage cut is judged (run_rebalance_enable_recut). */
bool run_rebalance_recut_enabled(const run_rebalance *r);
/* Whether a re-cut was decided (by the ranks, or by the job's leader):
 * then first gets the new cut, first[s] the first layer of stage s and
 * first[pp] the layers, once. The caller rebuilds the model and trainer
 * for it (gt_model_set_stage_cut, gt_trainer_move_state). */
bool run_rebalance_take_recut(run_rebalance *r, int *first);

#endif
