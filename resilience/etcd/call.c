/* Calls: one unary call with its deadline, failover between endpoints,
 * re-authentication, and the mapping of gRPC statuses to gt_status. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

char *et_token(gt_etcd_client *c, unsigned *gen) {
  pthread_mutex_lock(&c->mu);
  char *t = c->token ? strdup(c->token) : NULL;
  *gen = c->token_gen;
  pthread_mutex_unlock(&c->mu);
  return t;
}

int et_is_auth_error(grpc_status_code code, const char *details) {
  if (code == GRPC_STATUS_UNAUTHENTICATED) return 1;
  /* The token outlived a change of users or roles. */
  return details && strstr(details, "revision of auth store is old") != NULL;
}

gt_status et_status(gt_etcd_client *c, int ep, grpc_status_code code, const char *details, const char *what) {
  const char *at = c->eps[ep];
  const char *d = details && *details ? details : "no details";
  switch (code) {
    case GRPC_STATUS_OK: return GT_OK;
    case GRPC_STATUS_UNAVAILABLE:
      return gt_errorf(GT_ECONN,
                       "%s: etcd at %s is unavailable (%s); check that it runs, the "
                       "endpoint, and the TLS settings",
                       what, at, d);
    case GRPC_STATUS_DEADLINE_EXCEEDED:
      return gt_errorf(GT_ETIMEDOUT, "%s: etcd at %s did not answer within %d ms (%s)", what, at,
                       atomic_load(&c->timeout_ms), d);
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
      return gt_errorf(GT_EAUTH,
                       "%s: etcd at %s refused access (%s); check --user/--password "
                       "and the user's roles",
                       what, at, d);
    case GRPC_STATUS_INVALID_ARGUMENT:
      if (strstr(d, "authentication failed") || strstr(d, "user name is empty") || strstr(d, "auth"))
        return gt_errorf(GT_EAUTH,
                         "%s: etcd at %s: %s; check the user and password (the "
                         "server has authentication on)",
                         what, at, d);
      return gt_errorf(GT_EINVAL, "%s: etcd at %s rejected the request: %s", what, at, d);
    case GRPC_STATUS_NOT_FOUND: return gt_errorf(GT_ENOTFOUND, "%s: %s", what, d);
    case GRPC_STATUS_OUT_OF_RANGE: return gt_errorf(GT_ERANGE, "%s: %s", what, d);
    case GRPC_STATUS_CANCELLED: return gt_errorf(GT_ECANCELED, "%s: cancelled (%s)", what, d);
    case GRPC_STATUS_FAILED_PRECONDITION:
      if (strstr(d, "auth")) return gt_errorf(GT_EAUTH, "%s: etcd at %s: %s", what, at, d);
      return gt_errorf(GT_ESTATE, "%s: etcd at %s: %s", what, at, d);
    default: return gt_errorf(GT_EBACKEND, "%s: etcd at %s failed with gRPC status %d (%s)", what, at, (int)code, d);
  }
}

static gpr_timespec abs_deadline(double t) {
  double left = t - gt_now();
  if (left < 0) left = 0;
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_micros((int64_t)(left * 1e6), GPR_TIMESPAN));
}

/* One attempt on one endpoint. Returns the call's status code; *resp gets
 * the response bytes on OK, *details the status text (malloc'ed). */
static grpc_status_code attempt(gt_etcd_client *c, int ep, const char *method, const grpc_slice *req, const char *token,
                                double deadline, grpc_slice *resp, char **details) {
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_slice mslice = grpc_slice_from_static_string(method);
  grpc_call *call = grpc_channel_create_call(c->chans[ep], NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL,
                                             abs_deadline(deadline), NULL);
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  if (token) {
    md.key = grpc_slice_from_static_string("token");
    md.value = grpc_slice_from_copied_string(token);
  }
  grpc_slice s = grpc_slice_ref(*req);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_byte_buffer *recv = NULL;
  grpc_metadata_array md_in, trailers;
  grpc_metadata_array_init(&md_in);
  grpc_metadata_array_init(&trailers);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice det = grpc_empty_slice();
  const char *errstr = NULL;

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = token ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = token ? &md : NULL;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailers;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &det;
  ops[5].data.recv_status_on_client.error_string = &errstr;
  static char tag;
  grpc_call_error e = grpc_call_start_batch(call, ops, 6, &tag, NULL);
  if (e == GRPC_CALL_OK) {
    /* gRPC ends the call at its deadline; the margin only guards against
     * a call that never completes, which is then cancelled. */
    grpc_event ev = grpc_completion_queue_next(cq, abs_deadline(deadline + 2.0), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      grpc_call_cancel(call, NULL);
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
  } else {
    code = GRPC_STATUS_INTERNAL;
  }
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {}
  grpc_completion_queue_destroy(cq);

  *resp = grpc_empty_slice();
  if (code == GRPC_STATUS_OK && recv) {
    grpc_byte_buffer_reader r;
    if (grpc_byte_buffer_reader_init(&r, recv)) {
      *resp = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
    }
  } else if (code == GRPC_STATUS_OK) {
    code = GRPC_STATUS_INTERNAL;
  }
  size_t dl = GRPC_SLICE_LENGTH(det);
  const char *extra = (code != GRPC_STATUS_OK && errstr && dl == 0) ? errstr : "";
  size_t el = strlen(extra);
  *details = malloc(dl + el + 1);
  if (*details) {
    memcpy(*details, GRPC_SLICE_START_PTR(det), dl);
    memcpy(*details + dl, extra, el);
    (*details)[dl + el] = 0;
  }
  if (errstr) gpr_free((void *)errstr);
  grpc_slice_unref(det);
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&md_in);
  grpc_metadata_array_destroy(&trailers);
  if (token) grpc_slice_unref(md.value);
  return code;
}

/* UNAVAILABLE says nothing about whether the server got the request,
 * except when no connection was ever made. */
static int never_sent(const char *details) {
  return details && (strstr(details, "failed to connect") || strstr(details, "empty address list") ||
                     strstr(details, "Connection refused"));
}

static gt_status unary(gt_etcd_client *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, const char *what,
                       int with_auth) {
  *resp = NULL;
  int timeout = atomic_load(&c->timeout_ms);
  double deadline = gt_now() + timeout / 1000.0;
  size_t n = protobuf_c_message_get_packed_size(req);
  grpc_slice req_slice = grpc_slice_malloc(n);
  protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(req_slice));
  int reauthed = 0, failures = 0;
  int idempotent = strcmp(method, ET_KV_TXN) != 0;
  double backoff = 0.02;
  gt_status st = GT_OK;
  for (;;) {
    int ep = atomic_load(&c->cur) % c->nep;
    unsigned gen = 0;
    char *token = with_auth ? et_token(c, &gen) : NULL;
    grpc_slice out;
    char *details = NULL;
    grpc_status_code code = attempt(c, ep, method, &req_slice, token, deadline, &out, &details);
    free(token);
    if (code == GRPC_STATUS_OK) {
      *resp = protobuf_c_message_unpack(resp_desc, NULL, GRPC_SLICE_LENGTH(out), GRPC_SLICE_START_PTR(out));
      grpc_slice_unref(out);
      free(details);
      st = *resp ? GT_OK
                 : gt_errorf(GT_EFORMAT, "%s: etcd at %s sent a malformed %s", what, c->eps[ep], resp_desc->name);
      break;
    }
    grpc_slice_unref(out);
    if (code == GRPC_STATUS_UNAVAILABLE && !idempotent && !never_sent(details)) {
      /* Sending it again could apply a compare-and-swap twice. */
      st = gt_errorf(GT_ECONN,
                     "%s: the connection to etcd at %s broke during the call (%s); it "
                     "may or may not have been applied: re-read before retrying",
                     what, c->eps[ep], details ? details : "");
      free(details);
      break;
    }
    if (code == GRPC_STATUS_UNAVAILABLE) {
      /* Fail over; after a full round of refusals, back off briefly. */
      st = et_status(c, ep, code, details, what);
      free(details);
      atomic_compare_exchange_strong(&c->cur, &ep, (ep + 1) % c->nep);
      if (++failures % c->nep == 0) {
        double left = deadline - gt_now();
        if (left <= 0) break;
        et_sleep(backoff < left ? backoff : left);
        backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
      }
      if (gt_now() >= deadline) break;
      continue;
    }
    if (with_auth && c->user && !reauthed && et_is_auth_error(code, details)) {
      free(details);
      reauthed = 1;
      st = et_reauth(c, gen);
      if (st != GT_OK) break;
      continue;
    }
    st = et_status(c, ep, code, details, what);
    free(details);
    break;
  }
  grpc_slice_unref(req_slice);
  if (st == GT_ECONN && c->nep > 1)
    gt_error_context(st, "no etcd endpoint of %d answered within %d ms", c->nep, timeout);
  return st;
}

gt_status et_unary(gt_etcd_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, const char *what) {
  return unary(c, method, req, resp_desc, resp, what, 1);
}

gt_status et_reauth(gt_etcd_client *c, unsigned gen) {
  pthread_mutex_lock(&c->mu);
  int fresh = c->token && c->token_gen != gen;
  pthread_mutex_unlock(&c->mu);
  if (fresh) return GT_OK;
  gt_debug("etcd: authenticating as '%s'", c->user);
  Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
  req.name = c->user;
  req.password = c->password;
  ProtobufCMessage *m = NULL;
  char what[300];
  snprintf(what, sizeof what, "authenticating etcd user '%s'", c->user);
  gt_status st = unary(c, ET_AUTHENTICATE, &req.base, &etcdserverpb__authenticate_response__descriptor, &m, what, 0);
  if (st != GT_OK) return st;
  Etcdserverpb__AuthenticateResponse *r = (Etcdserverpb__AuthenticateResponse *)m;
  char *t = strdup(r->token ? r->token : "");
  protobuf_c_message_free_unpacked(m, NULL);
  if (!t) return gt_errorf(GT_ENOMEM, "out of memory");
  pthread_mutex_lock(&c->mu);
  free(c->token);
  c->token = t;
  c->token_gen++;
  pthread_mutex_unlock(&c->mu);
  return GT_OK;
}
