/* gt_group on a communicator: the collectives tensor-parallel layers call. */
#include "giant/engine/comm.h"
#include "giant/log.h"
#include "giant/group.h"

static gt_comm *comm_of(gt_group *g) { return g->impl; }

/* Each collective's wall time adds to g->busy_s. */
static gt_status timed(gt_group *g, double t0, gt_status s) {
  g->busy_s += gt_now() - t0;
  return s;
}

static gt_status group_allreduce(gt_group *g, float *buf, size_t n) {
  double t0 = gt_now();
  return timed(g, t0, gt_comm_allreduce(comm_of(g), buf, n, GT_F32, GT_COMM_SUM));
}

static gt_status group_allgather(gt_group *g, const float *send, float *recv, size_t n) {
  double t0 = gt_now();
  return timed(g, t0, gt_comm_allgather(comm_of(g), send, recv, n, GT_F32));
}

static gt_status group_reduce_scatter(gt_group *g, const float *send, float *recv, size_t n) {
  double t0 = gt_now();
  return timed(g, t0, gt_comm_reduce_scatter(comm_of(g), send, recv, n, GT_F32, GT_COMM_SUM));
}

gt_status gt_comm_group_init(gt_comm *comm, gt_group *out) {
  if (!comm) return gt_errorf(GT_EINVAL, "gt_comm_group_init needs a communicator");
  out->rank = gt_comm_rank(comm);
  out->size = gt_comm_size(comm);
  out->allreduce_sum = group_allreduce;
  out->allgather = group_allgather;
  out->reduce_scatter_sum = group_reduce_scatter;
  out->impl = comm;
  out->busy_s = 0;
  return GT_OK;
}
