/* Communicators: collectives and point-to-point transfers between ranks.
 * (The store that bootstraps them is giant/engine/store.h; the process grid built
 * from them, giant/engine/grid.h.)
 *
 * A communicator (gt_comm) joins `size` ranks that found each other through
 * a gt_store under a key prefix. Every operation is asynchronous: a
 * *_start call queues it and returns a request; gt_comm_wait or
 * gt_comm_test finishes it. Operations run in the order they were started,
 * on one progress thread per communicator, so a gradient all-reduce overlaps
 * whatever the caller does next. Every rank must start the same collectives
 * in the same order; a send on one rank pairs with a recv on the other, in
 * the same order as their other operations.
 *
 * Failure is fatal to a communicator, as in NCCL: when an operation fails
 * (a peer died, a timeout, garbage on the wire) or any thread calls
 * gt_comm_abort, the pending operation and every later one fail at once,
 * and the ranks still in the group see their operations fail too. Build a
 * new communicator (under a new prefix) to carry on.
 *
 * Backends: on a host gt_backend (or none) buffers are host memory and the
 * transport is TCP, or shared memory when every rank runs on one host. On
 * a CUDA gt_backend (when built with CUDA and NCCL) buffers are device
 * pointers and NCCL moves them; a host buffer there is staged through
 * device memory of the communicator's own, at most 16 MiB at a time: an
 * operation larger than that is cut into several NCCL operations, so it
 * must find host memory on every rank of the group or on none (an
 * offloaded model's buffers are host memory on every rank).
 *
 * Authentication: every connection (store and communicator) proves, in
 * both directions, that it knows the job's secret (HMAC-SHA256 over fresh
 * nonces). The secret comes from the config or from GT_JOB_SECRET.
 */
#ifndef GIANT_COMM_H
#define GIANT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/backend.h"
#include "giant/group.h"
#include "giant/status.h"
#include "giant/engine/store.h"
#include "giant/tensor.h"

GT_API_BEGIN

/* ------------------------------------------------------------------ */
/* Communicators.                                                       */

typedef enum gt_comm_op {
  GT_COMM_SUM = 0,
  GT_COMM_AVG = 1, /* sum, then divided by the group size */
} gt_comm_op;

typedef enum gt_comm_transport {
  GT_COMM_AUTO = 0, /* shared memory when all ranks share a host, else TCP */
  GT_COMM_TCP = 1,
  GT_COMM_SHM = 2, /* fails with GT_EUNSUPPORTED when ranks span hosts */
} gt_comm_transport;

/* What a TCP frame's tag covers (docs/security.md). Every frame after the
 * handshake carries a tag over its header under a per-connection key, with
 * the frame's count on the connection inside it: a forged, replayed or
 * reordered frame is refused and the group fails. MAC adds a tag over the
 * payload too (bench_comm measures its cost). Shared memory and NCCL carry
 * no frames: they stay inside a host, or on the GPUs' own links. */
typedef enum gt_comm_integrity {
  GT_COMM_INTEGRITY_DEFAULT = 0,
  GT_COMM_INTEGRITY_HEADERS = 1,
  GT_COMM_INTEGRITY_MAC = 2,
} gt_comm_integrity;

/* Whether TCP frames' payloads are encrypted (docs/security.md): with ON,
 * every payload between ranks over TCP is AES-256-GCM's ciphertext under a
 * per-connection key, and its GCM tag authenticates it (so INTEGRITY_MAC
 * adds nothing); headers stay in the clear, tagged. Shared memory stays
 * inside a host and is not encrypted; NCCL's traffic is NCCL's. */
typedef enum gt_comm_encrypt {
  GT_COMM_ENCRYPT_DEFAULT = 0, /* $GT_COMM_ENCRYPT: 1 on, 0 or unset off */
  GT_COMM_ENCRYPT_OFF = 1,
  GT_COMM_ENCRYPT_ON = 2,
} gt_comm_encrypt;

typedef struct gt_comm_config {
  gt_store *store;             /* bootstrap store, shared by the group */
  const char *prefix;          /* key namespace, unique per communicator and
                            generation, e.g. "gen3/dp/0" */
  int rank, size;              /* this rank's index in the group, group size */
  gt_backend *backend;         /* NULL or CPU: host buffers; CUDA: device (NCCL) */
  const char *secret;          /* job secret, at least 16 bytes; NULL = $GT_JOB_SECRET */
  const char *host;            /* address peers reach us at; NULL = $GT_COMM_HOST (giantrun
                            sets it to the node's address), else 127.0.0.1 */
  gt_comm_transport transport; /* $GT_COMM_TRANSPORT=tcp|shm overrides AUTO */
  int init_timeout_ms;         /* forming the group; 0 = 60 s */
  int connect_timeout_ms;      /* reaching a peer once its address is in the store; 0 =
                            $GT_COMM_CONNECT_TIMEOUT_MS or 10 s. A peer that has not
                            published yet is waited for up to init_timeout_ms. */
  int op_timeout_ms;           /* one operation, once it runs; 0 = $GT_COMM_TIMEOUT_MS
                            or 300 s. A stopped peer is caught by this. */
  gt_comm_integrity integrity; /* TCP frames: DEFAULT = $GT_COMM_INTEGRITY (headers|mac),
                                  else HEADERS; every rank of a group uses the same */
  gt_comm_encrypt encrypt;     /* TCP payloads encrypted; every rank of a group uses the same */
} gt_comm_config;

typedef struct gt_comm gt_comm;
typedef struct gt_comm_req gt_comm_req;

/* Forms the group: every rank of it calls this with the same prefix and
 * size. Returns when all are connected and authenticated. */
gt_status gt_comm_init(const gt_comm_config *cfg, gt_comm **out);
/* Ranks with the same color form a new communicator, ordered by key then
 * by rank; a negative color joins none (*out = NULL). Collective over
 * `comm`. The new group's keys live under `prefix`. */
gt_status gt_comm_split(gt_comm *comm, int color, int key, const char *prefix, gt_comm **out);
/* Frees the communicator; peers still using it see it fail. Wait for every
 * request first: operations still pending are aborted, and their requests
 * are never freed. */
void gt_comm_destroy(gt_comm *comm);

int gt_comm_rank(const gt_comm *comm);
int gt_comm_size(const gt_comm *comm);
/* "tcp", "shm" or "nccl". */
const char *gt_comm_transport_name(const gt_comm *comm);

/* Thread-safe, callable from any thread (not from a signal handler): the
 * pending operation and every later one fail with GT_EABORTED, and peers
 * see the group fail. Every communicator split from it (gt_comm_split),
 * and split from those, is aborted with it. */
void gt_comm_abort(gt_comm *comm);
/* GT_OK while healthy; else the status that broke the communicator. */
gt_status gt_comm_error(const gt_comm *comm);

/* Asynchronous operations. `count` is in elements of dtype (GT_F32 or
 * GT_BF16; bf16 is reduced in fp32 and rounded at each step). Buffers must
 * stay untouched until the request finishes. */
gt_status gt_comm_allreduce_start(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, gt_comm_op op,
                                  gt_comm_req **req);
/* send holds size*count elements; rank r receives the reduction of block r. */
gt_status gt_comm_reduce_scatter_start(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype,
                                       gt_comm_op op, gt_comm_req **req);
/* Root's recv receives the reduction of every rank's send (count
 * elements; recv may be send; other ranks' recv is not touched and may be
 * NULL). Summed along the ring from root + 1 to root, each rank adding its
 * own to what it received: the order a reduce-scatter sums root's block
 * in, so that reducing a buffer's pieces to their owners gives the bits a
 * reduce-scatter of the whole buffer gives. */
gt_status gt_comm_reduce_to_start(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype,
                                  gt_comm_op op, int root, gt_comm_req **req);
/* recv holds size*count elements; block r is rank r's send. send may be
 * recv + rank*count (in place). */
gt_status gt_comm_allgather_start(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype,
                                  gt_comm_req **req);
gt_status gt_comm_broadcast_start(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, int root, gt_comm_req **req);
gt_status gt_comm_send_start(gt_comm *comm, const void *buf, size_t count, gt_dtype dtype, int peer, gt_comm_req **req);
gt_status gt_comm_recv_start(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, int peer, gt_comm_req **req);
/* Sends to dst and receives from src at the same time (dst may equal src),
 * so neighbours that exchange data both ways (pipeline stages, ring
 * shifts) cannot block each other the way a send queued before a recv
 * can once a message outgrows the transport's buffers. */
gt_status gt_comm_sendrecv_start(gt_comm *comm, const void *send, size_t send_count, int dst, void *recv,
                                 size_t recv_count, int src, gt_dtype dtype, gt_comm_req **req);
gt_status gt_comm_barrier_start(gt_comm *comm, gt_comm_req **req);

/* Waits up to timeout_ms (< 0: until the operation ends, which its own
 * op_timeout bounds). When the operation has ended, returns its status and
 * frees the request. On GT_ETIMEDOUT the request is still pending and stays
 * valid. */
gt_status gt_comm_wait(gt_comm_req *req, int timeout_ms);
/* Sets *done; when done, returns the operation's status and frees req. */
gt_status gt_comm_test(gt_comm_req *req, bool *done);

/* Blocking forms: start, then wait until done. */
gt_status gt_comm_allreduce(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, gt_comm_op op);
gt_status gt_comm_reduce_scatter(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype,
                                 gt_comm_op op);
gt_status gt_comm_reduce_to(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype, gt_comm_op op,
                            int root);
gt_status gt_comm_allgather(gt_comm *comm, const void *send, void *recv, size_t count, gt_dtype dtype);
gt_status gt_comm_broadcast(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, int root);
gt_status gt_comm_send(gt_comm *comm, const void *buf, size_t count, gt_dtype dtype, int peer);
gt_status gt_comm_recv(gt_comm *comm, void *buf, size_t count, gt_dtype dtype, int peer);
gt_status gt_comm_sendrecv(gt_comm *comm, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                           int src, gt_dtype dtype);
gt_status gt_comm_barrier(gt_comm *comm);

/* gt_group over a communicator (host buffers): what layers reduce over. */
gt_status gt_comm_group_init(gt_comm *comm, gt_group *out);

GT_API_END
#endif
