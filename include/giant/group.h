/* gt_group: the collectives a layer needs from the ranks it is split across.
 *
 * Tensor-parallel layers live in core but must sum partial results across
 * ranks. Core defines this small interface; the communication layer
 * (parallel/) implements it on a communicator (gt_comm_group), so core
 * never depends on the layers above it. Buffers are device memory of the
 * model's backend; every call is blocking and collective over the group.
 */
#ifndef GIANT_GROUP_H
#define GIANT_GROUP_H

#include <stddef.h>

#include "giant/status.h"

GT_API_BEGIN

/* A job's layout: the sizes of the three axes its ranks are arranged on
 * (data, tensor and pipeline parallel), whose groups layers reduce over. */
typedef struct gt_grid_layout {
  int dp, tp, pp;
} gt_grid_layout;

typedef struct gt_group gt_group;

struct gt_group {
  int rank, size;
  /* buf[i] = sum over ranks of buf[i]. */
  gt_status (*allreduce_sum)(gt_group *g, float *buf, size_t n);
  /* recv (size*n) = every rank's send (n), in rank order. */
  gt_status (*allgather)(gt_group *g, const float *send, float *recv, size_t n);
  /* recv (n) = sum over ranks of block `rank` of send (size*n). */
  gt_status (*reduce_scatter_sum)(gt_group *g, const float *send, float *recv, size_t n);
  void *impl;
  /* Wall seconds spent in this group's collectives so far, for telemetry:
   * the step's tensor-parallel waits are the difference across a step. */
  double busy_s;
};

GT_API_END
#endif
