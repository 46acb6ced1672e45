/* The collectives as transfer plans over a ring (or a chain), run by the
 * communicator's transport.
 *
 * All-reduce is a reduce-scatter followed by an all-gather around the ring
 * (rank r sends to r+1, receives from r-1), each moving one chunk per step;
 * the plan lets a received piece be forwarded as soon as it is reduced, so
 * sending, receiving and reducing overlap. Two ranks on shared memory take
 * a shorter path (gt_comm_shm_allreduce2) that skips the ring's extra
 * copies. Broadcast is a chain from the root, forwarded piece by piece. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "giant/engine/comm.h"

/* The same rounding as gt_f32_to_bf16, inlined so the loop vectorizes. */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

void gt_comm_reduce(gt_dtype t, void *dst, const void *a, const void *b, size_t n) {
  if (t == GT_F32) {
    float *d = dst;
    const float *x = a, *y = b;
    for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
  } else {
    uint16_t *d = dst;
    const uint16_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++) d[i] = to_bf16(from_bf16(x[i]) + from_bf16(y[i]));
  }
}

void gt_comm_reduce2(gt_dtype t, void *dst, void *dst2, const void *b, size_t n) {
  /* Summed into dst2, then copied to dst, in blocks that stay in L1: the
   * loops vectorize with no aliasing checks to fail. */
  size_t es = gt_dtype_size(t), blk = 16384 / es;
  for (size_t o = 0; o < n; o += blk) {
    size_t m = n - o < blk ? n - o : blk;
    char *d = (char *)dst + o * es, *d2 = (char *)dst2 + o * es;
    gt_comm_reduce(t, d2, d, (const char *)b + o * es, m);
    gt_comm_copy(d, d2, m * es);
  }
}

static void divide(gt_dtype t, void *buf, size_t n, int by) {
  if (t == GT_F32) {
    float *d = buf;
    for (size_t i = 0; i < n; i++) d[i] /= (float)by;
  } else {
    uint16_t *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = to_bf16(from_bf16(d[i]) / (float)by);
  }
}

/* Chunk c of n over count elements: the first count % n chunks get one more. */
static size_t chunk_off(size_t count, int n, int c) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return (size_t)c * base + ((size_t)c < rem ? (size_t)c : rem);
}
static size_t chunk_len(size_t count, int n, int c) {
  return count / (size_t)n + ((size_t)c < count % (size_t)n ? 1 : 0);
}
static int mod(int a, int n) { return ((a % n) + n) % n; }

static gt_status run(gt_comm *c, plan *p, double deadline) {
  if (p->tx_peer >= 0) gt_comm_delay_send(c, p->tx_peer);
  if (p->tx_peer >= 0) p->tx_seq = c->tx_seq[p->tx_peer]++;
  if (p->rx_peer >= 0) p->rx_seq = c->rx_seq[p->rx_peer]++;
  return c->transport == GT_COMM_SHM ? gt_comm_run_shm(c, p, deadline) : gt_comm_run_tcp(c, p, deadline);
}

static gt_status allreduce(gt_comm *c, char *buf, size_t count, gt_dtype t, double deadline) {
  int n = c->size, r = c->rank;
  size_t es = gt_dtype_size(t);
  int steps = 2 * (n - 1);
  plan_step tx[2 * 64], rx[2 * 64];
  plan_step *ptx = tx, *prx = rx;
  if (steps > 2 * 64) {
    ptx = malloc(sizeof *ptx * (size_t)steps);
    prx = malloc(sizeof *prx * (size_t)steps);
    if (!ptx || !prx) {
      free(ptx == tx ? NULL : ptx);
      free(prx == rx ? NULL : prx);
      return gt_errorf(GT_ENOMEM, "out of memory for a plan of %d steps", steps);
    }
  }
  for (int s = 0; s < n - 1; s++) {
    int cs = mod(r - s, n), cr = mod(r - s - 1, n);
    ptx[s] = (plan_step){buf + chunk_off(count, n, cs) * es, NULL, chunk_len(count, n, cs) * es};
    char *d = buf + chunk_off(count, n, cr) * es;
    prx[s] = (plan_step){d, d, chunk_len(count, n, cr) * es};
  }
  for (int s = 0; s < n - 1; s++) {
    int cs = mod(r + 1 - s, n), cr = mod(r - s, n);
    ptx[n - 1 + s] = (plan_step){buf + chunk_off(count, n, cs) * es, NULL, chunk_len(count, n, cs) * es};
    prx[n - 1 + s] = (plan_step){buf + chunk_off(count, n, cr) * es, NULL, chunk_len(count, n, cr) * es};
  }
  plan p = {.tx_peer = mod(r + 1, n),
            .rx_peer = mod(r - 1, n),
            .ntx = steps,
            .nrx = steps,
            .tx = ptx,
            .rx = prx,
            .dep = 1,
            .dtype = t};
  gt_status st = run(c, &p, deadline);
  if (ptx != tx) {
    free(ptx);
    free(prx);
  }
  return st;
}

static gt_status reduce_scatter(gt_comm *c, const char *send, char *recv, size_t count, gt_dtype t, double deadline) {
  int n = c->size, r = c->rank;
  size_t es = gt_dtype_size(t), blk = count * es;
  char *work = malloc(blk * (size_t)n);
  plan_step *tx = malloc(sizeof *tx * (size_t)(n - 1)), *rx = malloc(sizeof *rx * (size_t)(n - 1));
  if (!work || !tx || !rx) {
    free(work);
    free(tx);
    free(rx);
    return gt_errorf(GT_ENOMEM, "out of memory for a reduce-scatter of %zu bytes", blk * (size_t)n);
  }
  for (int s = 0; s < n - 1; s++) {
    int cs = mod(r - s - 1, n), cr = mod(r - s - 2, n);
    tx[s] = (plan_step){(s == 0 ? (char *)send : work) + (size_t)cs * blk, NULL, blk};
    rx[s] = (plan_step){s == n - 2 ? recv : work + (size_t)cr * blk, send + (size_t)cr * blk, blk};
  }
  plan p = {.tx_peer = mod(r + 1, n),
            .rx_peer = mod(r - 1, n),
            .ntx = n - 1,
            .nrx = n - 1,
            .tx = tx,
            .rx = rx,
            .dep = 1,
            .dtype = t};
  gt_status st = run(c, &p, deadline);
  free(work);
  free(tx);
  free(rx);
  return st;
}

/* One link of a chain along the ring: the rank at position pos (0: the
 * chain's start) receives rx from the one before it, unless it starts the
 * chain, and sends tx to the one after it, unless it ends it (pos n - 1);
 * each piece goes on as soon as it has arrived (dep 0). */
static plan chain(const gt_comm *c, int pos, plan_step *tx, plan_step *rx, gt_dtype t) {
  int n = c->size;
  plan p = {.tx_peer = pos < n - 1 ? mod(c->rank + 1, n) : -1,
            .rx_peer = pos > 0 ? mod(c->rank - 1, n) : -1,
            .tx = tx,
            .rx = rx,
            .dep = pos > 0 ? 0 : -1,
            .dtype = t};
  p.ntx = p.tx_peer >= 0;
  p.nrx = p.rx_peer >= 0;
  return p;
}

/* A chain along the ring ending at root: root + 1 sends its own, each next
 * rank receives, adds its own and passes the sum on, piece by piece as it
 * arrives (dep 0), and root adds its own last. */
static gt_status reduce(gt_comm *c, const char *send, char *recv, size_t count, gt_dtype t, int root, double deadline) {
  int n = c->size, pos = mod(c->rank - root - 1, n);
  size_t bytes = count * gt_dtype_size(t);
  char *work = pos > 0 && pos < n - 1 ? malloc(bytes) : NULL;
  if (pos > 0 && pos < n - 1 && !work) return gt_errorf(GT_ENOMEM, "out of memory for a reduce of %zu bytes", bytes);
  char *sum = pos == n - 1 ? recv : work; /* where this rank's partial sum goes */
  plan_step tx = {pos == 0 ? (char *)send : work, NULL, bytes}, rx = {sum, send, bytes};
  plan p = chain(c, pos, &tx, &rx, t);
  gt_status st = run(c, &p, deadline);
  free(work);
  return st;
}

static gt_status allgather(gt_comm *c, const char *send, char *recv, size_t count, gt_dtype t, double deadline) {
  int n = c->size, r = c->rank;
  size_t blk = count * gt_dtype_size(t);
  if (send != recv + (size_t)r * blk) memmove(recv + (size_t)r * blk, send, blk);
  if (n == 1) return GT_OK;
  plan_step *tx = malloc(sizeof *tx * (size_t)(n - 1)), *rx = malloc(sizeof *rx * (size_t)(n - 1));
  if (!tx || !rx) {
    free(tx);
    free(rx);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  for (int s = 0; s < n - 1; s++) {
    tx[s] = (plan_step){recv + (size_t)mod(r - s, n) * blk, NULL, blk};
    rx[s] = (plan_step){recv + (size_t)mod(r - s - 1, n) * blk, NULL, blk};
  }
  plan p = {.tx_peer = mod(r + 1, n),
            .rx_peer = mod(r - 1, n),
            .ntx = n - 1,
            .nrx = n - 1,
            .tx = tx,
            .rx = rx,
            .dep = 1,
            .dtype = t};
  gt_status st = run(c, &p, deadline);
  free(tx);
  free(rx);
  return st;
}

static gt_status broadcast(gt_comm *c, char *buf, size_t bytes, int root, gt_dtype t, double deadline) {
  int n = c->size, pos = mod(c->rank - root, n);
  plan_step tx = {buf, NULL, bytes}, rx = {buf, NULL, bytes};
  plan p = chain(c, pos, &tx, &rx, t);
  return run(c, &p, deadline);
}

gt_status gt_comm_execute(gt_comm *c, gt_comm_req *q, double deadline) {
  size_t es = gt_dtype_size(q->dtype);
  int n = c->size;
  switch (q->kind) {
    case OP_ALLREDUCE:
      if (q->count == 0) return GT_OK;
      if (n == 2 && c->transport == GT_COMM_SHM) {
        gt_comm_delay_send(c, 1 - c->rank);
        GT_TRY(gt_comm_shm_allreduce2(c, q->buf, q->count, q->dtype, deadline));
      } else if (c->hier) {
        GT_TRY(gt_comm_hier_allreduce(c, q->buf, q->count, q->dtype));
      } else if (n > 1)
        GT_TRY(allreduce(c, q->buf, q->count, q->dtype, deadline));
      if (q->op == GT_COMM_AVG && n > 1) divide(q->dtype, q->buf, q->count, n);
      return GT_OK;
    case OP_REDUCE_SCATTER:
      if (q->count == 0) return GT_OK;
      if (n == 1)
        memmove(q->buf, q->src, q->count * es);
      else
        GT_TRY(reduce_scatter(c, q->src, q->buf, q->count, q->dtype, deadline));
      if (q->op == GT_COMM_AVG && n > 1) divide(q->dtype, q->buf, q->count, n);
      return GT_OK;
    case OP_REDUCE:
      if (q->count == 0) return GT_OK;
      if (n == 1) {
        if (q->buf != q->src) memmove(q->buf, q->src, q->count * es);
      } else {
        GT_TRY(reduce(c, q->src, q->buf, q->count, q->dtype, q->peer, deadline));
      }
      if (q->op == GT_COMM_AVG && n > 1 && c->rank == q->peer) divide(q->dtype, q->buf, q->count, n);
      return GT_OK;
    case OP_ALLGATHER:
      if (q->count == 0) return GT_OK;
      return allgather(c, q->src, q->buf, q->count, q->dtype, deadline);
    case OP_BROADCAST:
      if (q->count == 0 || n == 1) return GT_OK;
      return broadcast(c, q->buf, q->count * es, q->peer, q->dtype, deadline);
    case OP_SEND: {
      plan_step tx = {(char *)q->src, NULL, q->count * es};
      plan p = {.tx_peer = q->peer, .rx_peer = -1, .ntx = 1, .tx = &tx, .dep = -1, .dtype = q->dtype};
      return run(c, &p, deadline);
    }
    case OP_RECV: {
      plan_step rx = {q->buf, NULL, q->count * es};
      plan p = {.tx_peer = -1, .rx_peer = q->peer, .nrx = 1, .rx = &rx, .dep = -1, .dtype = q->dtype};
      return run(c, &p, deadline);
    }
    case OP_SENDRECV: {
      plan_step tx = {(char *)q->src, NULL, q->count * es}, rx = {q->buf, NULL, q->count2 * es};
      plan p = {.tx_peer = q->peer,
                .rx_peer = q->peer2,
                .ntx = 1,
                .nrx = 1,
                .tx = &tx,
                .rx = &rx,
                .dep = -1,
                .dtype = q->dtype};
      return run(c, &p, deadline);
    }
    case OP_BARRIER: {
      /* An all-reduce completes on a rank only after every rank's
       * contribution reached it: a barrier. */
      float one = 1.0f;
      if (n == 1) return GT_OK;
      if (n == 2 && c->transport == GT_COMM_SHM)
        GT_TRY(gt_comm_shm_allreduce2(c, (char *)&one, 1, GT_F32, deadline));
      else
        GT_TRY(allreduce(c, (char *)&one, 1, GT_F32, deadline));
      if (one != (float)n) return gt_errorf(GT_EFORMAT, "barrier counted %g ranks, expected %d", (double)one, n);
      return GT_OK;
    }
  }
  return gt_errorf(GT_EINVAL, "unknown operation");
}
