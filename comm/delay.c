/* Per-peer send delays: a slow link played on purpose (GT_FAULT's
 * slowlink), so that fail-slow detection can be tested on a real job. The
 * delay sits in front of every transfer plan that sends to the peer, which
 * covers both host transports (TCP and shared memory) and every operation
 * (point-to-point and the rings of the collectives) in one place. */
#include <math.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/delays.h"
#include "giant/engine/comm.h"

gt_status gt_comm_set_send_delay(gt_comm *c, int peer, double ms) {
  if (!c) return gt_errorf(GT_EINVAL, "gt_comm_set_send_delay: NULL communicator");
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return gt_errorf(GT_EINVAL, "send delay: peer %d is not another rank of this group of %d (rank %d)", peer, c->size,
                     c->rank);
  if (!(ms >= 0) || ms > 600000) return gt_errorf(GT_EINVAL, "send delay: %g ms is not in [0, 600000]", ms);
  if (c->nccl)
    return gt_errorf(GT_EUNSUPPORTED, "send delay: not available on NCCL communicators (host transports only)");
  atomic_store(&c->delay_ns[peer], (long long)llround(ms * 1e6));
  return GT_OK;
}

void gt_comm_delay_send(gt_comm *c, int peer) {
  long long ns = atomic_load(&c->delay_ns[peer]);
  if (ns <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0) {}
}
