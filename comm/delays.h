/* Per-peer send delays that play a slow link, for fault injection and the
 * tests of fail-slow detection. Internal to libgiant (shared with the
 * layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_COMM_DELAYS_H
#define GIANT_COMM_DELAYS_H

#include "giant/engine/grid.h"
#include "giant/engine/comm.h"

/* Fault injection: every later transfer this rank sends to `peer` (a rank
 * of this group) first sleeps ms milliseconds, on the TCP and shared-memory
 * transports alike (not NCCL); 0 removes the delay. This is how GT_FAULT's
 * slowlink plays a slow link (docs/faults.md). */
gt_status gt_comm_set_send_delay(gt_comm *comm, int peer, double ms);

/* gt_comm_set_send_delay towards world rank world_peer, on the world
 * communicator and on every axis group that holds both ranks. */
gt_status gt_grid_set_send_delay(gt_grid *g, int world_peer, double ms);

#endif
