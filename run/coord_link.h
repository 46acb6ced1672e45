/* --rebalance under a leader: worker rank 0's link to the job's
 * coordinator on etcd (giant/engine/coord.h). A thread of its own makes every
 * etcd call, so that a step never waits on etcd: it publishes the latest
 * report handed to it and keeps the latest decision it read. */
#ifndef GIANT_RUN_COORD_LINK_H
#define GIANT_RUN_COORD_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/engine/coord.h"
#include "giant/engine/init.h"

typedef struct run_coord_link run_coord_link;

/* Whether this job's agents lead (giantrun sets GT_COORD=leader) and it
 * has the etcd they lead on. */
bool run_coord_led(gt_job *job);
/* Reads the job's current decision (its epoch is *epoch, 0 with none:
 * what the workers start from) and starts the thread. */
gt_status run_coord_link_start(gt_job *job, run_coord_link **out, int64_t *epoch);
/* Hands a report to the thread; a newer one replaces one not yet sent. */
void run_coord_link_publish(run_coord_link *l, const gt_mitigation_report *r);
/* The latest decision the thread read: false when it has read none. */
bool run_coord_link_latest(run_coord_link *l, gt_mitigation *m);
/* Stops the thread (at most one etcd call's timeout). NULL is a no-op. */
void run_coord_link_stop(run_coord_link *l);

#endif
