/* A bidirectional gRPC stream owned and driven by one thread: one read
 * always posted, at most one write in flight, status collected at the end.
 * Watches and lease keepalives are built on it. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/time.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

static gpr_timespec until(double t) {
  double left = t - gt_now();
  if (left < 0) left = 0;
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_micros((int64_t)(left * 1e6), GPR_TIMESPAN));
}

static int start_read(et_stream *s) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->got_md) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
    s->got_md = 1;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &s->recv;
  if (grpc_call_start_batch(s->call, ops, n, &s->tag_read, NULL) != GRPC_CALL_OK) return -1;
  s->pending++;
  s->reading = 1;
  return 0;
}

gt_status et_stream_open(et_stream *s, gt_etcd_client *c, const char *method) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->ep = atomic_load(&c->cur) % c->nep;
  s->code = GRPC_STATUS_UNKNOWN;
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->md_in);
  grpc_metadata_array_init(&s->trailers);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  s->call =
      grpc_channel_create_call(c->chans[s->ep], NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                               grpc_slice_from_static_string(method), NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  unsigned gen;
  char *token = et_token(c, &gen);
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  if (token) {
    md.key = grpc_slice_from_static_string("token");
    md.value = grpc_slice_from_copied_string(token);
  }
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = token ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = token ? &md : NULL;
  grpc_call_error e = grpc_call_start_batch(s->call, ops, 1, &s->tag_start, NULL);
  if (token) grpc_slice_unref(md.value);
  free(token);
  if (e == GRPC_CALL_OK) {
    s->pending++;
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &s->trailers;
    ops[0].data.recv_status_on_client.status = &s->code;
    ops[0].data.recv_status_on_client.status_details = &s->details;
    e = grpc_call_start_batch(s->call, ops, 1, &s->tag_status, NULL);
  }
  if (e == GRPC_CALL_OK) {
    s->pending++;
    if (start_read(s) != 0) e = GRPC_CALL_ERROR;
  }
  if (e != GRPC_CALL_OK) {
    et_stream_close(s);
    return gt_errorf(GT_EBACKEND, "gRPC refused to start a stream to %s (error %d)", c->eps[s->ep], (int)e);
  }
  return GT_OK;
}

gt_status et_stream_write(et_stream *s, const ProtobufCMessage *msg) {
  if (s->writing || s->ended) return gt_errorf(GT_ESTATE, "etcd stream busy or ended");
  size_t n = protobuf_c_message_get_packed_size(msg);
  grpc_slice sl = grpc_slice_malloc(n);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  grpc_call_error e = grpc_call_start_batch(s->call, &op, 1, &s->tag_write, NULL);
  /* gRPC takes its own reference to the payload at batch start. */
  grpc_byte_buffer_destroy(bb);
  if (e != GRPC_CALL_OK) return gt_errorf(GT_EBACKEND, "gRPC refused a stream write (error %d)", (int)e);
  s->pending++;
  s->writing = 1;
  return GT_OK;
}

et_ev et_stream_poll(et_stream *s, double deadline, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg) {
  if (msg) *msg = NULL;
  for (;;) {
    if (s->ended && s->pending == 0) return ET_EV_END;
    grpc_event ev = grpc_completion_queue_next(s->cq, until(deadline), NULL);
    if (ev.type != GRPC_OP_COMPLETE) return ET_EV_NONE;
    s->pending--;
    if (ev.tag == &s->tag_status) {
      s->ended = 1;
      continue;
    }
    if (ev.tag == &s->tag_write) {
      s->writing = 0;
      if (!s->ended) return ET_EV_WRITE;
      continue;
    }
    if (ev.tag == &s->tag_read) {
      s->reading = 0;
      grpc_byte_buffer *bb = s->recv;
      s->recv = NULL;
      if (!ev.success || !bb) {
        /* The server closed its side: only the status is left to come. */
        if (bb) grpc_byte_buffer_destroy(bb);
        continue;
      }
      grpc_byte_buffer_reader r;
      ProtobufCMessage *m = NULL;
      if (grpc_byte_buffer_reader_init(&r, bb)) {
        grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
        grpc_byte_buffer_reader_destroy(&r);
        m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
        grpc_slice_unref(sl);
      }
      grpc_byte_buffer_destroy(bb);
      if (start_read(s) != 0) grpc_call_cancel(s->call, NULL);
      if (msg)
        *msg = m;
      else if (m)
        protobuf_c_message_free_unpacked(m, NULL);
      return ET_EV_READ;
    }
    /* tag_start: nothing to do. */
  }
}

void et_stream_close(et_stream *s) {
  if (s->call) {
    if (!s->ended) grpc_call_cancel(s->call, NULL);
    while (s->pending > 0) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type != GRPC_OP_COMPLETE) break;
      s->pending--;
      if (ev.tag == &s->tag_status) s->ended = 1;
    }
    grpc_call_unref(s->call);
    s->call = NULL;
  }
  if (s->recv) grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  if (s->cq) {
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {}
    grpc_completion_queue_destroy(s->cq);
    s->cq = NULL;
  }
  grpc_metadata_array_destroy(&s->md_in);
  grpc_metadata_array_destroy(&s->trailers);
  grpc_slice_unref(s->details);
  s->details = grpc_empty_slice();
}

gt_status et_stream_status(et_stream *s, const char *what) {
  char buf[512];
  size_t n = GRPC_SLICE_LENGTH(s->details);
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, GRPC_SLICE_START_PTR(s->details), n);
  buf[n] = 0;
  if (s->code == GRPC_STATUS_OK) return gt_errorf(GT_ECONN, "%s: etcd at %s closed the stream", what, s->c->eps[s->ep]);
  return et_status(s->c, s->ep, s->code, buf, what);
}
