/* Failures: a peer killed or stopped mid-collective, strangers at the
 * door, operations that do not match, and abort from another thread.
 * Survivors must fail promptly with a clear error; none may hang or die of
 * SIGPIPE, and a group that refused strangers must still compute right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "localkit/ranks.h"
#include "comm/wire.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

typedef struct shared {
  double victim_time; /* when the victim killed or stopped itself */
  double fail_time[HARNESS_MAX];
  int fail_status[HARNESS_MAX];
  char fail_msg[HARNESS_MAX][256];
} shared;

typedef struct fcfg {
  gt_comm_transport transport;
  int sig; /* SIGKILL or SIGSTOP */
  int op_timeout_ms;
  shared *sh;
} fcfg;

enum { VICTIM = 1, BIG = (32u << 20) / 4 };

/* Time bounds. Measured on two cores busy with other work (optimized
 * build; sanitizers make it about 3x slower):
 * - one all-reduce of BIG floats takes 0.02-0.26 s on 3 or 4 ranks;
 * - a survivor sees a killed peer 0.01-0.2 s after it dies (TCP, 4 ranks);
 * - an operation on a group that already failed returns in microseconds;
 * - a mismatch is seen in under 0.05 s, a group forms in under 0.06 s, and
 *   an abort wakes a waiting thread in under 1 ms. */
/* No operation ends by its timeout in these runs, except where a stopped
 * peer is meant to be caught by it. */
#define OP_TIMEOUT_MS 30000
/* A killed peer is seen through its closed sockets or its exit, not the
 * timeout: 10 s is 50x the slowest seen and a third of OP_TIMEOUT_MS. */
#define KILL_SEEN_S 10.0
/* A stopped peer is caught only by the operation timeout, so the test
 * lasts that long. 6 s is 23x the slowest all-reduce above (about 8x with
 * sanitizers), which every rank must finish twice before the stop; a
 * shorter one could fail a live rank on a loaded machine. */
#define STOP_TIMEOUT_MS 6000
/* The timeout fires within 15 ms of its deadline; 1 s of slack is > 60x. */
#define TIMEOUT_SLACK_S 1.0
/* "At once": well below any operation timeout here, so it cannot be met by
 * timing out, and > 100x what a rank waiting for a busy core needs. */
#define AT_ONCE_S 1.0
/* Waits for the store or a wire frame on loopback, normally milliseconds;
 * they end only a run that is already broken. */
#define STORE_WAIT_MS 30000
#define WIRE_MS 20000
/* A whole scenario of forked ranks: a few seconds at most here (a stopped
 * peer's STOP_TIMEOUT_MS included); 60 s only bounds a hang. */
#define RUN_S 60

static int victim_main(int r, int n, void *arg) {
  fcfg *k = arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "fail", r, n, k->transport, k->op_timeout_ms);
  float *x = malloc(BIG * sizeof *x);
  CHECK(x);
  for (int it = 0; it < 50; it++) {
    for (size_t i = 0; i < BIG; i++) x[i] = 1.0f;
    gt_comm_req *req;
    CHECK_OK(gt_comm_allreduce_start(c, x, BIG, GT_F32, GT_COMM_SUM, &req));
    if (r == VICTIM && it == 2) {
      /* Mid-collective: let the others get going, then vanish. Not a
       * bound: if they have not started yet, the peer is gone all the same
       * when they do. */
      usleep(1000);
      k->sh->victim_time = gt_now();
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      raise(k->sig);
      _exit(RANK_FAIL); /* not reached for SIGKILL; SIGSTOP never resumes */
    }
    gt_status st = gt_comm_wait(req, -1);
    if (st != GT_OK) {
      k->sh->fail_time[r] = gt_now();
      k->sh->fail_status[r] = st;
      snprintf(k->sh->fail_msg[r], sizeof k->sh->fail_msg[r], "%s", gt_last_error());
      /* Every later operation fails at once. */
      double t0 = gt_now();
      CHECK(gt_comm_allreduce(c, x, 10, GT_F32, GT_COMM_SUM) != GT_OK);
      CHECK(gt_comm_barrier(c) != GT_OK);
      CHECK(gt_now() - t0 < AT_ONCE_S);
      CHECK(gt_comm_error(c) != GT_OK);
      break;
    }
    CHECK(it < 2);
    for (size_t i = 0; i < BIG; i += 4099) CHECK(x[i] == (float)n);
  }
  free(x);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void run_victim(int n, gt_comm_transport t, int sig, int op_timeout_ms, double limit_s) {
  shared *sh = harness_shared(sizeof *sh);
  fcfg k = {t, sig, op_timeout_ms, sh};
  int codes[HARNESS_MAX];
  harness_run(n, victim_main, &k, RUN_S, codes);
  assert_int_equal(codes[VICTIM], sig == SIGKILL ? RANK_KILLED_BY(SIGKILL) : RANK_STOPPED);
  assert_true(sh->victim_time > 0);
  for (int r = 0; r < n; r++) {
    if (r == VICTIM) continue;
    if (codes[r] != RANK_OK) print_error("rank %d exited with %d\n", r, codes[r]);
    assert_int_equal(codes[r], RANK_OK); /* no hang, no SIGPIPE */
    double dt = sh->fail_time[r] - sh->victim_time;
    print_message("rank %d failed %.3f s after the victim (%s): %s\n", r, dt, gt_status_name(sh->fail_status[r]),
                  sh->fail_msg[r]);
    assert_true(sh->fail_time[r] > 0);
    assert_true(dt >= 0 && dt < limit_s);
    assert_true(sh->fail_status[r] == GT_ECONN || sh->fail_status[r] == GT_ETIMEDOUT);
    assert_true(strlen(sh->fail_msg[r]) > 20);
  }
}

static void kill_tcp(void **s) {
  (void)s;
  run_victim(4, GT_COMM_TCP, SIGKILL, OP_TIMEOUT_MS, KILL_SEEN_S);
}
static void kill_shm(void **s) {
  (void)s;
  run_victim(4, GT_COMM_SHM, SIGKILL, OP_TIMEOUT_MS, KILL_SEEN_S);
}
static void kill_tcp_2(void **s) {
  (void)s;
  run_victim(2, GT_COMM_TCP, SIGKILL, OP_TIMEOUT_MS, KILL_SEEN_S);
}
static void kill_shm_3(void **s) {
  (void)s;
  run_victim(3, GT_COMM_SHM, SIGKILL, OP_TIMEOUT_MS, KILL_SEEN_S);
}
/* A stopped peer is caught by the operation timeout (STOP_TIMEOUT_MS). */
static void stop_tcp(void **s) {
  (void)s;
  run_victim(3, GT_COMM_TCP, SIGSTOP, STOP_TIMEOUT_MS, STOP_TIMEOUT_MS / 1000.0 + TIMEOUT_SLACK_S);
}
static void stop_shm(void **s) {
  (void)s;
  run_victim(3, GT_COMM_SHM, SIGSTOP, STOP_TIMEOUT_MS, STOP_TIMEOUT_MS / 1000.0 + TIMEOUT_SLACK_S);
}

/* ---- strangers ---- */

enum { ROGUE = 3, GROUP = 3 };

/* A handshake that sends a made-up proof; returns the server's verdict. */
static gt_status bad_proof(int fd, const char *ctx) {
  (void)ctx;
  uint8_t hello[37] = {1, 2, 3}; /* nonce, id, mode (comm/auth.c) */
  hello[32] = 2;                 /* claims rank 2 */
  if (gt_wire_send_frame(fd, GT_MSG_HELLO, 0, hello, sizeof hello, gt_wire_deadline(WIRE_MS), NULL)) return GT_EIO;
  gt_wire_hdr h;
  uint8_t ch[65];
  if (gt_wire_recv_frame(fd, GT_MSG_CHALLENGE, &h, ch, sizeof ch, gt_wire_deadline(WIRE_MS), NULL)) return GT_EIO;
  uint8_t proof[32] = {0};
  if (gt_wire_send_frame(fd, GT_MSG_PROOF, 0, proof, sizeof proof, gt_wire_deadline(WIRE_MS), NULL)) return GT_EIO;
  char why[256];
  if (gt_wire_recv_frame(fd, GT_MSG_REJECT, &h, why, sizeof why, gt_wire_deadline(WIRE_MS), NULL)) return GT_EIO;
  return GT_EAUTH;
}

/* Rank 0's stderr, per test process so parallel runs do not collide. */
static char LOG0[128];

static int stranger_main(int r, int n, void *arg) {
  (void)n;
  (void)arg;
  gt_store *s = harness_store();
  if (r == ROGUE) {
    void *v;
    size_t len;
    CHECK_OK(gt_store_get(s, "comm/door/addr/0", &v, &len, STORE_WAIT_MS));
    char host[64];
    int port;
    CHECK(sscanf(v, "%63s %d", host, &port) == 2);
    free(v);
    int fd;
    /* 1. garbage */
    CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WIRE_MS), &fd));
    char junk[64];
    memset(junk, 'x', sizeof junk);
    CHECK_OK(gt_wire_send_all(fd, junk, sizeof junk, gt_wire_deadline(WIRE_MS), NULL));
    gt_wire_hdr h;
    char why[256];
    CHECK_OK(gt_wire_recv_frame(fd, GT_MSG_REJECT, &h, why, sizeof why, gt_wire_deadline(WIRE_MS), NULL));
    close(fd);
    /* 2. a made-up proof */
    CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WIRE_MS), &fd));
    CHECK(bad_proof(fd, "comm:door") == GT_EAUTH);
    close(fd);
    /* 3. a client with the wrong secret learns the server is not its peer */
    CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WIRE_MS), &fd));
    CHECK(gt_wire_auth_client(fd, "wrong", "comm:door", GT_WIRE_HEADERS, 1, gt_wire_deadline(WIRE_MS), NULL) ==
          GT_EAUTH);
    close(fd);
    /* 4. the right secret, but a rank that is not a peer of rank 0 */
    CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WIRE_MS), &fd));
    /* The payload mode is part of the handshake. */
    const char *integrity = getenv("GT_COMM_INTEGRITY"), *encrypt = getenv("GT_COMM_ENCRYPT");
    gt_wire_mode mode = encrypt && !strcmp(encrypt, "1")         ? GT_WIRE_ENCRYPT
                        : integrity && !strcmp(integrity, "mac") ? GT_WIRE_MAC
                                                                 : GT_WIRE_HEADERS;
    CHECK_OK(gt_wire_auth_client(fd, HARNESS_SECRET, "comm:door", mode, 0, gt_wire_deadline(WIRE_MS), NULL));
    close(fd);
    CHECK_OK(gt_store_set(s, "rogue/done", "1", 1));
    gt_store_destroy(s);
    return RANK_OK;
  }
  if (r == 0) {
    int fd = open(LOG0, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    dup2(fd, 2);
    close(fd);
  } else {
    const char *keys[1] = {"rogue/done"};
    CHECK_OK(gt_store_wait(s, keys, 1, STORE_WAIT_MS));
  }
  gt_comm *c = harness_comm(s, "door", r, GROUP, GT_COMM_TCP, OP_TIMEOUT_MS);
  float x[1001];
  for (int i = 0; i < 1001; i++) x[i] = (float)(i + r);
  CHECK_OK(gt_comm_allreduce(c, x, 1001, GT_F32, GT_COMM_SUM));
  for (int i = 0; i < 1001; i++) CHECK(x[i] == (float)(3 * i + 3));
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void strangers_refused(void **st) {
  (void)st;
  snprintf(LOG0, sizeof LOG0, "/tmp/giant-test-comm-rank0-%d.log", (int)getpid());
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(GROUP + 1, stranger_main, NULL, RUN_S, codes), 0);
  FILE *f = fopen(LOG0, "r");
  assert_non_null(f);
  char line[1024];
  int refused = 0, magic = 0, proof = 0, rank = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "refused a connection")) continue;
    refused++;
    magic += strstr(line, "magic") != NULL;
    proof += strstr(line, "wrong proof") != NULL;
    rank += strstr(line, "not an expected peer") != NULL;
  }
  fclose(f);
  unlink(LOG0);
  print_message("rank 0 logged %d refusals\n", refused);
  assert_true(refused >= 4);
  assert_int_equal(magic, 1);
  assert_int_equal(proof, 1);
  assert_int_equal(rank, 1);
}

/* ---- silent strangers ---- */

enum { SILENT = 20 };

/* The rogue opens SILENT connections to rank 0's port and says nothing on
 * any of them until the group has formed. Each handshake waits up to 5 s
 * for a hello; taken one at a time they would hold the group up for
 * 100 s. Taken concurrently, the group forms as fast as without them. */
static int silent_main(int r, int n, void *arg) {
  (void)n;
  (void)arg;
  gt_store *s = harness_store();
  if (r == ROGUE) {
    void *v;
    size_t len;
    CHECK_OK(gt_store_get(s, "comm/quiet/addr/0", &v, &len, STORE_WAIT_MS));
    char host[64];
    int port;
    CHECK(sscanf(v, "%63s %d", host, &port) == 2);
    free(v);
    int fds[SILENT];
    for (int i = 0; i < SILENT; i++) CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WIRE_MS), &fds[i]));
    CHECK_OK(gt_store_set(s, "rogue/silent", "1", 1));
    const char *keys[1] = {"group/formed"};
    CHECK_OK(gt_store_wait(s, keys, 1, STORE_WAIT_MS));
    for (int i = 0; i < SILENT; i++) close(fds[i]);
    gt_store_destroy(s);
    return RANK_OK;
  }
  if (r != 0) {
    const char *keys[1] = {"rogue/silent"};
    CHECK_OK(gt_store_wait(s, keys, 1, STORE_WAIT_MS));
  }
  double t0 = gt_now();
  gt_comm *c = harness_comm(s, "quiet", r, GROUP, GT_COMM_TCP, OP_TIMEOUT_MS);
  double formed = gt_now() - t0;
  if (r == 0) {
    int64_t k;
    CHECK_OK(gt_store_add(s, "group/formed", 1, &k));
  }
  float x[3] = {1, 2, 3};
  CHECK_OK(gt_comm_allreduce(c, x, 3, GT_F32, GT_COMM_SUM));
  CHECK(x[0] == 3 && x[1] == 6 && x[2] == 9);
  /* Under 0.06 s on loaded cores (milliseconds unloaded): 4 s is > 60x
   * that, and under one silent handshake's 5 s, so a group held up by even
   * one silent stranger fails it. */
  CHECK(formed < 4.0);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void silent_strangers(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(GROUP + 1, silent_main, NULL, RUN_S, codes), 0);
}

/* ---- mismatched operations ---- */

static int mismatch_main(int r, int n, void *arg) {
  gt_comm_transport t = *(gt_comm_transport *)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "mismatch", r, n, t, OP_TIMEOUT_MS);
  float x[40] = {0};
  double t0 = gt_now();
  gt_status st = gt_comm_allreduce(c, x, r == 0 ? 20 : 40, GT_F32, GT_COMM_SUM);
  CHECK(st == GT_EFORMAT || st == GT_ECONN);
  /* Seen in under 0.05 s on loaded cores: 5 s is 100x, and a timeout would
   * not give the statuses above. */
  CHECK(gt_now() - t0 < 5.0);
  CHECK(strstr(gt_last_error(), "rank") != NULL);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

static void mismatch_tcp(void **st) {
  (void)st;
  gt_comm_transport t = GT_COMM_TCP;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(3, mismatch_main, &t, RUN_S, codes), 0);
}
static void mismatch_shm(void **st) {
  (void)st;
  gt_comm_transport t = GT_COMM_SHM;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(3, mismatch_main, &t, RUN_S, codes), 0);
}

/* Ranks that ask for different transports (rank 0 for TCP, the others
 * for whatever suits) all fail to form the group, at once, with a message
 * naming both: none waits for a negotiation another skipped. */
static int transports_main(int r, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  gt_comm_config cfg = {.store = s,
                        .prefix = "transports",
                        .rank = r,
                        .size = n,
                        .secret = HARNESS_SECRET,
                        .host = "127.0.0.1",
                        .transport = r == 0 ? GT_COMM_TCP : GT_COMM_AUTO,
                        .init_timeout_ms = 20000,
                        .op_timeout_ms = OP_TIMEOUT_MS};
  gt_comm *c = NULL;
  double t0 = gt_now();
  CHECK(gt_comm_init(&cfg, &c) == GT_EINVAL && c == NULL);
  CHECK(gt_now() - t0 < 5.0); /* not the 20 s of the formation's timeout */
  CHECK(strstr(gt_last_error(), "asked for the tcp transport") || strstr(gt_last_error(), "this rank for tcp"));
  gt_store_destroy(s);
  return RANK_OK;
}

static void transports_disagree(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(3, transports_main, NULL, RUN_S, codes), 0);
}

/* ---- abort from another thread ---- */

/* Only an abort ends these waits; a wait that runs out fails the test.
 * An abort wakes the waiter in under 1 ms on loaded cores: 2 s is > 1000x,
 * and well under the wait's own 10 s, so it cannot be met by timing out. */
#define ABORT_WAIT_MS 10000
#define ABORT_WAKE_S 2.0

typedef struct aborter {
  gt_comm *c;
  double at;
} aborter;

/* Aborts 0.2 s after starting, so that the main thread is most likely
 * blocked in its wait by then. Not a bound: an abort that comes first makes
 * the wait return at once, which passes the same checks. */
static void *abort_later(void *arg) {
  aborter *a = arg;
  usleep(200000);
  a->at = gt_now();
  gt_comm_abort(a->c);
  return NULL;
}

static int abort_main(int r, int n, void *arg) {
  gt_comm_transport t = *(gt_comm_transport *)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "abort", r, n, t, OP_TIMEOUT_MS);
  float x[1000];
  if (r == 0) {
    /* Rank 1 never joins this all-reduce: only the abort can end it. */
    gt_comm_req *req;
    CHECK_OK(gt_comm_allreduce_start(c, x, 1000, GT_F32, GT_COMM_SUM, &req));
    gt_comm_req *later;
    CHECK_OK(gt_comm_barrier_start(c, &later));
    /* A wait that runs out leaves the request pending and valid (it can
     * only run out: rank 1 never joins). */
    CHECK(gt_comm_wait(req, 50) == GT_ETIMEDOUT);
    aborter a = {c, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, abort_later, &a) == 0);
    gt_status st = gt_comm_wait(req, ABORT_WAIT_MS);
    double done = gt_now();
    pthread_join(th, NULL);
    CHECK(st == GT_EABORTED);
    CHECK(done - a.at < ABORT_WAKE_S);
    CHECK(gt_comm_wait(later, ABORT_WAIT_MS) == GT_EABORTED);
    double t0 = gt_now();
    CHECK(gt_comm_allreduce(c, x, 1000, GT_F32, GT_COMM_SUM) == GT_EABORTED);
    CHECK(strstr(gt_last_error(), "abort") != NULL);
    CHECK(gt_now() - t0 < AT_ONCE_S);
    CHECK(gt_comm_error(c) == GT_EABORTED);
    CHECK_OK(gt_store_set(s, "aborted", "1", 1));
  } else {
    /* The peer's abort breaks the group for us too, at once. */
    const char *keys[1] = {"aborted"};
    CHECK_OK(gt_store_wait(s, keys, 1, STORE_WAIT_MS));
    double t0 = gt_now();
    CHECK(gt_comm_allreduce(c, x, 1000, GT_F32, GT_COMM_SUM) == GT_ECONN);
    CHECK(gt_now() - t0 < AT_ONCE_S);
  }
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

/* Aborting a communicator aborts the groups split from it: rank 0 blocked
 * in a receive on a split group (as a pipeline stage on its own send and
 * receive groups) is woken by an abort of the parent; a group split and
 * destroyed before is not touched. */
static int abort_split_main(int r, int n, void *arg) {
  gt_comm_transport t = *(gt_comm_transport *)arg;
  gt_store *s = harness_store();
  gt_comm *c = harness_comm(s, "abortsplit", r, n, t, OP_TIMEOUT_MS);
  gt_comm *gone = NULL, *child = NULL;
  CHECK_OK(gt_comm_split(c, 0, r, "gone", &gone));
  gt_comm_destroy(gone);
  CHECK_OK(gt_comm_split(c, 0, r, "child", &child));
  float x[16] = {0};
  if (r == 0) {
    gt_comm_req *req;
    CHECK_OK(gt_comm_recv_start(child, x, 16, GT_F32, 1, &req)); /* rank 1 never sends */
    aborter a = {c, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, abort_later, &a) == 0);
    gt_status st = gt_comm_wait(req, ABORT_WAIT_MS);
    double done = gt_now();
    pthread_join(th, NULL);
    CHECK(st == GT_EABORTED);
    CHECK(done - a.at < ABORT_WAKE_S);
    CHECK(gt_comm_error(child) == GT_EABORTED);
    CHECK_OK(gt_store_set(s, "split-aborted", "1", 1));
  } else {
    const char *keys[1] = {"split-aborted"};
    CHECK_OK(gt_store_wait(s, keys, 1, STORE_WAIT_MS));
  }
  gt_comm_destroy(c); /* the parent first: the child outlives it */
  gt_comm_destroy(child);
  gt_store_destroy(s);
  return RANK_OK;
}

static void abort_split_tcp(void **st) {
  (void)st;
  gt_comm_transport t = GT_COMM_TCP;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, abort_split_main, &t, RUN_S, codes), 0);
}

static void abort_tcp(void **st) {
  (void)st;
  gt_comm_transport t = GT_COMM_TCP;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, abort_main, &t, RUN_S, codes), 0);
}
static void abort_shm(void **st) {
  (void)st;
  gt_comm_transport t = GT_COMM_SHM;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(2, abort_main, &t, RUN_S, codes), 0);
}

/* A peer's address in the store that is empty, unprintable, out of range,
 * not NUL-terminated or too long: the rank joining after it fails at once
 * with the bytes shown safely, never reading past them or printing an
 * address it did not parse. One rank plays rank 1 of 2 against each. */
static int bad_address_main(int r, int n, void *arg) {
  (void)r;
  (void)n;
  (void)arg;
  gt_store *s = harness_store();
  char longest[300];
  memset(longest, 'a', sizeof longest);
  static const struct {
    const char *bytes;
    size_t len;
    const char *shown;
  } cases[] = {
      {"", 0, "''"},
      {"\x01\x02host\xff 80", 10, "'??host? 80'"},
      {"127.0.0.1 99999", 15, "'127.0.0.1 99999'"},
      {"127.0.0.1 80 n1 extra", 21, "'127.0.0.1 80 n1 extra'"},
      {"127.0.0.1 80 n/1", 16, "'127.0.0.1 80 n/1'"}, /* a node name is [A-Za-z0-9._-] */
      {"127.0.0.1 8\0000", 13, "'127.0.0.1 8'"},
  };
  enum { NCASES = sizeof cases / sizeof *cases };
  for (int k = 0; k <= NCASES; k++) {
    char prefix[32], key[96];
    snprintf(prefix, sizeof prefix, "badaddr%d", k);
    snprintf(key, sizeof key, "comm/%s/addr/0", prefix);
    if (k < NCASES)
      CHECK_OK(gt_store_set(s, key, cases[k].bytes, cases[k].len));
    else
      CHECK_OK(gt_store_set(s, key, longest, sizeof longest));
    gt_comm_config cfg = {.store = s,
                          .prefix = prefix,
                          .rank = 1,
                          .size = 2,
                          .secret = HARNESS_SECRET,
                          .host = "127.0.0.1",
                          .transport = GT_COMM_TCP,
                          .init_timeout_ms = OP_TIMEOUT_MS,
                          .op_timeout_ms = OP_TIMEOUT_MS}; /* it fails before any wait */
    gt_comm *c = NULL;
    gt_status st = gt_comm_init(&cfg, &c);
    const char *msg = gt_last_error();
    CHECK(st == GT_EFORMAT && c == NULL);
    CHECK(strstr(msg, "malformed address") != NULL && strstr(msg, "of rank 0") != NULL);
    CHECK(strstr(msg, k < NCASES ? cases[k].shown : "aaaa...' of rank 0") != NULL);
    CHECK(strstr(msg, "connecting to rank 0 at") == NULL);
  }
  gt_store_destroy(s);
  return RANK_OK;
}

static void bad_address(void **st) {
  (void)st;
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(1, bad_address_main, NULL, RUN_S, codes), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(kill_tcp),
      cmocka_unit_test(kill_shm),
      cmocka_unit_test(kill_tcp_2),
      cmocka_unit_test(kill_shm_3),
      cmocka_unit_test(stop_tcp),
      cmocka_unit_test(stop_shm),
      cmocka_unit_test(strangers_refused),
      cmocka_unit_test(silent_strangers),
      cmocka_unit_test(mismatch_tcp),
      cmocka_unit_test(mismatch_shm),
      cmocka_unit_test(transports_disagree),
      cmocka_unit_test(abort_tcp),
      cmocka_unit_test(abort_shm),
      cmocka_unit_test(abort_split_tcp),
      cmocka_unit_test(bad_address),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
