/* Encryption as seen from the wire: two ranks, each in a network namespace
 * of its own on a bridge (tests/localkit/netns.c), all-reduce a tensor whose
 * bytes are a recognisable pattern over TCP, while a raw AF_PACKET socket
 * in the root namespace captures every frame on rank 0's link. Without
 * encryption the pattern is on the wire: the control, which shows that the
 * capture sees the payloads. With GT_COMM_ENCRYPT=1 (what giantrun
 * --comm-encrypt gives its workers) no 64 bytes of it are. The sums are
 * right both times. Needs root and `ip`; skipped (77) without them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "localkit/netns.h"
#include "common/gt_skip.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"
#include "giant/log.h"

#define SECRET "capture-test-secret-0123456789"
/* 16 KiB of floats: several full TCP segments of the pattern each way. */
#define COUNT 4096
#define NEEDLE 64
/* Every wait: forming a group and one small all-reduce take milliseconds
 * between namespaces; a minute is room for sanitizers on loaded cores. */
#define WAIT_S 60
#define CAPTURE_MAX (32u << 20)

static chaos_net net;
static const char *unsupported = "";
static pid_t store_pid = -1;
static int store_port;

/* Distinctive bytes: no two floats alike, none a small integer; their sum
 * over two ranks, 2x, is exact. */
static float pattern(size_t i) { return 1234.5678f + 0.37f * (float)i; }

/* ---- the store, in a process of its own in the root namespace ---- */

static int start_store(void) {
  int p[2];
  if (pipe(p)) return -1;
  store_pid = fork();
  if (store_pid == 0) {
    close(p[0]);
    gt_store_tcp_config cfg = {.host = net.host_ip, .is_host = true, .secret = SECRET};
    gt_store *srv = NULL;
    int port = gt_store_tcp_open(&cfg, &srv) == GT_OK ? gt_store_tcp_port(srv) : -1;
    if (write(p[1], &port, sizeof port) != sizeof port) _exit(1);
    close(p[1]);
    pause(); /* until the test's SIGTERM */
    _exit(0);
  }
  close(p[1]);
  int ok = store_pid > 0 && read(p[0], &store_port, sizeof store_port) == sizeof store_port && store_port > 0;
  close(p[0]);
  return ok ? 0 : -1;
}

/* ---- a rank, in node r's namespace ---- */

static int rank_main(int r, bool encrypt, const char *prefix) {
  char path[128];
  snprintf(path, sizeof path, "/var/run/netns/%s", net.ns[r]);
  int nsfd = open(path, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "rank %d: cannot enter %s: %s\n", r, path, strerror(errno));
    return 1;
  }
  close(nsfd);
  /* As giantrun's workers get it: the group reads the environment. */
  if (encrypt)
    setenv("GT_COMM_ENCRYPT", "1", 1);
  else
    unsetenv("GT_COMM_ENCRYPT");
  gt_store_tcp_config sc = {.host = net.host_ip, .port = store_port, .secret = SECRET, .timeout_ms = WAIT_S * 1000};
  gt_store *s = NULL;
  gt_comm *c = NULL;
  gt_status st = gt_store_tcp_open(&sc, &s);
  gt_comm_config cc = {.store = s,
                       .prefix = prefix,
                       .rank = r,
                       .size = 2,
                       .secret = SECRET,
                       .host = net.ip[r],
                       .transport = GT_COMM_TCP,
                       .init_timeout_ms = WAIT_S * 1000,
                       .op_timeout_ms = WAIT_S * 1000};
  if (st == GT_OK) st = gt_comm_init(&cc, &c);
  static float x[COUNT];
  for (size_t i = 0; i < COUNT; i++) x[i] = pattern(i);
  if (st == GT_OK) st = gt_comm_allreduce(c, x, COUNT, GT_F32, GT_COMM_SUM);
  int bad = 0;
  for (size_t i = 0; st == GT_OK && i < COUNT; i++) bad += x[i] != 2.0f * pattern(i);
  if (st != GT_OK) fprintf(stderr, "rank %d: %s\n", r, gt_last_error());
  if (bad) fprintf(stderr, "rank %d: %d wrong sums\n", r, bad);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return st == GT_OK && !bad ? 0 : 1;
}

/* ---- the capture ---- */

typedef struct capture {
  uint8_t *buf;
  size_t len;
  size_t packets;
} capture;

/* Every frame on the link, both ways, from now on. */
static int open_capture(const char *ifname) {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
  if (fd < 0) return -1;
  int big = 16 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  struct sockaddr_ll sa = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL)};
  sa.sll_ifindex = (int)if_nametoindex(ifname);
  if (sa.sll_ifindex == 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Appends what the socket holds; frames end to end (a needle split by a
 * frame's headers is simply not found, and most are whole). */
static void drain(int fd, capture *cap) {
  static uint8_t frame[1 << 18]; /* offloaded segments can reach 64 KiB */
  for (;;) {
    ssize_t n = recv(fd, frame, sizeof frame, 0);
    if (n <= 0) return;
    cap->packets++;
    if (cap->len + (size_t)n > CAPTURE_MAX) continue;
    memcpy(cap->buf + cap->len, frame, (size_t)n);
    cap->len += (size_t)n;
  }
}

/* The pattern's NEEDLE-byte pieces found in the capture, of how many. */
static int needles_found(const capture *cap, int *of) {
  static float x[COUNT];
  for (size_t i = 0; i < COUNT; i++) x[i] = pattern(i);
  const uint8_t *p = (const uint8_t *)x;
  int found = 0;
  *of = 0;
  for (size_t off = 0; off + NEEDLE <= sizeof x; off += NEEDLE, ++*of)
    found += memmem(cap->buf, cap->len, p + off, NEEDLE) != NULL;
  return found;
}

/* Runs both ranks while capturing rank 0's link; their exit codes. */
static void run_ranks(bool encrypt, capture *cap, int codes[2]) {
  int fd = open_capture(net.veth[0]);
  if (fd < 0) fail_msg("cannot capture on %s: %s", net.veth[0], strerror(errno));
  cap->len = cap->packets = 0;
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(fd);
      _exit(rank_main(r, encrypt, encrypt ? "capture/encrypted" : "capture/plain"));
    }
  }
  double deadline = gt_now() + WAIT_S * 2;
  int left = 2;
  codes[0] = codes[1] = -1;
  while (left > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    poll(&pf, 1, 20);
    drain(fd, cap);
    for (int r = 0; r < 2; r++) {
      int status;
      if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = -1;
        left--;
      }
    }
    if (left > 0 && gt_now() > deadline) {
      for (int r = 0; r < 2; r++)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
        }
      break;
    }
  }
  /* The last frames (FINs, and anything the kernel still queued). */
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  while (poll(&pf, 1, 200) > 0) drain(fd, cap);
  close(fd);
}

static int teardown(void **state) {
  (void)state;
  if (store_pid > 0) {
    kill(store_pid, SIGTERM);
    waitpid(store_pid, NULL, 0);
  }
  if (!*unsupported) chaos_net_destroy(&net);
  return 0;
}

static int setup(void **state) {
  (void)state;
  unsupported = chaos_unsupported();
  if (*unsupported) return 0;
  chaos_sweep(); /* what killed runs left */
  if (chaos_net_create(&net, 2) != 0) return -1;
  if (start_store() != 0) {
    fprintf(stderr, "cannot start the store on %s\n", net.host_ip);
    teardown(state);
    return -1;
  }
  return 0;
}

static void check_run(bool encrypt) {
  if (*unsupported) SKIP_CASE("%s", unsupported);
  static capture cap;
  if (!cap.buf) cap.buf = malloc(CAPTURE_MAX);
  assert_non_null(cap.buf);
  int codes[2];
  run_ranks(encrypt, &cap, codes);
  if (codes[0] || codes[1]) fail_msg("ranks exited %d and %d (their messages above)", codes[0], codes[1]);
  int of, found = needles_found(&cap, &of);
  print_message("%s: %zu frames, %zu bytes captured; %d of the pattern's %d pieces of %d bytes on the wire\n",
                encrypt ? "encrypted" : "plain", cap.packets, cap.len, found, of, NEEDLE);
  /* Each rank sends the other half of its own tensor as it is, so the
   * whole pattern crosses the link once; a piece split across two
   * frames is missed, a few in a hundred. */
  assert_true(cap.len >= (size_t)COUNT * sizeof(float)); /* the payloads' bytes passed, in some form */
  if (encrypt)
    assert_int_equal(found, 0);
  else
    assert_true(found >= of / 2);
}

static void test_plain_payloads_are_on_the_wire(void **state) {
  (void)state;
  check_run(false);
}

static void test_encrypted_payloads_are_not(void **state) {
  (void)state;
  check_run(true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_payloads_are_on_the_wire),
      cmocka_unit_test(test_encrypted_payloads_are_not),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
