/* The wire: framed messages over non-blocking TCP sockets, with deadlines,
 * and the HMAC-SHA256 handshake that every connection passes first.
 *
 * A frame is a 16-byte header (magic, version, type, sequence, payload
 * length, little-endian) and the payload. Readers check every field before
 * trusting the length, so garbage from a stray connection is refused. */
#ifndef GIANT_PARALLEL_WIRE_H
#define GIANT_PARALLEL_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

#define GT_WIRE_MAGIC 0x4d435447u /* "GTCM" */
#define GT_WIRE_VERSION 2
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
gt_status gt_wire_send_all(int fd, const void *buf, size_t len, double deadline, const atomic_int *abort_flag);
gt_status gt_wire_recv_all(int fd, void *buf, size_t len, double deadline, const atomic_int *abort_flag);
gt_status gt_wire_send_frame(int fd, uint16_t type, uint32_t seq, const void *payload, uint32_t len, double deadline,
                             const atomic_int *abort_flag);
/* Reads a frame whose payload fits in cap; *payload_len gets its length. */
gt_status gt_wire_recv_frame(int fd, uint16_t type, gt_wire_hdr *h, void *payload, size_t cap, double deadline,
                             const atomic_int *abort_flag);

/* A listening socket on host (NULL = all addresses), port (0 = any, or
 * any of $GT_COMM_PORTS when set: ports.h). */
gt_status gt_wire_listen(const char *host, int port, int *fd, int *port_out);
/* Connects, retrying refused connections until the deadline. */
gt_status gt_wire_connect(const char *host, int port, double deadline, int *fd);
/* The same; on a timeout *err is the last attempt's errno (ETIMEDOUT,
 * ECONNREFUSED, ENETUNREACH...), for a caller that words its own message. */
gt_status gt_wire_connect_err(const char *host, int port, double deadline, int *fd, int *err);
/* Accepts one connection before the deadline. */
gt_status gt_wire_accept(int lfd, double deadline, const atomic_int *abort_flag, int *fd, char *peer, size_t peer_len);
/* Non-blocking, no Nagle, keepalive and a user timeout so a lost host is
 * noticed; bigger buffers for bulk data. */
void gt_wire_tune(int fd);

/* ---- sealed frames (seal.c) ----
 * After the handshake every frame is authenticated: its header is followed
 * by a tag (HMAC-SHA256 cut to 16 bytes) under a key of the sender's
 * direction, over the frame's count on the connection and the header; a
 * payload tag over the count and the payload may follow it, or the payload
 * may be encrypted, the tag then AES-256-GCM's. Both ends count frames, so
 * a forged, replayed, dropped or reordered frame fails. */
#define GT_WIRE_KEY 32
#define GT_WIRE_TAG 16
#define GT_WIRE_SEALED_HDR (GT_WIRE_HDR + GT_WIRE_TAG)

/* What a connection does to its payloads. Both ends must use the same: the
 * handshake carries each end's mode in its proofs and its keys, and fails
 * when they differ. */
typedef enum gt_wire_mode {
  GT_WIRE_HEADERS = 0, /* the payload as it is, its header tagged */
  GT_WIRE_MAC = 1,     /* a tag after the payload (AES-256-GMAC) */
  GT_WIRE_ENCRYPT = 2, /* the payload encrypted, its tag after it (AES-256-GCM) */
} gt_wire_mode;

/* One direction's tags, reused frame after frame: HMAC-SHA256 for headers,
 * AES-256-GMAC for payloads (seal.c says why). */
typedef struct gt_wire_mac {
  void *hmac;   /* EVP_MAC_CTX */
  void *gcm;    /* EVP_CIPHER_CTX */
  bool payload; /* the tag in progress is a payload's */
} gt_wire_mac;
gt_status gt_wire_mac_init(gt_wire_mac *m, const uint8_t key[GT_WIRE_KEY]);
void gt_wire_mac_free(gt_wire_mac *m);
/* A tag over (label, count, the bytes added), in pieces; label 'P' makes
 * a payload tag, any other a header tag. */
gt_status gt_wire_mac_start(gt_wire_mac *m, char label, uint64_t count);
gt_status gt_wire_mac_add(gt_wire_mac *m, const void *p, size_t n);
gt_status gt_wire_mac_tag(gt_wire_mac *m, uint8_t tag[GT_WIRE_TAG]);
/* Compares the tag so far with `tag` in constant time; a mismatch is
 * GT_EAUTH, logged, with `what` (the frame) in the message. */
gt_status gt_wire_mac_check(gt_wire_mac *m, const uint8_t tag[GT_WIRE_TAG], const char *what);

/* An encrypted payload (GT_WIRE_ENCRYPT), in pieces as its bytes stream:
 * AES-256-GCM under the payload key with the frame's count in its nonce.
 * The sender encrypts and ends with the tag; the receiver decrypts (in
 * place: out may be in) and ends with the check, GT_EAUTH, logged, when
 * the tag fails: "frame <count> from <from> failed its AES-GCM tag". */
gt_status gt_wire_crypt_start(gt_wire_mac *m, bool encrypt, uint64_t count);
gt_status gt_wire_crypt(gt_wire_mac *m, void *out, const void *in, size_t n);
gt_status gt_wire_crypt_tag(gt_wire_mac *m, uint8_t tag[GT_WIRE_TAG]);
gt_status gt_wire_crypt_check(gt_wire_mac *m, const uint8_t tag[GT_WIRE_TAG], uint64_t count, const char *from);

typedef struct gt_wire_session {
  gt_wire_mac tx, rx;
  uint64_t tx_count, rx_count; /* frames sent and received since the handshake */
  gt_wire_mode mode;           /* for gt_wire_send_sealed and _recv_sealed_payload: MAC or ENCRYPT */
} gt_wire_session;
/* HKDF-SHA256 of the secret, salted with the handshake's nonces, with the
 * context and the client's id in the info: one key per direction. */
gt_status gt_wire_derive_keys(const char *secret, const char *context, const uint8_t *nonces, size_t nonce_len,
                              uint32_t id, uint8_t client_to_server[GT_WIRE_KEY],
                              uint8_t server_to_client[GT_WIRE_KEY]);
/* Counts at 0, mode MAC (the handshake sets the mode it agreed on). */
gt_status gt_wire_session_open(gt_wire_session *s, const uint8_t tx_key[GT_WIRE_KEY],
                               const uint8_t rx_key[GT_WIRE_KEY]);
void gt_wire_session_close(gt_wire_session *s);
/* A header and its tag for the next frame sent (the caller counts it:
 * tx_count++ once the frame is whole); the check of one received, decoded
 * into *h. `from` names the peer in messages. */
gt_status gt_wire_seal_header(gt_wire_session *s, uint8_t out[GT_WIRE_SEALED_HDR], uint16_t type, uint32_t seq,
                              uint32_t len);
gt_status gt_wire_open_header(gt_wire_session *s, const uint8_t in[GT_WIRE_SEALED_HDR], gt_wire_hdr *h,
                              const char *from);
/* Whole frames with both tags (the store's requests and replies), the
 * payload encrypted when the session's mode is ENCRYPT. A received frame
 * is read as its header, checked before its length is trusted, then its
 * payload, which counts it. */
gt_status gt_wire_send_sealed(int fd, gt_wire_session *s, uint16_t type, uint32_t seq, const void *payload,
                              uint32_t len, double deadline, const atomic_int *abort_flag);
gt_status gt_wire_recv_sealed_header(int fd, gt_wire_session *s, gt_wire_hdr *h, const char *from, double deadline,
                                     const atomic_int *abort_flag);
gt_status gt_wire_recv_sealed_payload(int fd, gt_wire_session *s, void *payload, uint32_t len, const char *from,
                                      double deadline, const atomic_int *abort_flag);

/* The handshake. `context` binds the proof to one purpose (a store, one
 * communicator); `id` is the client's claimed rank, proven with the rest;
 * `mode` is this end's, which the peer's must equal: a peer that proves
 * the secret with another mode fails it with GT_EINVAL and a message
 * naming both (the server's *id then holds the peer's id). On success
 * *session (when not NULL) holds this end's keys for sealed frames, counts
 * at 0, and the mode; the caller closes it. */
gt_status gt_wire_auth_client(int fd, const char *secret, const char *context, gt_wire_mode mode, uint32_t id,
                              double deadline, gt_wire_session *session);
gt_status gt_wire_auth_server(int fd, const char *secret, const char *context, gt_wire_mode mode, uint32_t *id,
                              double deadline, gt_wire_session *session);

/* The job secret: `given`, else $GT_JOB_SECRET, else an error; one
 * shorter than GT_WIRE_SECRET_MIN bytes is refused. */
#define GT_WIRE_SECRET_MIN 16
gt_status gt_wire_secret(const char *given, const char **out);

#endif
