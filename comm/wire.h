/* The wire: framed messages over non-blocking TCP sockets, with deadlines,
 * and the HMAC-SHA256 handshake that every connection passes first.
 *
 * A frame is a 16-byte header (magic, version, type, sequence, payload
 * length, little-endian) and the payload. Readers check every field before
 * trusting the length, so garbage from a stray connection is refused. */
#ifndef GIANT_PARALLEL_WIRE_H
#define GIANT_PARALLEL_WIRE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

#define GT_WIRE_MAGIC 0x4d435447u /* "GTCM" */
#define GT_WIRE_VERSION 1
#define GT_WIRE_HDR 16

enum {
  GT_MSG_HELLO = 1,
  GT_MSG_CHALLENGE = 2,
  GT_MSG_PROOF = 3,
  GT_MSG_ACCEPT = 4,
  GT_MSG_REJECT = 5,
  GT_MSG_DATA = 16,
  GT_MSG_STORE_REQ = 32,
  GT_MSG_STORE_REP = 33,
};

typedef struct gt_wire_hdr {
  uint32_t magic;
  uint16_t version, type;
  uint32_t seq, len;
} gt_wire_hdr;

void gt_wire_hdr_encode(uint8_t out[GT_WIRE_HDR], uint16_t type, uint32_t seq, uint32_t len);
/* Checks magic and version. */
gt_status gt_wire_hdr_decode(const uint8_t in[GT_WIRE_HDR], gt_wire_hdr *h);
/* Checks the header against what the protocol expects next. */
gt_status gt_wire_hdr_expect(const gt_wire_hdr *h, uint16_t type, uint32_t seq, uint32_t len);

/* Absolute deadline on gt_now()'s clock from a timeout in ms (< 0: none). */
double gt_wire_deadline(int timeout_ms);

/* Blocking transfers on a non-blocking fd, bounded by the deadline, and
 * stopped early when *abort_flag becomes non-zero (may be NULL). */
gt_status gt_wire_send_all(int fd, const void *buf, size_t len, double deadline,
                           const atomic_int *abort_flag);
gt_status gt_wire_recv_all(int fd, void *buf, size_t len, double deadline,
                           const atomic_int *abort_flag);
gt_status gt_wire_send_frame(int fd, uint16_t type, uint32_t seq, const void *payload,
                             uint32_t len, double deadline, const atomic_int *abort_flag);
/* Reads a frame whose payload fits in cap; *payload_len gets its length. */
gt_status gt_wire_recv_frame(int fd, uint16_t type, gt_wire_hdr *h, void *payload, size_t cap,
                             double deadline, const atomic_int *abort_flag);

/* A listening socket on host (NULL = all addresses), port (0 = any). */
gt_status gt_wire_listen(const char *host, int port, int *fd, int *port_out);
/* Connects, retrying refused connections until the deadline. */
gt_status gt_wire_connect(const char *host, int port, double deadline, int *fd);
/* Accepts one connection before the deadline. */
gt_status gt_wire_accept(int lfd, double deadline, const atomic_int *abort_flag, int *fd,
                         char *peer, size_t peer_len);
/* Non-blocking, no Nagle, keepalive and a user timeout so a lost host is
 * noticed; bigger buffers for bulk data. */
void gt_wire_tune(int fd);

/* The handshake. `context` binds the proof to one purpose (a store, one
 * communicator); `id` is the client's claimed rank, proven with the rest. */
gt_status gt_wire_auth_client(int fd, const char *secret, const char *context, uint32_t id,
                              double deadline);
gt_status gt_wire_auth_server(int fd, const char *secret, const char *context, uint32_t *id,
                              double deadline);

/* The job secret: `given`, else $GT_JOB_SECRET, else an error; one
 * shorter than GT_WIRE_SECRET_MIN bytes is refused. */
#define GT_WIRE_SECRET_MIN 16
gt_status gt_wire_secret(const char *given, const char **out);

#endif
