/* Fuzz target: the TCP store server's request handling
 * (comm/store_tcp_server.c, protocol in comm/store_tcp.h). Its parser is
 * internal to the server, so a real server runs in this process on
 * 127.0.0.1 and each input is one connection to it: the harness passes
 * the handshake with the job's secret, as a rank would, and sends the
 * input as requests.
 *
 * The input is  mode u8 | rest.  Mode bit 0 clear: rest is requests, each
 * len u16 | payload (the last takes what is left), sent as sealed
 * GT_MSG_STORE_REQ frames one at a time, each reply read before the next
 * request. Bit 0 set: rest goes raw onto the connection after the
 * handshake, for the server's frame checks. The connection is closed at
 * the end of the input.
 *
 * A request the server does not answer within REPLY_S (a WAIT or GET on a
 * missing key, blocked for its timeout) ends the input; its thread stays
 * blocked in the server, and after MAX_STUCK such inputs the server is
 * restarted, which releases them (a restart costs far more than an input).
 * Every CHECK_EVERY inputs, before a restart and at exit, a fresh client
 * (the public gt_store API) must still set and get a key: if not, the
 * harness aborts, and the input that broke the server is among the last
 * ones run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/store_tcp.h"
#include "comm/wire.h"
#include "giant/log.h"
#include "giant/engine/store.h"

#define SECRET "fuzz-secret-0123456789abcdef"
#define REPLY_S 0.025
#define MAX_STUCK 32
#define CHECK_EVERY 256
#define RESTART_EVERY 20000 /* the map only grows: keep its lookups fast */
#define MAX_REPLY (16u << 20)

static gt_store_server *server;
static int port;
static unsigned long inputs;
static int stuck_inputs; /* their threads still blocked in the server */

static void start_server(void) {
  if (gt_store_server_start("127.0.0.1", 0, SECRET, &server) != GT_OK) {
    fprintf(stderr, "fuzz_store_proto: cannot start the store: %s\n", gt_last_error());
    abort();
  }
  port = gt_store_server_port(server);
}

/* A client of the public API sets a key and reads it back. */
static void check_alive(void) {
  gt_store_tcp_config cfg = {.host = "127.0.0.1", .port = port, .secret = SECRET, .timeout_ms = 5000};
  gt_store *s = NULL;
  char want[32], key[] = "fuzz/alive";
  snprintf(want, sizeof want, "%lu", inputs);
  void *got = NULL;
  size_t len = 0;
  gt_status st = gt_store_tcp_open(&cfg, &s);
  if (st == GT_OK) st = gt_store_set(s, key, want, strlen(want));
  if (st == GT_OK) st = gt_store_get(s, key, &got, &len, 5000);
  bool same = st == GT_OK && len == strlen(want) && memcmp(got, want, len) == 0;
  free(got);
  if (s) gt_store_destroy(s);
  if (!same) {
    fprintf(stderr, "fuzz_store_proto: the store no longer serves a real client after %lu inputs: %s\n", inputs,
            st == GT_OK ? "it returned another value" : gt_last_error());
    abort();
  }
}

static void restart_server(void) {
  check_alive();
  gt_store_server_stop(server);
  start_server();
  stuck_inputs = 0;
}

static void at_exit(void) {
  check_alive();
  gt_store_server_stop(server);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  start_server();
  /* A first client before fuzzing; it also starts libcrypto, whose own exit
   * handler must run after this one (they run in reverse order). */
  check_alive();
  atexit(at_exit);
  return 0;
}

/* A reply that fails its seal came from the real server: a bug in the
 * sealing or in the counting of frames. */
static void check_not_forged(gt_status st) {
  if (st != GT_EAUTH) return;
  fprintf(stderr, "fuzz_store_proto: a reply of the store failed its seal: %s\n", gt_last_error());
  abort();
}

/* Sends one request and reads its reply; false when the server did not
 * answer in time (or refused the request and closed). */
static bool request(int fd, gt_wire_session *sess, uint32_t seq, const uint8_t *p, uint32_t n, bool *stuck) {
  double deadline = gt_now() + REPLY_S;
  if (gt_wire_send_sealed(fd, sess, GT_MSG_STORE_REQ, seq, p, n, deadline, NULL) != GT_OK) return false;
  gt_wire_hdr h;
  gt_status st = gt_wire_recv_sealed_header(fd, sess, &h, "the store", deadline, NULL);
  check_not_forged(st);
  if (st == GT_ETIMEDOUT) *stuck = true;
  if (st != GT_OK) return false;
  /* A reply the server sealed properly says what it answers. */
  if (h.type != GT_MSG_STORE_REP || h.seq != seq || h.len < 4 || h.len > MAX_REPLY) abort();
  uint8_t *rep = malloc(h.len);
  if (!rep) abort();
  st = gt_wire_recv_sealed_payload(fd, sess, rep, h.len, "the store", deadline, NULL);
  check_not_forged(st);
  if (st == GT_ETIMEDOUT) *stuck = true;
  free(rep);
  return st == GT_OK;
}

/* Waits for the server to finish with the connection: it closes its end
 * once it has seen ours close, so what the input made it do is done (and
 * counted as this input's coverage) before the next input. */
static bool drain(int fd) {
  shutdown(fd, SHUT_WR);
  double deadline = gt_now() + REPLY_S;
  uint8_t buf[4096];
  for (;;) {
    gt_status st = gt_wire_recv_all(fd, buf, sizeof buf, deadline, NULL);
    if (st == GT_ETIMEDOUT) return false;
    if (st != GT_OK) return true; /* closed */
  }
}

static bool send_requests(int fd, gt_wire_session *sess, const uint8_t *p, size_t n) {
  bool stuck = false;
  for (uint32_t seq = 1; n > 0; seq++) {
    size_t len = n < 2 ? 0 : (size_t)p[0] | (size_t)p[1] << 8;
    size_t head = n < 2 ? n : 2;
    p += head;
    n -= head;
    if (len > n) len = n;
    if (!request(fd, sess, seq, p, (uint32_t)len, &stuck)) break;
    p += len;
    n -= len;
  }
  return stuck;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  inputs++;
  int fd = -1;
  gt_wire_session sess;
  uint32_t id = 0;
  double deadline = gt_now() + 5;
  if (gt_wire_connect("127.0.0.1", port, deadline, &fd) != GT_OK ||
      gt_wire_auth_client(fd, SECRET, STORE_CTX, GT_WIRE_MAC, id, deadline, &sess) != GT_OK) {
    fprintf(stderr, "fuzz_store_proto: the store refused a real client's handshake: %s\n", gt_last_error());
    abort();
  }
  bool stuck = false;
  if (data[0] & 1)
    (void)gt_wire_send_all(fd, data + 1, size - 1, gt_now() + REPLY_S, NULL);
  else
    stuck = send_requests(fd, &sess, data + 1, size - 1);
  if (!stuck) stuck = !drain(fd);
  gt_wire_session_close(&sess);
  close(fd);
  if (stuck) stuck_inputs++;
  if (stuck_inputs == MAX_STUCK || inputs % RESTART_EVERY == 0)
    restart_server();
  else if (inputs % CHECK_EVERY == 0)
    check_alive();
  return 0;
}
