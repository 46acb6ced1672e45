/* Fuzz target: the server side of the connection handshake
 * (gt_wire_auth_server, comm/auth.c). The input is what a client sends:
 * it is written into a socketpair whose writing end then shuts down
 * (its reading end stays open, so the server's challenge and rejection
 * are sent as to a live peer), and the server runs on the other end with
 * a deadline of 0.2 s. It must refuse every input, without crashing or
 * waiting past its deadline: its nonce is fresh, so no input can hold the
 * right proof. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/wire.h"
#include "giant/log.h"

#define SECRET "fuzz-secret-0123456789abcdef"
#define MAX_STREAM (64u << 10) /* under a socketpair's buffer: the write never blocks */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
  size_t n = size < MAX_STREAM ? size : MAX_STREAM;
  if (n && write(sv[1], data, n) != (ssize_t)n) abort();
  shutdown(sv[1], SHUT_WR);
  uint32_t id = 0;
  gt_wire_session session;
  double start = gt_now();
  gt_status st = gt_wire_auth_server(sv[0], SECRET, "giant-store", GT_WIRE_MAC, &id, start + 0.2, &session);
  if (st == GT_OK) abort(); /* a proof made without the nonce */
  /* The deadline bounds the handshake; a second is room for a loaded machine. */
  if (gt_now() - start > 1.2) abort();
  close(sv[0]);
  close(sv[1]);
  return 0;
}
