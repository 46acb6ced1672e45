/* gt_group on a communicator: the collectives tensor-parallel layers call. */
#include "giant/comm.h"

static gt_comm *comm_of(gt_group *g) { return g->impl; }

static gt_status group_allreduce(gt_group *g, float *buf, size_t n) {
  return gt_comm_allreduce(comm_of(g), buf, n, GT_F32, GT_COMM_SUM);
}

static gt_status group_allgather(gt_group *g, const float *send, float *recv, size_t n) {
  return gt_comm_allgather(comm_of(g), send, recv, n, GT_F32);
}

static gt_status group_reduce_scatter(gt_group *g, const float *send, float *recv, size_t n) {
  return gt_comm_reduce_scatter(comm_of(g), send, recv, n, GT_F32, GT_COMM_SUM);
}

gt_status gt_comm_group_init(gt_comm *comm, gt_group *out) {
  if (!comm) return gt_errorf(GT_EINVAL, "gt_comm_group_init needs a communicator");
  out->rank = gt_comm_rank(comm);
  out->size = gt_comm_size(comm);
  out->allreduce_sum = group_allreduce;
  out->allgather = group_allgather;
  out->reduce_scatter_sum = group_reduce_scatter;
  out->impl = comm;
  return GT_OK;
}
