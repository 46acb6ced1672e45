/* Inside a communicator: its state, the request queue, the transfer plans
 * the collectives are made of, and the two host transports that run them. */
#ifndef GIANT_PARALLEL_COMM_INTERNAL_H
#define GIANT_PARALLEL_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "comm/wire.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

typedef enum {
  OP_ALLREDUCE,
  OP_REDUCE_SCATTER,
  OP_ALLGATHER,
  OP_BROADCAST,
  OP_SEND,
  OP_RECV,
  OP_BARRIER,
  OP_SENDRECV,
  OP_REDUCE,
} comm_op_kind;

struct gt_comm_req {
  gt_comm *comm;
  comm_op_kind kind;
  void *buf;       /* allreduce, broadcast, recv; recv side otherwise */
  const void *src; /* reduce_scatter, allgather, send, reduce */
  size_t count;
  gt_dtype dtype;
  gt_comm_op op;
  int peer;      /* root (broadcast, reduce), or the other rank of send / recv; sendrecv: dst */
  size_t count2; /* sendrecv: elements received */
  int peer2;     /* sendrecv: src */
  void *ready;   /* NCCL: the cudaEvent_t marking the input's producers */
  bool done;
  gt_status status;
  char msg[512];
  struct gt_comm_req *next;
};

/* One transfer: bytes of a send step, or a receive step that copies into
 * dst or reduces dst = src2 + data (src2 may be dst). */
typedef struct plan_step {
  char *ptr;
  const char *src2;
  size_t len;
} plan_step;

/* A pipelined exchange with one sender-to peer and one receive-from peer.
 * Send step k may send byte o once receive step k - dep has delivered it
 * (dep < 0: no dependency), which is what lets a ring forward a chunk
 * piece by piece while the rest of it still arrives. */
typedef struct plan {
  int tx_peer, rx_peer; /* -1: no sends / no receives */
  int ntx, nrx;
  plan_step *tx, *rx;
  int dep;
  gt_dtype dtype;
  uint32_t tx_seq, rx_seq; /* per-peer frame numbers, checked on receipt */
} plan;

typedef struct shm_state shm_state;
typedef struct nccl_state nccl_state;
typedef struct gt_comm_hier gt_comm_hier;

struct gt_comm {
  int rank, size;
  char *prefix;
  char *secret;
  char *host; /* the address peers reach us at */
  gt_backend *backend;
  gt_comm_transport transport; /* resolved: TCP or SHM (or NCCL below) */
  bool nccl;
  gt_store *store;
  double op_timeout; /* seconds */
  int init_timeout_ms;
  int connect_timeout_ms; /* reaching a peer whose address is known (tcp.c) */
  gt_comm_config cfg;     /* for split */

  int *fds;                     /* socket to each peer, -1 for self */
  struct gt_wire_session *sess; /* per peer: the keys and frame counts that seal its frames */
  bool payload_mac;             /* payloads carry a tag too (GT_COMM_INTEGRITY_MAC) */
  bool encrypt;                 /* payloads are encrypted (GT_COMM_ENCRYPT_ON); their tag is GCM's */
  int wake_fd;                  /* eventfd: wakes the progress thread's polls */
  int *pidfds;                  /* same-host peers' processes, -1 where unknown */
  shm_state *shm;
  nccl_state *nc;
  gt_comm_hier *hier; /* all-reduce in two levels across hosts (hier.c); NULL if flat */
  int *host_of;       /* each rank's host, numbered from 0 in rank order, once shm setup saw them differ */
  int nhosts;

  atomic_int aborted; /* set by gt_comm_abort or by a failure */
  gt_status fail_status;
  char fail_msg[512];

  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* queue changed, or a request finished */
  gt_comm_req *head, *tail;
  bool stop;
  uint32_t *tx_seq, *rx_seq; /* frames sent to / received from each peer */
  atomic_llong *delay_ns;    /* per peer: each transfer that sends to it first sleeps this long */
  int *sndbuf;               /* per peer on this host: its socket's SO_SNDBUF now; 0 for other hosts (tcp.c) */
  /* The communicators split from this one (gt_comm_split), which an abort
   * reaches too; guarded by gt_comm_family_mu. */
  gt_comm *parent, *children, *next_sibling;
};

/* Guards every communicator's parent and children links: an abort from any
 * thread walks them while another thread may split or destroy. */
extern pthread_mutex_t gt_comm_family_mu;
/* Links child under parent (after a successful split). */
void gt_comm_adopt(gt_comm *parent, gt_comm *child);

/* A communicator shell (no connections, no thread) and its start. */
gt_status gt_comm_alloc(const gt_comm_config *cfg, const char *secret, gt_comm **out);
gt_status gt_comm_start(gt_comm *c);

/* Runs a plan over the communicator's transport. */
gt_status gt_comm_run_tcp(gt_comm *c, const plan *p, double deadline);
gt_status gt_comm_run_shm(gt_comm *c, const plan *p, double deadline);

/* All-reduce between the two ranks of a shared-memory group: each rank
 * reduces one half of buf and receives the other half reduced. */
gt_status gt_comm_shm_allreduce2(gt_comm *c, char *buf, size_t count, gt_dtype t, double deadline);

/* memcpy for the shared-memory transport, without glibc's rep movsb and its
 * slow case on AMD (copy.c). The _nt form streams its stores past the
 * caches: for destinations no one reads soon. */
void gt_comm_copy(void *dst, const void *src, size_t n);
void gt_comm_copy_nt(void *dst, const void *src, size_t n);

/* Sleeps the send delay set for peer (gt_comm_set_send_delay), if any. */
void gt_comm_delay_send(gt_comm *c, int peer);

/* Executes one request (on the progress thread). */
gt_status gt_comm_execute(gt_comm *c, gt_comm_req *r, double deadline);

/* dst[i] = a[i] + b[i] over n elements (bf16 summed in fp32). */
void gt_comm_reduce(gt_dtype t, void *dst, const void *a, const void *b, size_t n);
/* dst[i] = dst2[i] = dst[i] + b[i] over n elements, the same sum and
 * rounding as gt_comm_reduce; the three arrays must not overlap. */
void gt_comm_reduce2(gt_dtype t, void *dst, void *dst2, const void *b, size_t n);

/* Connection setup: the TCP mesh, the shared-memory segments. */
gt_status gt_comm_mesh_connect(gt_comm *c, const char *host, double deadline);
/* Takes the group's higher ranks in on listening socket lfd (accept.c):
 * handshakes run concurrently, so silent strangers cannot stall it. */
gt_status gt_comm_accept_peers(gt_comm *c, int lfd, const char *ctx, gt_wire_mode mode, double deadline);
/* The transport, agreed over the TCP mesh: every rank must ask for the
 * same one (tr: AUTO, TCP or SHM), or all fail with a message naming the
 * ranks; TCP stays. Otherwise shared memory when every rank is on this
 * host, else GT_EUNSUPPORTED, with each rank's host left in c->host_of for
 * gt_comm_hier_setup. */
gt_status gt_comm_shm_setup(gt_comm *c, gt_comm_transport tr);
/* The node and leader groups, where nhosts hosts hold the group's ranks
 * and some host holds more than one; GT_OK and flat otherwise. */
gt_status gt_comm_hier_setup(gt_comm *c, const int *host_of, int nhosts);
gt_status gt_comm_hier_allreduce(gt_comm *c, void *buf, size_t count, gt_dtype t);
void gt_comm_hier_abort(gt_comm *c);
void gt_comm_hier_destroy(gt_comm *c);
void gt_comm_shm_destroy(gt_comm *c);
/* A peer's segment name as the peer sent it: whether it is exactly the
 * one gt_comm_shm_setup makes for that rank and pid ("/giant-PID-RANK-
 * XXXXXXXX"), nothing else (no path, no other process's segment). */
bool gt_comm_shm_name_ok(const char *name, int rank, int pid);
/* Maps that peer's segment of `bytes`, or NULL with a warning naming the
 * group: a bad name, a segment not a regular file of this user closed to
 * others, or one too short (which would raise SIGBUS). */
char *gt_comm_shm_map_peer(const char *group, const char *name, int rank, int pid, size_t bytes);
/* Tells same-host peers that this group failed (wakes their waits). */
void gt_comm_shm_fail(gt_comm *c);
/* Wakes the progress thread wherever it waits. */
void gt_comm_shm_wake(gt_comm *c);

/* The status (and message) of a communicator that was aborted or failed. */
gt_status gt_comm_aborted_status(gt_comm *c);

/* Store keys under the communicator's prefix. */
void gt_comm_key(const gt_comm *c, char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* NCCL backend (parallel/nccl/), when built with CUDA. */
gt_status gt_comm_nccl_init(gt_comm *c, double deadline);
gt_status gt_comm_nccl_split(gt_comm *parent, int color, int key, gt_comm **child);
gt_status gt_comm_nccl_execute(gt_comm *c, gt_comm_req *r, double deadline);
/* In the starting thread: marks the compute stream's work so far, which the
 * operation will wait for. Release returns the mark once the request ends. */
gt_status gt_comm_nccl_prepare(gt_comm *c, gt_comm_req *r);
void gt_comm_nccl_release(gt_comm *c, gt_comm_req *r);
void gt_comm_nccl_abort(gt_comm *c);
void gt_comm_nccl_destroy(gt_comm *c);

#endif
