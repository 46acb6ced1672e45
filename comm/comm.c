/* Communicator lifecycle: forming the group, the progress thread that runs
 * queued operations in order, requests, and abort. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "giant/protocol.h"
#include "comm/comm_internal.h"
#include "comm/wire.h"
#include "giant/engine/comm.h"

void gt_comm_key(const gt_comm *c, char *out, size_t n, const char *fmt, ...) {
  int k = snprintf(out, n, "comm/%s/", c->prefix);
  va_list ap;
  va_start(ap, fmt);
  if (k > 0 && (size_t)k < n) vsnprintf(out + k, n - (size_t)k, fmt, ap);
  va_end(ap);
}

/* Marks the communicator failed (first failure wins) and tells the peers:
 * closing our side of every connection makes their waits end at once. */
static void fail(gt_comm *c, gt_status st, const char *msg) {
  pthread_mutex_lock(&c->mu);
  bool first = !atomic_load(&c->aborted);
  if (first) {
    c->fail_status = st;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    atomic_store(&c->aborted, 1);
  }
  pthread_mutex_unlock(&c->mu);
  if (!first) return;
  if (c->nccl) {
    gt_comm_nccl_abort(c);
    return;
  }
  for (int i = 0; c->fds && i < c->size; i++)
    if (c->fds[i] >= 0) shutdown(c->fds[i], SHUT_RDWR);
  gt_comm_shm_fail(c);
  gt_comm_shm_wake(c);
  if (c->wake_fd >= 0) {
    uint64_t one = 1;
    ssize_t w = write(c->wake_fd, &one, sizeof one);
    (void)w;
  }
}

pthread_mutex_t gt_comm_family_mu = PTHREAD_MUTEX_INITIALIZER;

void gt_comm_adopt(gt_comm *parent, gt_comm *child) {
  pthread_mutex_lock(&gt_comm_family_mu);
  child->parent = parent;
  child->next_sibling = parent->children;
  parent->children = child;
  pthread_mutex_unlock(&gt_comm_family_mu);
}

/* Under gt_comm_family_mu. */
static void abort_family(gt_comm *c) {
  fail(c, GT_EABORTED, "the communicator was aborted (gt_comm_abort)");
  for (gt_comm *k = c->children; k; k = k->next_sibling) abort_family(k);
}

void gt_comm_abort(gt_comm *comm) {
  if (!comm) return;
  /* The groups split from it too: a rank blocked on a pipeline's own
   * send/recv group must be woken as one blocked on the group it came
   * from. */
  pthread_mutex_lock(&gt_comm_family_mu);
  abort_family(comm);
  pthread_mutex_unlock(&gt_comm_family_mu);
}

gt_status gt_comm_aborted_status(gt_comm *c) {
  pthread_mutex_lock(&c->mu);
  gt_status st = gt_errorf(c->fail_status, "%s", c->fail_msg);
  pthread_mutex_unlock(&c->mu);
  return st;
}

gt_status gt_comm_error(const gt_comm *comm) { return atomic_load(&comm->aborted) ? comm->fail_status : GT_OK; }

int gt_comm_rank(const gt_comm *comm) { return comm->rank; }
int gt_comm_size(const gt_comm *comm) { return comm->size; }

const char *gt_comm_transport_name(const gt_comm *comm) {
  return comm->nccl ? "nccl" : comm->transport == GT_COMM_SHM ? "shm" : comm->hier ? "tcp+shm" : "tcp";
}

static const char *op_name(comm_op_kind k) {
  static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast", "send",
                                      "recv",       "barrier",        "sendrecv",   "reduce"};
  return names[k];
}

static void *progress_main(void *arg) {
  gt_comm *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->head && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    gt_comm_req *r = c->head;
    pthread_mutex_unlock(&c->mu);
    if (!r) break;
    gt_status st;
    if (atomic_load(&c->aborted)) {
      st = gt_comm_aborted_status(c);
    } else {
      st = c->nccl ? gt_comm_nccl_execute(c, r, gt_now() + c->op_timeout)
                   : gt_comm_execute(c, r, gt_now() + c->op_timeout);
      if (st != GT_OK) {
        gt_error_context(st, "%s of %zu %s (rank %d of %d, group '%s')", op_name(r->kind), r->count,
                         gt_dtype_name(r->dtype), c->rank, c->size, c->prefix);
        fail(c, st, gt_last_error());
        if (st != GT_EABORTED && c->fail_status == GT_EABORTED) st = GT_EABORTED;
      }
    }
    if (c->nccl) gt_comm_nccl_release(c, r);
    pthread_mutex_lock(&c->mu);
    snprintf(r->msg, sizeof r->msg, "%s", st == GT_OK ? "" : gt_last_error());
    r->status = st;
    r->done = true;
    c->head = r->next;
    if (!c->head) c->tail = NULL;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  return NULL;
}

static gt_status enqueue(gt_comm *c, gt_comm_req *tmpl, gt_comm_req **out) {
  if (!c || !out) return gt_errorf(GT_EINVAL, "NULL communicator or request");
  if (tmpl->dtype != GT_F32 && tmpl->dtype != GT_BF16)
    return gt_errorf(GT_EINVAL, "%s: dtype %s is not supported (use f32 or bf16)", op_name(tmpl->kind),
                     gt_dtype_name(tmpl->dtype));
  if (tmpl->count > ((size_t)1 << 40))
    return gt_errorf(GT_EINVAL, "%s: count %zu is too large", op_name(tmpl->kind), tmpl->count);
  if ((tmpl->kind == OP_SEND || tmpl->kind == OP_RECV) &&
      (tmpl->peer < 0 || tmpl->peer >= c->size || tmpl->peer == c->rank))
    return gt_errorf(GT_EINVAL, "%s: peer %d is not another rank of this group of %d", op_name(tmpl->kind), tmpl->peer,
                     c->size);
  if (tmpl->kind == OP_SENDRECV && (tmpl->peer < 0 || tmpl->peer >= c->size || tmpl->peer == c->rank ||
                                    tmpl->peer2 < 0 || tmpl->peer2 >= c->size || tmpl->peer2 == c->rank))
    return gt_errorf(GT_EINVAL, "sendrecv: dst %d and src %d must be other ranks of this group of %d", tmpl->peer,
                     tmpl->peer2, c->size);
  if (tmpl->count2 > ((size_t)1 << 40))
    return gt_errorf(GT_EINVAL, "sendrecv: receive count %zu is too large", tmpl->count2);
  if (tmpl->kind == OP_SENDRECV && ((tmpl->count && !tmpl->src) || (tmpl->count2 && !tmpl->buf)))
    return gt_errorf(GT_EINVAL, "sendrecv: NULL buffer");
  if ((tmpl->kind == OP_BROADCAST || tmpl->kind == OP_REDUCE) && (tmpl->peer < 0 || tmpl->peer >= c->size))
    return gt_errorf(GT_EINVAL, "%s: root %d is not a rank of this group of %d", op_name(tmpl->kind), tmpl->peer,
                     c->size);
  if (tmpl->count && ((tmpl->kind == OP_REDUCE_SCATTER || tmpl->kind == OP_ALLGATHER || tmpl->kind == OP_SEND ||
                       tmpl->kind == OP_REDUCE)
                          ? !tmpl->src
                          : false))
    return gt_errorf(GT_EINVAL, "%s: NULL send buffer", op_name(tmpl->kind));
  if (tmpl->count && tmpl->kind != OP_SEND && tmpl->kind != OP_BARRIER && tmpl->kind != OP_SENDRECV &&
      (tmpl->kind != OP_REDUCE || tmpl->peer == c->rank) && !tmpl->buf)
    return gt_errorf(GT_EINVAL, "%s: NULL buffer", op_name(tmpl->kind));
  gt_comm_req *r = malloc(sizeof *r);
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory for a request");
  *r = *tmpl;
  r->comm = c;
  r->done = false;
  r->status = GT_OK;
  r->next = NULL;
  r->msg[0] = 0;
  if (c->nccl) {
    gt_status st = gt_comm_nccl_prepare(c, r);
    if (st != GT_OK) {
      free(r);
      return st;
    }
  }
  pthread_mutex_lock(&c->mu);
  if (c->tail)
    c->tail->next = r;
  else
    c->head = r;
  c->tail = r;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *out = r;
  return GT_OK;
}

gt_status gt_comm_wait(gt_comm_req *r, int timeout_ms) {
  if (!r) return gt_errorf(GT_EINVAL, "gt_comm_wait: NULL request");
  gt_comm *c = r->comm;
  struct timespec abs;
  clock_gettime(CLOCK_MONOTONIC, &abs);
  if (timeout_ms >= 0) {
    abs.tv_sec += timeout_ms / 1000;
    abs.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (abs.tv_nsec >= 1000000000L) {
      abs.tv_sec++;
      abs.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&c->mu);
  while (!r->done) {
    if (timeout_ms < 0) {
      pthread_cond_wait(&c->cv, &c->mu);
    } else if (pthread_cond_timedwait(&c->cv, &c->mu, &abs) == ETIMEDOUT && !r->done) {
      pthread_mutex_unlock(&c->mu);
      return gt_errorf(GT_ETIMEDOUT, "%s (rank %d of %d, group '%s') still running after %d ms", op_name(r->kind),
                       c->rank, c->size, c->prefix, timeout_ms);
    }
  }
  pthread_mutex_unlock(&c->mu);
  gt_status st = r->status;
  if (st != GT_OK) gt_errorf(st, "%s", r->msg);
  free(r);
  return st;
}

gt_status gt_comm_test(gt_comm_req *r, bool *done) {
  if (!r || !done) return gt_errorf(GT_EINVAL, "gt_comm_test: NULL argument");
  pthread_mutex_lock(&r->comm->mu);
  *done = r->done;
  pthread_mutex_unlock(&r->comm->mu);
  return *done ? gt_comm_wait(r, 0) : GT_OK;
}

/* ---- starting operations ---- */

gt_status gt_comm_allreduce_start(gt_comm *c, void *buf, size_t count, gt_dtype dtype, gt_comm_op op,
                                  gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_ALLREDUCE, .buf = buf, .count = count, .dtype = dtype, .op = op};
  return enqueue(c, &t, req);
}

gt_status gt_comm_reduce_scatter_start(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype,
                                       gt_comm_op op, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_REDUCE_SCATTER, .src = send, .buf = recv, .count = count, .dtype = dtype, .op = op};
  return enqueue(c, &t, req);
}

gt_status gt_comm_reduce_to_start(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype, gt_comm_op op,
                                  int root, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_REDUCE, .src = send, .buf = recv, .count = count, .dtype = dtype, .op = op, .peer = root};
  return enqueue(c, &t, req);
}

gt_status gt_comm_allgather_start(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype,
                                  gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_ALLGATHER, .src = send, .buf = recv, .count = count, .dtype = dtype};
  return enqueue(c, &t, req);
}

gt_status gt_comm_broadcast_start(gt_comm *c, void *buf, size_t count, gt_dtype dtype, int root, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_BROADCAST, .buf = buf, .count = count, .dtype = dtype, .peer = root};
  return enqueue(c, &t, req);
}

gt_status gt_comm_send_start(gt_comm *c, const void *buf, size_t count, gt_dtype dtype, int peer, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_SEND, .src = buf, .count = count, .dtype = dtype, .peer = peer};
  return enqueue(c, &t, req);
}

gt_status gt_comm_recv_start(gt_comm *c, void *buf, size_t count, gt_dtype dtype, int peer, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_RECV, .buf = buf, .count = count, .dtype = dtype, .peer = peer};
  return enqueue(c, &t, req);
}

gt_status gt_comm_sendrecv_start(gt_comm *c, const void *send, size_t send_count, int dst, void *recv,
                                 size_t recv_count, int src, gt_dtype dtype, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_SENDRECV,
                   .src = send,
                   .count = send_count,
                   .peer = dst,
                   .buf = recv,
                   .count2 = recv_count,
                   .peer2 = src,
                   .dtype = dtype};
  return enqueue(c, &t, req);
}

gt_status gt_comm_barrier_start(gt_comm *c, gt_comm_req **req) {
  gt_comm_req t = {.kind = OP_BARRIER, .dtype = GT_F32};
  return enqueue(c, &t, req);
}

#define BLOCKING(call) \
  gt_comm_req *r_;     \
  GT_TRY(call);        \
  return gt_comm_wait(r_, -1)

gt_status gt_comm_allreduce(gt_comm *c, void *buf, size_t count, gt_dtype dtype, gt_comm_op op) {
  BLOCKING(gt_comm_allreduce_start(c, buf, count, dtype, op, &r_));
}
gt_status gt_comm_reduce_scatter(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype,
                                 gt_comm_op op) {
  BLOCKING(gt_comm_reduce_scatter_start(c, send, recv, count, dtype, op, &r_));
}
gt_status gt_comm_reduce_to(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype, gt_comm_op op,
                            int root) {
  BLOCKING(gt_comm_reduce_to_start(c, send, recv, count, dtype, op, root, &r_));
}
gt_status gt_comm_allgather(gt_comm *c, const void *send, void *recv, size_t count, gt_dtype dtype) {
  BLOCKING(gt_comm_allgather_start(c, send, recv, count, dtype, &r_));
}
gt_status gt_comm_broadcast(gt_comm *c, void *buf, size_t count, gt_dtype dtype, int root) {
  BLOCKING(gt_comm_broadcast_start(c, buf, count, dtype, root, &r_));
}
gt_status gt_comm_send(gt_comm *c, const void *buf, size_t count, gt_dtype dtype, int peer) {
  BLOCKING(gt_comm_send_start(c, buf, count, dtype, peer, &r_));
}
gt_status gt_comm_recv(gt_comm *c, void *buf, size_t count, gt_dtype dtype, int peer) {
  BLOCKING(gt_comm_recv_start(c, buf, count, dtype, peer, &r_));
}
gt_status gt_comm_sendrecv(gt_comm *c, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                           int src, gt_dtype dtype) {
  BLOCKING(gt_comm_sendrecv_start(c, send, send_count, dst, recv, recv_count, src, dtype, &r_));
}
gt_status gt_comm_barrier(gt_comm *c) { BLOCKING(gt_comm_barrier_start(c, &r_)); }

/* ---- forming and freeing ---- */

void gt_comm_destroy(gt_comm *c) {
  if (!c) return;
  /* Out of the family first: an abort must not reach it once freed. */
  pthread_mutex_lock(&gt_comm_family_mu);
  if (c->parent) {
    gt_comm **at = &c->parent->children;
    while (*at && *at != c) at = &(*at)->next_sibling;
    if (*at) *at = c->next_sibling;
  }
  for (gt_comm *k = c->children; k; k = k->next_sibling) k->parent = NULL;
  c->parent = c->children = c->next_sibling = NULL;
  pthread_mutex_unlock(&gt_comm_family_mu);
  if (c->thread_started) {
    pthread_mutex_lock(&c->mu);
    bool pending = c->head != NULL;
    pthread_mutex_unlock(&c->mu);
    /* Operations nobody waited for would otherwise run (or time out) first;
     * the abort reaches the node and leader groups an all-reduce may wait in. */
    if (pending) fail(c, GT_EABORTED, "the communicator was destroyed with operations pending");
    if (pending) gt_comm_hier_abort(c);
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  if (c->nccl) gt_comm_nccl_destroy(c);
  gt_comm_hier_destroy(c); /* after the join: the progress thread used them */
  free(c->host_of);
  gt_comm_shm_destroy(c);
  for (int i = 0; c->fds && i < c->size; i++)
    if (c->fds[i] >= 0) close(c->fds[i]);
  for (int i = 0; c->sess && i < c->size; i++) gt_wire_session_close(&c->sess[i]);
  for (int i = 0; c->pidfds && i < c->size; i++)
    if (c->pidfds[i] >= 0) close(c->pidfds[i]);
  if (c->wake_fd >= 0) close(c->wake_fd);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->fds);
  free(c->sess);
  free(c->pidfds);
  free(c->tx_seq);
  free(c->rx_seq);
  free(c->delay_ns);
  free(c->sndbuf);
  free(c->prefix);
  free(c->secret);
  free(c->host);
  free(c);
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x <= 0 || x > 1000000000L) {
    gt_warn("ignoring %s=%s: expected a positive integer (milliseconds)", name, v);
    return dflt;
  }
  return (int)x;
}

gt_status gt_comm_alloc(const gt_comm_config *cfg, const char *secret, gt_comm **out) {
  gt_comm *c = calloc(1, sizeof *c);
  if (!c) return gt_errorf(GT_ENOMEM, "out of memory");
  c->rank = cfg->rank;
  c->size = cfg->size;
  c->store = cfg->store;
  c->backend = cfg->backend;
  c->cfg = *cfg;
  c->wake_fd = -1;
  c->prefix = strdup(cfg->prefix);
  c->secret = strdup(secret);
  c->fds = malloc(sizeof(int) * (size_t)c->size);
  c->sess = calloc((size_t)c->size, sizeof *c->sess);
  c->pidfds = malloc(sizeof(int) * (size_t)c->size);
  c->tx_seq = calloc((size_t)c->size, sizeof(uint32_t));
  c->rx_seq = calloc((size_t)c->size, sizeof(uint32_t));
  c->delay_ns = calloc((size_t)c->size, sizeof *c->delay_ns);
  c->sndbuf = calloc((size_t)c->size, sizeof *c->sndbuf);
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (!c->prefix || !c->secret || !c->fds || !c->sess || !c->pidfds || !c->tx_seq || !c->rx_seq || !c->delay_ns ||
      !c->sndbuf) {
    gt_comm_destroy(c);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  for (int i = 0; i < c->size; i++) c->fds[i] = c->pidfds[i] = -1;
  *out = c;
  return GT_OK;
}

gt_status gt_comm_start(gt_comm *c) {
  if (pthread_create(&c->thread, NULL, progress_main, c) != 0)
    return gt_errorf(GT_ENOMEM, "cannot start the progress thread");
  c->thread_started = true;
  return GT_OK;
}

gt_status gt_comm_init(const gt_comm_config *cfg, gt_comm **out) {
  if (!cfg || !out) return gt_errorf(GT_EINVAL, "gt_comm_init: NULL argument");
  *out = NULL;
  if (!cfg->store) return gt_errorf(GT_EINVAL, "gt_comm_init: no store to bootstrap from");
  if (!cfg->prefix || !*cfg->prefix || strlen(cfg->prefix) > 200)
    return gt_errorf(GT_EINVAL, "gt_comm_init: the key prefix must be 1..200 characters");
  if (cfg->size < 1 || cfg->size > 65536 || cfg->rank < 0 || cfg->rank >= cfg->size)
    return gt_errorf(GT_EINVAL, "gt_comm_init: rank %d of size %d is out of range", cfg->rank, cfg->size);
  const char *secret;
  GT_TRY(gt_wire_secret(cfg->secret, &secret));
  gt_comm_transport tr = cfg->transport;
  const char *te = getenv("GT_COMM_TRANSPORT");
  if (tr == GT_COMM_AUTO && te && *te) {
    if (!strcmp(te, "tcp"))
      tr = GT_COMM_TCP;
    else if (!strcmp(te, "shm"))
      tr = GT_COMM_SHM;
    else if (strcmp(te, "auto"))
      return gt_errorf(GT_EINVAL, "GT_COMM_TRANSPORT=%s: expected tcp, shm or auto", te);
  }

  if (tr != GT_COMM_AUTO && tr != GT_COMM_TCP && tr != GT_COMM_SHM)
    return gt_errorf(GT_EINVAL, "gt_comm_init: transport %d is none of auto, tcp and shm", (int)tr);

  gt_comm_integrity integrity = cfg->integrity;
  const char *ie = getenv(GT_ENV_COMM_INTEGRITY);
  if (integrity == GT_COMM_INTEGRITY_DEFAULT && ie && *ie) {
    if (!strcmp(ie, "mac"))
      integrity = GT_COMM_INTEGRITY_MAC;
    else if (!strcmp(ie, "headers"))
      integrity = GT_COMM_INTEGRITY_HEADERS;
    else
      return gt_errorf(GT_EINVAL, "GT_COMM_INTEGRITY=%s: expected headers or mac", ie);
  }

  gt_comm_encrypt encrypt = cfg->encrypt;
  if ((int)encrypt < GT_COMM_ENCRYPT_DEFAULT || encrypt > GT_COMM_ENCRYPT_ON)
    return gt_errorf(GT_EINVAL, "gt_comm_init: encrypt is %d: use GT_COMM_ENCRYPT_DEFAULT, _OFF or _ON", (int)encrypt);
  const char *ee = getenv(GT_ENV_COMM_ENCRYPT);
  if (encrypt == GT_COMM_ENCRYPT_DEFAULT) {
    if (ee && *ee && strcmp(ee, "0") && strcmp(ee, "1"))
      return gt_errorf(GT_EINVAL, "GT_COMM_ENCRYPT=%s: expected 1 (encrypt TCP payloads) or 0", ee);
    encrypt = ee && !strcmp(ee, "1") ? GT_COMM_ENCRYPT_ON : GT_COMM_ENCRYPT_OFF;
  }

  gt_comm *c = NULL;
  GT_TRY(gt_comm_alloc(cfg, secret, &c));
  c->payload_mac = integrity == GT_COMM_INTEGRITY_MAC;
  c->encrypt = encrypt == GT_COMM_ENCRYPT_ON;
  c->cfg.integrity = integrity; /* groups split from this one agree with them */
  c->cfg.encrypt = encrypt;
  c->cfg.transport = tr; /* and with this, which the group agrees on over its mesh (shm.c) */
  c->op_timeout = (cfg->op_timeout_ms > 0 ? cfg->op_timeout_ms : env_int("GT_COMM_TIMEOUT_MS", 300000)) / 1000.0;
  c->init_timeout_ms = cfg->init_timeout_ms > 0 ? cfg->init_timeout_ms : 60000;
  c->connect_timeout_ms =
      cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : env_int("GT_COMM_CONNECT_TIMEOUT_MS", 10000);
  c->cfg.connect_timeout_ms = c->connect_timeout_ms; /* groups split from this one keep it */
  double deadline = gt_wire_deadline(c->init_timeout_ms);
  c->cfg.store = NULL;
  c->cfg.prefix = NULL;
  c->cfg.secret = NULL;
  c->cfg.host = NULL;

  gt_status st = GT_OK;
  if (cfg->backend && gt_backend_kind(cfg->backend) == GT_DEVICE_CUDA) {
    c->nccl = true;
    /* NCCL listens on ports of its own choosing and has no setting for a
     * range: say so once rather than let a firewall's drops look like a hang. */
    static atomic_int warned;
    const char *ports = getenv(GT_ENV_COMM_PORTS);
    if (ports && *ports && !atomic_exchange(&warned, 1))
      gt_warn(
          "GT_COMM_PORTS=%s: NCCL's groups listen outside the range, on ports NCCL picks (it has no "
          "setting for a range); a firewall must let the job's hosts reach each other on any port for them",
          ports);
    /* Nor does NCCL encrypt: a job that asked for it is told where it ends. */
    static atomic_int warned_encrypt;
    if (c->encrypt && !atomic_exchange(&warned_encrypt, 1))
      gt_warn(
          "GT_COMM_ENCRYPT encrypts Giant's TCP frames; these groups run on NCCL, which does not encrypt "
          "its traffic between hosts (docs/security.md)");
    st = gt_comm_nccl_init(c, deadline);
  } else {
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0) st = gt_errorf(GT_EIO, "eventfd: %s", strerror(errno));
    const char *host = cfg->host ? cfg->host : getenv(GT_ENV_COMM_HOST);
    if (!host || !*host) host = "127.0.0.1";
    if (!(c->host = strdup(host))) st = gt_errorf(GT_ENOMEM, "out of memory");
    if (st == GT_OK) st = gt_comm_mesh_connect(c, host, deadline);
    c->transport = GT_COMM_TCP;
    /* On one host, shared memory is chosen without measuring: it moves
     * each byte with one copy into a slot and one out (or a sum straight
     * out of it), in user space and with no system call per piece, where
     * loopback TCP makes the same two copies in the kernel plus the
     * protocol's work and a call per send and receive. So it does less
     * work for every operation and size (bench_comm measures both); a
     * timing at creation would cost every group's start tens of ms and, on
     * a loaded host where one round can run 3x slower than the next, pick
     * TCP by chance and make runs differ. */
    /* Shared memory is negotiated over the TCP mesh, so the progress
     * thread runs first; the transport switches before the group is
     * handed out, so no operation of the caller's sees it change. */
    if (st == GT_OK) st = gt_comm_start(c);
    if (st == GT_OK && c->size > 1) {
      st = gt_comm_shm_setup(c, tr);
      if (st == GT_EUNSUPPORTED && tr == GT_COMM_AUTO)
        st = c->host_of ? gt_comm_hier_setup(c, c->host_of, c->nhosts) : GT_OK;
    }
  }
  if (st == GT_OK && !c->thread_started) st = gt_comm_start(c);
  if (st != GT_OK) {
    st = gt_error_context(st, "forming group '%s' (rank %d of %d)", cfg->prefix, cfg->rank, cfg->size);
    gt_comm_destroy(c);
    return st;
  }
  *out = c;
  return GT_OK;
}

#ifndef GIANT_HAVE_NCCL
gt_status gt_comm_nccl_init(gt_comm *c, double deadline) {
  (void)c;
  (void)deadline;
  return gt_errorf(GT_EUNSUPPORTED,
                   "a CUDA backend needs NCCL communicators, and this build has no NCCL: rebuild with CUDA and NCCL");
}
gt_status gt_comm_nccl_split(gt_comm *parent, int color, int key, gt_comm **child) {
  (void)parent;
  (void)color;
  (void)key;
  (void)child;
  return gt_errorf(GT_EUNSUPPORTED, "this build has no NCCL");
}
gt_status gt_comm_nccl_execute(gt_comm *c, gt_comm_req *r, double deadline) {
  (void)c;
  (void)r;
  (void)deadline;
  return gt_errorf(GT_EUNSUPPORTED, "this build has no NCCL");
}
gt_status gt_comm_nccl_prepare(gt_comm *c, gt_comm_req *r) {
  (void)c;
  (void)r;
  return gt_errorf(GT_EUNSUPPORTED, "this build has no NCCL");
}
void gt_comm_nccl_release(gt_comm *c, gt_comm_req *r) {
  (void)c;
  (void)r;
}
void gt_comm_nccl_abort(gt_comm *c) { (void)c; }
void gt_comm_nccl_destroy(gt_comm *c) { (void)c; }
#endif
