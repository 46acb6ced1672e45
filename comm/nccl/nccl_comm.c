/* The NCCL backend: communicators on CUDA devices, behind the same
 * request queue and progress thread as the host transports.
 *
 * Communicators are non-blocking (config.blocking = 0): every NCCL call may
 * return ncclInProgress, and we poll ncclCommGetAsyncError until it settles,
 * against a deadline and the abort flag. A running collective is polled the
 * same way (cudaStreamQuery plus the async error), so a dead peer or an
 * abort ends the wait: the progress thread then calls ncclCommAbort, the
 * only thread that touches the NCCL communicator. The unique id travels
 * through the store; sub-groups come from ncclCommSplit.
 *
 * Buffers are device pointers on the backend's device. Collectives run on a
 * stream of their own, so they overlap later compute, and are ordered after
 * the compute that produced their input: when an operation is started, in
 * the caller's thread, an event is recorded on the backend's compute stream
 * (gt_comm_nccl_prepare), and the NCCL stream waits for it before the NCCL
 * call. The operation therefore sees every kernel queued before it was
 * started, and writes no buffer those kernels still read. Work queued on
 * another stream (the copy stream) is the caller's to order onto the
 * compute stream first. In the other direction no event is needed: a
 * request is done only once cudaStreamQuery reported the NCCL stream idle,
 * so kernels queued after gt_comm_wait returns read finished results.
 * Events come from a per-communicator pool, and go back to it when the
 * request ends.
 *
 * Host buffers: the control plane (a checkpoint's commit flag, the step's
 * commit vote, fail-slow telemetry, a reshape's agreement) exchanges a few
 * floats in host memory over the same world communicator, and an offloaded
 * model's gradients and parameters are host memory that data parallelism
 * reduces and gathers. NCCL reads only device memory, so such a buffer is
 * staged through a device buffer of the communicator's own, on its stream:
 * copied in before the operation and out after it, in pieces of at most
 * 16 MiB of staging (comm/stage.h). Only the progress thread runs
 * operations, one at a time, so one staging buffer serves them all. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/stage.h"
#include "core/cuda/handles.h"
#include "giant/log.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/store.h"
#include "core/backend_engine.h"

struct nccl_state {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaStream_t compute; /* the backend's, which inputs are produced on */
  int device;
  float *scratch; /* one float for barriers */
  void *stage;    /* host buffers' device copies (progress thread only) */
  size_t stage_bytes;
  /* Idle events, reused: callers' threads take them, the progress thread
   * gives them back. */
  pthread_mutex_t pool_mu;
  cudaEvent_t *pool;
  int npool, pool_cap;
};

static gt_status nccl_err(ncclResult_t r, const char *what) {
  return gt_errorf(r == ncclRemoteError || r == ncclSystemError ? GT_ECONN : GT_EBACKEND, "%s: NCCL error %d (%s)",
                   what, (int)r, ncclGetErrorString(r));
}

static gt_status cuda_err(cudaError_t e, const char *what) {
  return gt_errorf(GT_EBACKEND, "%s: CUDA error %d (%s)", what, (int)e, cudaGetErrorString(e));
}

static void nap(void) {
  struct timespec ts = {0, 50000};
  nanosleep(&ts, NULL);
}

/* Waits for a non-blocking NCCL call on comm to settle. */
static gt_status settle(gt_comm *c, ncclComm_t comm, ncclResult_t r, double deadline, const char *what) {
  if (r != ncclSuccess && r != ncclInProgress) return nccl_err(r, what);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return nccl_err(q, what);
    if (state == ncclSuccess) return GT_OK;
    if (state != ncclInProgress) return nccl_err(state, what);
    if (c && atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
    if (gt_now() > deadline) return gt_errorf(GT_ETIMEDOUT, "%s: timed out", what);
    nap();
  }
}

static void nccl_teardown(nccl_state *s, bool abort) {
  if (!s) return;
  if (s->comm) {
    if (abort)
      ncclCommAbort(s->comm);
    else
      ncclCommDestroy(s->comm);
    s->comm = NULL;
  }
  if (s->scratch) cudaFree(s->scratch);
  if (s->stage) cudaFree(s->stage);
  s->stage = NULL;
  s->stage_bytes = 0;
  if (s->stream) cudaStreamDestroy(s->stream);
  s->scratch = NULL;
  s->stream = NULL;
  for (int i = 0; i < s->npool; i++) cudaEventDestroy(s->pool[i]);
  free(s->pool);
  s->pool = NULL;
  s->npool = s->pool_cap = 0;
}

static gt_status state_create(gt_comm *c, nccl_state **out) {
  nccl_state *s = calloc(1, sizeof *s);
  if (!s) return gt_errorf(GT_ENOMEM, "out of memory");
  pthread_mutex_init(&s->pool_mu, NULL);
  s->device = c->backend ? gt_backend_device(c->backend) : 0;
  s->compute = (cudaStream_t)gt_cuda_stream_handle(c->backend, NULL);
  cudaError_t e = cudaSetDevice(s->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&s->scratch, sizeof(float));
  if (e != cudaSuccess) {
    nccl_teardown(s, false);
    pthread_mutex_destroy(&s->pool_mu);
    free(s);
    return cuda_err(e, "preparing the NCCL communicator's stream");
  }
  *out = s;
  return GT_OK;
}

static ncclConfig_t make_config(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

gt_status gt_comm_nccl_init(gt_comm *c, double deadline) {
  GT_TRY(state_create(c, &c->nc));
  nccl_state *s = c->nc;
  char key[320];
  gt_comm_key(c, key, sizeof key, "nccl_id");
  ncclUniqueId id;
  gt_status st = GT_OK;
  if (c->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    st = r == ncclSuccess ? gt_store_set(c->store, key, &id, sizeof id) : nccl_err(r, "ncclGetUniqueId");
  } else {
    void *v = NULL;
    size_t len = 0;
    int ms = (int)((deadline - gt_now()) * 1000);
    st = gt_store_get(c->store, key, &v, &len, ms > 0 ? ms : 0);
    if (st == GT_OK && len != sizeof id)
      st = gt_errorf(GT_EFORMAT, "NCCL unique id in the store has %zu bytes, expected %zu", len, sizeof id);
    if (st == GT_OK) memcpy(&id, v, sizeof id);
    free(v);
  }
  if (st != GT_OK) return st;
  ncclConfig_t cfg = make_config();
  ncclResult_t r = ncclCommInitRankConfig(&s->comm, c->size, id, c->rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    s->comm = NULL;
    return nccl_err(r, "ncclCommInitRankConfig");
  }
  st = settle(NULL, s->comm, r, deadline, "forming the NCCL communicator");
  if (st != GT_OK) {
    ncclCommAbort(s->comm);
    s->comm = NULL;
  }
  return st;
}

gt_status gt_comm_nccl_split(gt_comm *p, int color, int key, gt_comm **out) {
  *out = NULL;
  pthread_mutex_lock(&p->mu);
  bool busy = p->head != NULL;
  pthread_mutex_unlock(&p->mu);
  if (busy) return gt_errorf(GT_ESTATE, "split: finish the communicator's pending operations first");
  if (atomic_load(&p->aborted) || !p->nc->comm) return gt_comm_aborted_status(p);
  cudaSetDevice(p->nc->device);
  ncclComm_t nc = NULL;
  ncclConfig_t cfg = make_config();
  double deadline = gt_now() + p->init_timeout_ms / 1000.0;
  ncclResult_t r = ncclCommSplit(p->nc->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg);
  /* The split is settled on the parent; the child exists only for a color. */
  gt_status st = settle(NULL, p->nc->comm, r, deadline, "ncclCommSplit");
  if (st == GT_OK && nc) st = settle(NULL, nc, ncclSuccess, deadline, "ncclCommSplit (child)");
  if (st != GT_OK || !nc) {
    if (nc) ncclCommAbort(nc);
    return st;
  }
  int rank = 0, size = 0;
  ncclCommUserRank(nc, &rank);
  ncclCommCount(nc, &size);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s/split%d", p->prefix, color);
  gt_comm_config cc = p->cfg;
  cc.store = p->store;
  cc.prefix = prefix;
  cc.rank = rank;
  cc.size = size;
  gt_comm *c = NULL;
  st = gt_comm_alloc(&cc, p->secret, &c);
  if (st != GT_OK) {
    ncclCommAbort(nc);
    return st;
  }
  c->nccl = true;
  c->op_timeout = p->op_timeout;
  c->init_timeout_ms = p->init_timeout_ms;
  st = state_create(c, &c->nc);
  if (st == GT_OK) {
    c->nc->comm = nc;
    st = gt_comm_start(c);
  } else {
    ncclCommAbort(nc);
  }
  if (st != GT_OK) {
    gt_comm_destroy(c);
    return st;
  }
  *out = c;
  return GT_OK;
}

static gt_status dtype_of(gt_dtype t, ncclDataType_t *d) {
  if (t == GT_F32)
    *d = ncclFloat32;
  else if (t == GT_BF16)
    *d = ncclBfloat16;
  else
    return gt_errorf(GT_EINVAL, "NCCL: dtype %s not supported", gt_dtype_name(t));
  return GT_OK;
}

/* An idle event from the pool, or a new one on the current device. */
static gt_status event_take(nccl_state *s, cudaEvent_t *ev) {
  pthread_mutex_lock(&s->pool_mu);
  bool have = s->npool > 0;
  if (have) *ev = s->pool[--s->npool];
  pthread_mutex_unlock(&s->pool_mu);
  if (have) return GT_OK;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
  return e == cudaSuccess ? GT_OK : cuda_err(e, "creating the event that orders an NCCL operation after compute");
}

static void event_give(nccl_state *s, cudaEvent_t ev) {
  pthread_mutex_lock(&s->pool_mu);
  if (s->npool == s->pool_cap) {
    int cap = s->pool_cap ? 2 * s->pool_cap : 8;
    cudaEvent_t *p = realloc(s->pool, (size_t)cap * sizeof *p);
    if (p) {
      s->pool = p;
      s->pool_cap = cap;
    }
  }
  if (s->npool < s->pool_cap) {
    s->pool[s->npool++] = ev;
    ev = NULL;
  }
  pthread_mutex_unlock(&s->pool_mu);
  if (ev) cudaEventDestroy(ev); /* no room to keep it */
}

gt_status gt_comm_nccl_prepare(gt_comm *c, gt_comm_req *r) {
  nccl_state *s = c->nc;
  r->ready = NULL;
  if (!s || !s->compute) return GT_OK;
  /* Events belong to a device: bind the caller's thread to the
   * communicator's for the record, and give the thread its own back. */
  int prev = -1;
  cudaGetDevice(&prev);
  cudaError_t e = prev == s->device ? cudaSuccess : cudaSetDevice(s->device);
  if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice before an NCCL operation");
  cudaEvent_t ev = NULL;
  gt_status st = event_take(s, &ev);
  if (st == GT_OK) {
    e = cudaEventRecord(ev, s->compute);
    if (e == cudaSuccess) {
      r->ready = ev;
    } else {
      event_give(s, ev);
      st = cuda_err(
          e, "recording the compute stream's progress before an NCCL operation (an earlier kernel may have failed)");
    }
  }
  if (prev >= 0 && prev != s->device) cudaSetDevice(prev);
  return st;
}

void gt_comm_nccl_release(gt_comm *c, gt_comm_req *r) {
  if (!r->ready || !c->nc) return;
  event_give(c->nc, (cudaEvent_t)r->ready);
  r->ready = NULL;
}

/* Waits for the stream, watching for peer errors, abort and the deadline. */
static gt_status finish(gt_comm *c, double deadline) {
  nccl_state *s = c->nc;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s->stream);
    if (e == cudaSuccess) return GT_OK;
    if (e != cudaErrorNotReady) return cuda_err(e, "NCCL operation");
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(s->comm, &state);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_err(state, "NCCL operation");
    if (atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
    if (gt_now() > deadline)
      return gt_errorf(
          GT_ETIMEDOUT,
          "NCCL operation did not finish before the operation timeout (%.1f s): a peer is stopped, hung or far behind",
          c->op_timeout);
    nap();
  }
}

static size_t dtype_bytes(ncclDataType_t dt) { return dt == ncclBfloat16 ? 2 : 4; }

/* Whether p is memory the host reads and NCCL cannot: pageable memory the
 * CUDA runtime does not know, or pinned host memory. */
static bool host_memory(const void *p) {
  if (!p) return false;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError(); /* an unknown pointer is host memory, not a failure */
    return true;
  }
  return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

static gt_status stage_reserve(nccl_state *s, size_t need) {
  if (need <= s->stage_bytes) return GT_OK;
  if (s->stage) cudaFree(s->stage);
  s->stage = NULL;
  s->stage_bytes = 0;
  cudaError_t ce = cudaMalloc(&s->stage, need);
  if (ce != cudaSuccess) return cuda_err(ce, "device memory to stage a host buffer for NCCL");
  s->stage_bytes = need;
  return GT_OK;
}

/* One of a piece's copies on the stream, between the bases it is relative
 * to; the runtime tells host from device memory (unified addressing). Row
 * by row: a reduce-scatter's rows lie a rank's block apart, which for a
 * large model's gradients passes the pitch cudaMemcpy2D allows (2 GiB),
 * and there are only as many rows as ranks. */
static gt_status copy(nccl_state *s, char *dst, const char *src, const gt_stage_copy *c, const char *what) {
  for (size_t r = 0; r < c->rows && c->width; r++) {
    cudaError_t ce = cudaMemcpyAsync(dst + c->dst + r * c->dpitch, src + c->src + r * c->spitch, c->width,
                                     cudaMemcpyDefault, s->stream);
    if (ce != cudaSuccess) return cuda_err(ce, what);
  }
  return GT_OK;
}

/* One NCCL operation of q's kind on buffers `in` and `out`: `n` elements
 * (a rank's block for the collectives, the message sent point to point)
 * and `n2` received point to point. A point-to-point part of no elements
 * is left out, on every side alike, so that the peers' calls pair up. */
static ncclResult_t issue(nccl_state *s, const gt_comm_req *q, ncclDataType_t dt, const void *in, void *out, size_t n,
                          size_t n2) {
  ncclRedOp_t op = q->op == GT_COMM_AVG ? ncclAvg : ncclSum;
  ncclResult_t r = ncclSuccess;
  switch (q->kind) {
    case OP_ALLREDUCE: return ncclAllReduce(in, out, n, dt, op, s->comm, s->stream);
    case OP_REDUCE_SCATTER: return ncclReduceScatter(in, out, n, dt, op, s->comm, s->stream);
    case OP_ALLGATHER: return ncclAllGather(in, out, n, dt, s->comm, s->stream);
    case OP_REDUCE: return ncclReduce(in, out, n, dt, op, q->peer, s->comm, s->stream);
    case OP_BROADCAST: return ncclBroadcast(in, out, n, dt, q->peer, s->comm, s->stream);
    case OP_SEND: return n ? ncclSend(in, n, dt, q->peer, s->comm, s->stream) : ncclSuccess;
    case OP_RECV: return n2 ? ncclRecv(out, n2, dt, q->peer, s->comm, s->stream) : ncclSuccess;
    case OP_SENDRECV:
      /* One group: NCCL runs both halves together, as we do on the host. */
      r = ncclGroupStart();
      if (r == ncclSuccess && n) r = ncclSend(in, n, dt, q->peer, s->comm, s->stream);
      if ((r == ncclSuccess || r == ncclInProgress) && n2) r = ncclRecv(out, n2, dt, q->peer2, s->comm, s->stream);
      if (r == ncclSuccess || r == ncclInProgress) r = ncclGroupEnd();
      return r;
    case OP_BARRIER: return ncclAllReduce(s->scratch, s->scratch, 1, ncclFloat32, ncclSum, s->comm, s->stream);
  }
  return ncclInvalidArgument;
}

/* The NCCL stream waits for the input's producers, queued on the compute
 * stream before the operation was started. */
static gt_status wait_ready(nccl_state *s, const gt_comm_req *q) {
  if (!q->ready) return GT_OK;
  cudaError_t ce = cudaStreamWaitEvent(s->stream, (cudaEvent_t)q->ready, 0);
  return ce == cudaSuccess ? GT_OK : cuda_err(ce, "ordering the NCCL stream after the compute stream");
}

/* Whether q's input and its output are host memory, which NCCL cannot
 * read. */
static void host_sides(const gt_comm_req *q, size_t e, int size, bool *host_in, bool *host_out) {
  size_t in_bytes, out_bytes;
  gt_stage_extent(q, e, size, &in_bytes, &out_bytes);
  *host_in = in_bytes && host_memory(gt_stage_input(q));
  *host_out = gt_stage_in_place(q) ? *host_in : out_bytes && host_memory(q->buf);
}

/* q with host memory on either side, piece by piece through the staging
 * (comm/stage.h). A piece's result is copied out only once its operation
 * is done: a copy to pageable memory blocks the host until the stream gets
 * there, where a dead peer would hold it past every deadline. */
static gt_status run_staged(gt_comm *c, gt_comm_req *q, ncclDataType_t dt, bool host_in, bool host_out,
                            double deadline) {
  nccl_state *s = c->nc;
  gt_stage_plan p;
  gt_stage_plan_make(q, dtype_bytes(dt), c->size, c->rank, host_in, host_out, GT_STAGE_LIMIT, &p);
  GT_TRY(stage_reserve(s, p.bytes));
  char *base = s->stage, *dst = q->buf;
  const char *src = gt_stage_input(q);
  /* Input from device memory (a reduce-scatter's, staged for its layout)
   * is the compute stream's to produce: wait first. Host input is ready as
   * the host has it: copy it in first, then wait. */
  bool ordered = !host_in;
  if (ordered) GT_TRY(wait_ready(s, q));
  for (size_t k = 0; k < p.pieces; k++) {
    gt_stage_piece pc;
    gt_stage_piece_at(&p, k, &pc);
    GT_TRY(copy(s, base, src, &pc.in, "staging a host buffer for NCCL"));
    if (!ordered) {
      GT_TRY(wait_ready(s, q));
      ordered = true;
    }
    const void *in = pc.from.staged ? base + pc.from.off : src ? src + pc.from.off : NULL;
    void *out = pc.to.staged ? base + pc.to.off : dst ? dst + pc.to.off : NULL;
    GT_TRY(settle(c, s->comm, issue(s, q, dt, in, out, pc.n, pc.n2), deadline, "issuing the NCCL operation"));
    GT_TRY(finish(c, deadline));
    if (pc.out.width) {
      GT_TRY(copy(s, dst, base, &pc.out, "copying an NCCL result back to a host buffer"));
      GT_TRY(finish(c, deadline));
    }
  }
  return GT_OK;
}

gt_status gt_comm_nccl_execute(gt_comm *c, gt_comm_req *q, double deadline) {
  nccl_state *s = c->nc;
  if (!s->comm) return gt_comm_aborted_status(c);
  cudaError_t ce = cudaSetDevice(s->device);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaSetDevice");
  ncclDataType_t dt = ncclFloat32;
  GT_TRY(dtype_of(q->dtype, &dt));
  bool host_in = false, host_out = false;
  host_sides(q, dtype_bytes(dt), c->size, &host_in, &host_out);
  gt_status st = GT_OK;
  if (host_in || host_out) {
    st = run_staged(c, q, dt, host_in, host_out, deadline);
  } else {
    st = wait_ready(s, q);
    if (st == GT_OK)
      st = settle(c, s->comm, issue(s, q, dt, gt_stage_input(q), q->buf, gt_stage_sent(q), gt_stage_received(q)),
                  deadline, "issuing the NCCL operation");
    if (st == GT_OK) st = finish(c, deadline);
  }
  if (st != GT_OK && s->comm) {
    /* A failed or abandoned NCCL communicator cannot be reused, and the
     * peers may be inside the operation: fail the group, not only this
     * rank. */
    ncclCommAbort(s->comm);
    s->comm = NULL;
  }
  return st;
}

/* Other threads only raise the flag; the progress thread, which alone
 * calls into this NCCL communicator, sees it within microseconds and
 * aborts the communicator itself. */
void gt_comm_nccl_abort(gt_comm *c) { (void)c; }

void gt_comm_nccl_destroy(gt_comm *c) {
  if (!c->nc) return;
  cudaSetDevice(c->nc->device);
  nccl_teardown(c->nc, atomic_load(&c->aborted) != 0);
  pthread_mutex_destroy(&c->nc->pool_mu);
  free(c->nc);
  c->nc = NULL;
}
