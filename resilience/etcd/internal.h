/* Shared internals of the etcd client: the client struct, unary calls with
 * failover and re-authentication, and the bidirectional stream used by
 * watches and lease keepalives. */
#ifndef GIANT_ETCD_INTERNAL_H
#define GIANT_ETCD_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "giant/engine/etcd.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

#define ET_KV_RANGE "/etcdserverpb.KV/Range"
#define ET_KV_PUT "/etcdserverpb.KV/Put"
#define ET_KV_DELETE "/etcdserverpb.KV/DeleteRange"
#define ET_KV_TXN "/etcdserverpb.KV/Txn"
#define ET_LEASE_GRANT "/etcdserverpb.Lease/LeaseGrant"
#define ET_LEASE_REVOKE "/etcdserverpb.Lease/LeaseRevoke"
#define ET_LEASE_KEEPALIVE "/etcdserverpb.Lease/LeaseKeepAlive"
#define ET_LEASE_TTL "/etcdserverpb.Lease/LeaseTimeToLive"
#define ET_WATCH "/etcdserverpb.Watch/Watch"
#define ET_AUTHENTICATE "/etcdserverpb.Auth/Authenticate"

struct gt_etcd_client {
  int nep;
  char **eps;           /* "host:port" */
  grpc_channel **chans; /* one per endpoint */
  atomic_int cur;       /* endpoint tried first */
  atomic_int timeout_ms;
  char *user, *password;
  pthread_mutex_t mu; /* guards token, token_gen */
  char *token;
  unsigned token_gen;
  /* gRPC core moves connections (reconnects included) only while a thread
   * waits on a completion queue; this one always does. */
  grpc_completion_queue *idle_cq;
  pthread_t idle_thread;
};

/* One unary call, retried on other endpoints while they are unavailable
 * and once more after re-authenticating, all within the client's deadline.
 * On success *resp is the unpacked response (free with
 * protobuf_c_message_free_unpacked). `what` names the call in errors. */
gt_status et_unary(gt_etcd_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, const char *what);

/* Turns a finished call's status into a gt_status with a message. */
gt_status et_status(gt_etcd_client *c, int ep, grpc_status_code code, const char *details, const char *what);
/* Re-authenticates unless another thread did since token generation gen. */
gt_status et_reauth(gt_etcd_client *c, unsigned gen);
/* Copies the token (NULL without auth) and its generation. Free the copy. */
char *et_token(gt_etcd_client *c, unsigned *gen);
int et_is_auth_error(grpc_status_code code, const char *details);

/* A bidirectional stream, driven by the one thread that owns it. */
typedef enum { ET_EV_NONE, ET_EV_READ, ET_EV_WRITE, ET_EV_END } et_ev;

typedef struct et_stream {
  gt_etcd_client *c;
  int ep;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array md_in, trailers;
  grpc_byte_buffer *recv;
  grpc_status_code code;
  grpc_slice details;
  int pending; /* batches not yet completed */
  int reading, writing, ended, got_md;
  char tag_start, tag_read, tag_write, tag_status;
} et_stream;

/* Opens method on the client's current endpoint and starts reading. */
gt_status et_stream_open(et_stream *s, gt_etcd_client *c, const char *method);
/* Sends one message; only one write may be in flight (s->writing). */
gt_status et_stream_write(et_stream *s, const ProtobufCMessage *msg);
/* Waits until deadline (seconds, gt_now clock) for the next thing:
 * ET_EV_READ with *msg unpacked (NULL if malformed; reading restarts
 * automatically), ET_EV_WRITE when a write finished, ET_EV_END once the
 * call ended (s->code, s->details), ET_EV_NONE at the deadline. */
et_ev et_stream_poll(et_stream *s, double deadline, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg);
/* Cancels if needed, waits for every batch, frees everything. */
void et_stream_close(et_stream *s);
/* The ended call's status as a gt_status with a message. */
gt_status et_stream_status(et_stream *s, const char *what);

/* Conversions shared by kv.c, watch.c and store.c. */
gt_status et_kv_copy(const Mvccpb__KeyValue *src, gt_etcd_kv *dst);
/* The range end that makes key a prefix (malloc'ed into end->data). */
gt_status et_prefix_end(const char *key, ProtobufCBinaryData *end);
void et_sleep(double seconds);

#endif
