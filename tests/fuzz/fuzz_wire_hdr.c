/* Fuzz target: the wire's frame headers and frame reader (comm/wire.h).
 * The first 16 bytes go through gt_wire_hdr_decode and gt_wire_hdr_expect;
 * then the whole input is written into a socketpair, the writing end is
 * closed, and gt_wire_recv_frame reads frames from the other end until it
 * refuses one, as a reader of a stray or hostile connection would, with
 * gt_wire_recv_all taking what is left. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/wire.h"
#include "giant/log.h"

#define MAX_STREAM (64u << 10) /* under a socketpair's buffer: the write never blocks */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  return 0;
}

static void check_header(const uint8_t *data) {
  gt_wire_hdr h;
  if (gt_wire_hdr_decode(data, &h) != GT_OK) return;
  /* A header that decodes is exactly what encode writes for its fields. */
  uint8_t again[GT_WIRE_HDR];
  gt_wire_hdr_encode(again, h.type, h.seq, h.len);
  if (memcmp(again, data, GT_WIRE_HDR) != 0) abort();
  if (gt_wire_hdr_expect(&h, h.type, h.seq, h.len) != GT_OK) abort();
  if (gt_wire_hdr_expect(&h, h.type, h.seq + 1, h.len) == GT_OK) abort();
  (void)gt_wire_hdr_expect(&h, GT_MSG_DATA, 0, 0);
}

static void read_stream(const uint8_t *data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
  size_t n = size < MAX_STREAM ? size : MAX_STREAM;
  if (n && write(sv[1], data, n) != (ssize_t)n) abort();
  close(sv[1]);
  /* Expected types and payload caps vary frame by frame, as they do
   * between the handshake, the store and collectives. */
  static const uint16_t types[] = {GT_MSG_HELLO, GT_MSG_DATA, GT_MSG_STORE_REQ, GT_MSG_PROOF};
  static const size_t caps[] = {36, 4096, 0, 32};
  uint8_t payload[4096];
  double deadline = gt_now() + 0.05;
  for (int i = 0;; i++) {
    gt_wire_hdr h;
    if (gt_wire_recv_frame(sv[0], types[i % 4], &h, payload, caps[i % 4], deadline, NULL) != GT_OK) break;
    if (h.type != types[i % 4] || h.len > caps[i % 4]) abort();
  }
  uint8_t rest[64];
  (void)gt_wire_recv_all(sv[0], rest, sizeof rest, deadline, NULL);
  close(sv[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= GT_WIRE_HDR) check_header(data);
  read_stream(data, size);
  return 0;
}
