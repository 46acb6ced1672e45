/* Sealed frames (comm/seal.c): after the handshake every frame's header
 * carries a tag under a per-connection key with the frame's count inside.
 *
 * Between two ranks a man in the middle (a proxy in rank 1's process, which
 * rank 1 reaches through a store that gives it the proxy's address for
 * rank 0) changes the 5th frame rank 1 sends (the 1st is the group's
 * agreement on its transport, then two a two-rank all-reduce): a flipped header bit, a
 * flipped payload bit, the previous frame replayed in its place, or the
 * frame cut off halfway with the connection. Rank 0 must refuse the frame
 * (GT_EAUTH, logged), or see the connection gone (truncation), and the
 * group must fail on both ranks, every later operation at once; the first
 * operation, before the attack, computes right. A payload bit flipped with
 * headers alone sealed goes through (the sum is wrong, and nothing fails):
 * that is what payload integrity (GT_COMM_INTEGRITY_MAC) is for, and with
 * it the same flip is refused. With encryption (GT_COMM_ENCRYPT_ON) a
 * flipped ciphertext bit fails the frame's AES-GCM tag, whether the frame
 * is received into a staging piece and reduced (frame 3, the reduce-
 * scatter's) or straight into the user's buffer (frame 4, the all-
 * gather's), and a replayed frame is refused. Ranks that disagree on
 * encryption fail the handshake on both sides, naming both settings.
 *
 * In one process: the store's sealed frames refuse a forged, a replayed and
 * a reordered frame, and the keys differ by direction and context; an
 * encrypted frame round-trips and hides its payload, and a flipped
 * ciphertext or tag byte, a replayed, a reordered or a spliced frame
 * fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/wire.h"
#include "localkit/ranks.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

/* WAIT_MS bounds every wait for the proxy, a connection or an operation:
 * each takes milliseconds (the whole test about 1 s on loaded cores), and
 * a refused or cut frame fails the group at once, not by a timeout. */
enum { N = 4096, OPS = 4, ATTACK_FRAME = 4, WAIT_MS = 20000 };

typedef enum { FORGE_HEADER, FORGE_PAYLOAD, REPLAY, TRUNCATE } attack;

typedef struct shared {
  int status[2]; /* of the first operation that failed, GT_OK if none */
  char msg[2][512];
  int first_bad_op[2]; /* the operation that failed, or OPS */
  int later_status[2]; /* of an operation after the failure */
  bool wrong_sum[2];   /* an operation completed with a wrong result */
  int tampered;        /* frames the proxy changed */
} shared;

typedef struct acfg {
  attack kind;
  bool mac, enc;
  int frame;        /* the frame tampered with: ATTACK_FRAME unless set */
  const char *log0; /* rank 0's stderr */
  shared *sh;
} acfg;

/* ---- the man in the middle ---- */

typedef struct mitm {
  gt_store *real;
  int lfd, port;
  char target[128]; /* rank 0's real "HOST PORT" */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const acfg *cfg;
} mitm;

static gt_status m_set(gt_store *s, const char *k, const void *v, size_t n) {
  return gt_store_set(((mitm *)s->impl)->real, k, v, n);
}
static gt_status m_wait(gt_store *s, const char *const *k, int n, int t) {
  return gt_store_wait(((mitm *)s->impl)->real, k, n, t);
}
static gt_status m_add(gt_store *s, const char *k, int64_t d, int64_t *r) {
  return gt_store_add(((mitm *)s->impl)->real, k, d, r);
}
static gt_status m_del(gt_store *s, const char *k) { return gt_store_del(((mitm *)s->impl)->real, k); }
static void m_destroy(gt_store *s) { (void)s; }

/* Rank 0's address is the proxy's; the real one goes to the proxy. */
static gt_status m_get(gt_store *s, const char *key, void **val, size_t *len, int tmo) {
  mitm *m = s->impl;
  GT_TRY(gt_store_get(m->real, key, val, len, tmo));
  size_t kl = strlen(key);
  if (kl < 7 || strcmp(key + kl - 7, "/addr/0")) return GT_OK;
  pthread_mutex_lock(&m->mu);
  snprintf(m->target, sizeof m->target, "%.*s", (int)*len, (char *)*val);
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  free(*val);
  char *a = malloc(64);
  int n = snprintf(a, 64, "127.0.0.1 %d", m->port);
  *val = a;
  *len = (size_t)n;
  return GT_OK;
}

static const gt_store_ops mitm_ops = {m_set, m_get, m_wait, m_add, m_del, m_destroy};

static bool read_n(int fd, void *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, WAIT_MS) <= 0) return false;
    ssize_t r = recv(fd, (char *)p + got, n - got, 0);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static bool write_n(int fd, const void *p, size_t n) {
  return gt_wire_send_all(fd, p, n, gt_wire_deadline(WAIT_MS), NULL) == GT_OK;
}

typedef struct pipe_arg {
  int from, to;
} pipe_arg;

/* Server to client: verbatim, until either side closes. */
static void *relay_back(void *arg) {
  pipe_arg *p = arg;
  char buf[65536];
  for (;;) {
    struct pollfd pf = {.fd = p->from, .events = POLLIN};
    if (poll(&pf, 1, WAIT_MS) <= 0) break;
    ssize_t r = recv(p->from, buf, sizeof buf, 0);
    if (r <= 0 || !write_n(p->to, buf, (size_t)r)) break;
  }
  shutdown(p->to, SHUT_RDWR);
  shutdown(p->from, SHUT_RDWR);
  return NULL;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* Client to server, frame by frame: the two handshake frames as they are,
 * then sealed frames, the ATTACK_FRAME-th of which is tampered with. */
static void *proxy_main(void *arg) {
  mitm *m = arg;
  const acfg *cfg = m->cfg;
  struct pollfd pf = {.fd = m->lfd, .events = POLLIN};
  CHECK(poll(&pf, 1, WAIT_MS) == 1);
  int cfd = accept(m->lfd, NULL, NULL);
  CHECK(cfd >= 0);
  pthread_mutex_lock(&m->mu);
  while (!m->target[0]) pthread_cond_wait(&m->cv, &m->mu);
  pthread_mutex_unlock(&m->mu);
  char host[64];
  int port;
  CHECK(sscanf(m->target, "%63s %d", host, &port) == 2);
  int sfd;
  CHECK_OK(gt_wire_connect(host, port, gt_wire_deadline(WAIT_MS), &sfd));
  int fl = fcntl(sfd, F_GETFL);
  fcntl(sfd, F_SETFL, fl & ~O_NONBLOCK);
  pipe_arg back = {.from = sfd, .to = cfd};
  pthread_t bt;
  CHECK(pthread_create(&bt, NULL, relay_back, &back) == 0);
  uint8_t *prev = NULL, *cur = NULL;
  size_t prev_n = 0;
  for (int k = -2;; k++) { /* k < 0: HELLO and PROOF, unsealed */
    size_t hn = k < 0 ? GT_WIRE_HDR : GT_WIRE_SEALED_HDR;
    uint8_t hdr[GT_WIRE_SEALED_HDR];
    if (!read_n(cfd, hdr, hn)) break;
    size_t len = le32(hdr + 12), n = hn + len + (k >= 0 && (cfg->mac || cfg->enc) ? GT_WIRE_TAG : 0);
    CHECK(len < (64u << 20));
    cur = malloc(n);
    CHECK(cur);
    memcpy(cur, hdr, hn);
    if (!read_n(cfd, cur + hn, n - hn)) break;
    if (k == (cfg->frame ? cfg->frame : ATTACK_FRAME)) {
      cfg->sh->tampered++;
      if (cfg->kind == FORGE_HEADER) cur[8] ^= 1; /* the sequence number */
      if (cfg->kind == FORGE_PAYLOAD) cur[hn + 5] ^= 0x40;
      if (cfg->kind == REPLAY) {
        CHECK(prev_n == n); /* the previous frame, with its valid tag */
        memcpy(cur, prev, n);
      }
      if (cfg->kind == TRUNCATE) {
        write_n(sfd, cur, hn + len / 2);
        free(cur);
        cur = NULL;
        break;
      }
    }
    if (!write_n(sfd, cur, n)) break;
    free(prev);
    prev = cur;
    prev_n = n;
    cur = NULL;
  }
  free(prev);
  free(cur);
  shutdown(sfd, SHUT_RDWR);
  shutdown(cfd, SHUT_RDWR);
  pthread_join(bt, NULL);
  close(sfd);
  close(cfd);
  return NULL;
}

/* ---- the ranks ---- */

static int rank_main(int r, int n, void *arg) {
  acfg *cfg = arg;
  shared *sh = cfg->sh;
  if (r == 0) { /* what rank 0 logs, for the test to read */
    int fd = open(cfg->log0, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  gt_store *real = harness_store(), *s = real;
  mitm m = {.real = real, .cfg = cfg, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  gt_store wrapped = {.ops = &mitm_ops, .impl = &m};
  pthread_t proxy;
  if (r == 1) {
    CHECK_OK(gt_wire_listen("127.0.0.1", 0, &m.lfd, &m.port));
    CHECK(pthread_create(&proxy, NULL, proxy_main, &m) == 0);
    s = &wrapped;
  }
  gt_comm_config cc = {.store = s,
                       .prefix = cfg->enc   ? "frames-enc"
                                 : cfg->mac ? "frames-mac"
                                            : "frames",
                       .rank = r,
                       .size = n,
                       .secret = HARNESS_SECRET,
                       .host = "127.0.0.1",
                       .transport = GT_COMM_TCP,
                       .init_timeout_ms = WAIT_MS,
                       .op_timeout_ms = WAIT_MS,
                       .integrity = cfg->mac ? GT_COMM_INTEGRITY_MAC : GT_COMM_INTEGRITY_HEADERS,
                       .encrypt = cfg->enc ? GT_COMM_ENCRYPT_ON : GT_COMM_ENCRYPT_OFF};
  gt_comm *c;
  CHECK_OK(gt_comm_init(&cc, &c));
  float *x = malloc(N * sizeof *x);
  CHECK(x);
  sh->status[r] = GT_OK;
  sh->first_bad_op[r] = OPS;
  for (int op = 0; op < OPS; op++) {
    for (int i = 0; i < N; i++) x[i] = (float)(r + 1 + op) + (float)i;
    gt_status st = gt_comm_allreduce(c, x, N, GT_F32, GT_COMM_SUM);
    if (st != GT_OK) {
      sh->status[r] = st;
      sh->first_bad_op[r] = op;
      snprintf(sh->msg[r], sizeof sh->msg[r], "%s", gt_last_error());
      /* The group is broken: a later operation fails at once. */
      sh->later_status[r] = gt_comm_allreduce(c, x, N, GT_F32, GT_COMM_SUM);
      break;
    }
    for (int i = 0; i < N; i++) sh->wrong_sum[r] |= x[i] != (float)(3 + 2 * op) + 2.0f * (float)i;
  }
  free(x);
  gt_comm_destroy(c);
  if (r == 1) {
    pthread_join(proxy, NULL);
    close(m.lfd);
  }
  gt_store_destroy(real);
  return RANK_OK;
}

static shared *run_attack_on(attack kind, bool mac, bool enc, int frame, char **log) {
  shared *sh = harness_shared(sizeof *sh);
  memset(sh, 0, sizeof *sh);
  static char path[64];
  snprintf(path, sizeof path, "/tmp/giant-frames-%d.log", (int)getpid());
  acfg cfg = {.kind = kind, .mac = mac, .enc = enc, .frame = frame, .log0 = path, .sh = sh};
  int codes[2];
  if (harness_run(2, rank_main, &cfg, 120, codes)) /* a fraction of a second */
    fail_msg("a rank failed (codes %d %d)", codes[0], codes[1]);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char text[1 << 16];
  size_t got = fread(text, 1, sizeof text - 1, f);
  text[got] = 0;
  fclose(f);
  unlink(path);
  *log = text;
  assert_int_equal(sh->tampered, 1);
  return sh;
}

static shared *run_attack(attack kind, bool mac, char **log) { return run_attack_on(kind, mac, false, 0, log); }

/* The attacked operation fails on rank 0, the one before it was right, and
 * nothing after it runs. A two-rank all-reduce sends two frames each way,
 * after the group's agreement on its transport (frame 0): frames 3 and 4
 * are operation 1's. Rank 1 may finish its part of it (rank
 * 0's frames were good) and then fails at the next. */
static void both_fail_at_the_attack(const shared *sh) {
  for (int r = 0; r < 2; r++) {
    print_message("rank %d: operation %d failed: %s\n", r, sh->first_bad_op[r], sh->msg[r]);
    assert_int_equal(sh->first_bad_op[0], 1);
    assert_true(sh->first_bad_op[1] == 1 || sh->first_bad_op[1] == 2);
    assert_int_not_equal(sh->later_status[r], GT_OK);
    assert_false(sh->wrong_sum[r]);
  }
}

static void refused_by_rank0(const shared *sh, const char *log) {
  assert_int_equal(sh->status[0], GT_EAUTH);
  assert_non_null(strstr(sh->msg[0], "failed authentication"));
  assert_non_null(strstr(log, "failed authentication")); /* and logged */
}

static void test_forged_header_is_refused(void **state) {
  (void)state;
  char *log;
  shared *sh = run_attack(FORGE_HEADER, false, &log);
  both_fail_at_the_attack(sh);
  refused_by_rank0(sh, log);
  assert_non_null(strstr(sh->msg[0], "frame 4 from rank 1"));
}

static void test_replayed_frame_is_refused(void **state) {
  (void)state;
  char *log;
  shared *sh = run_attack(REPLAY, false, &log);
  both_fail_at_the_attack(sh);
  refused_by_rank0(sh, log);
}

static void test_truncated_frame_fails_the_group(void **state) {
  (void)state;
  char *log;
  shared *sh = run_attack(TRUNCATE, false, &log);
  both_fail_at_the_attack(sh);
  assert_int_equal(sh->status[0], GT_ECONN);
  /* The cut connection fails rank 0's receive of the short frame, or its
   * send if the proxy's shutdown reaches that first (once beside a CPU
   * hog): both directions go at once. */
  assert_true(strstr(sh->msg[0], "receiving from rank 1") || strstr(sh->msg[0], "sending to rank 1"));
  assert_non_null(strstr(sh->msg[0], "connection closed"));
}

static void test_payload_integrity(void **state) {
  (void)state;
  char *log;
  /* Headers alone: the flipped payload bit is summed in, and rank 0 takes it. */
  shared *sh = run_attack(FORGE_PAYLOAD, false, &log);
  assert_int_equal(sh->status[0], GT_OK);
  assert_true(sh->wrong_sum[0]);
  /* With payload integrity the same flip is refused. */
  sh = run_attack(FORGE_PAYLOAD, true, &log);
  both_fail_at_the_attack(sh);
  refused_by_rank0(sh, log);
  assert_non_null(strstr(sh->msg[0], "the payload of frame 4 from rank 1"));
}

/* Encrypted: a flipped ciphertext bit fails the frame's AES-GCM tag, in the
 * frame reduced through a staging piece (3) and in the one received into
 * the user's buffer (4); the operation fails on both ranks with the frame
 * named, and nothing after it runs. */
static void test_encrypted_payload_forgery(void **state) {
  (void)state;
  char *log;
  for (int frame = 3; frame <= 4; frame++) {
    shared *sh = run_attack_on(FORGE_PAYLOAD, false, true, frame, &log);
    both_fail_at_the_attack(sh);
    assert_int_equal(sh->status[0], GT_EAUTH);
    char want[128];
    snprintf(want, sizeof want, "frame %d from rank 1 of group 'frames-enc' failed its AES-GCM tag", frame);
    assert_non_null(strstr(sh->msg[0], want));
    assert_non_null(strstr(sh->msg[0], "corrupted or forged"));
    assert_non_null(strstr(log, want)); /* and logged */
  }
  /* A frame played again is refused by its header's tag, as without encryption. */
  shared *sh = run_attack_on(REPLAY, false, true, 0, &log);
  both_fail_at_the_attack(sh);
  refused_by_rank0(sh, log);
}

/* ---- ranks that disagree on encryption ---- */

typedef struct mismatch {
  int status[2];
  char msg[2][512];
} mismatch;

static int mismatch_main(int r, int n, void *arg) {
  mismatch *m = arg;
  gt_store *s = harness_store();
  gt_comm_config cc = {.store = s,
                       .prefix = "frames-mismatch",
                       .rank = r,
                       .size = n,
                       .secret = HARNESS_SECRET,
                       .host = "127.0.0.1",
                       .transport = GT_COMM_TCP,
                       .init_timeout_ms = WAIT_MS,
                       .op_timeout_ms = WAIT_MS,
                       .encrypt = r == 0 ? GT_COMM_ENCRYPT_ON : GT_COMM_ENCRYPT_OFF};
  gt_comm *c = NULL;
  m->status[r] = gt_comm_init(&cc, &c);
  snprintf(m->msg[r], sizeof m->msg[r], "%s", gt_last_error());
  gt_comm_destroy(c);
  gt_store_destroy(s);
  return RANK_OK;
}

/* Rank 0 encrypts, rank 1 does not: rank 1 (which connects) and rank 0
 * (which accepts) both fail at the handshake, with both settings named,
 * not by the wait for the peer running out. */
static void test_encryption_mismatch_fails_the_handshake(void **state) {
  (void)state;
  mismatch *m = harness_shared(sizeof *m);
  memset(m, 0, sizeof *m);
  int codes[2];
  if (harness_run(2, mismatch_main, m, 120, codes)) fail_msg("a rank failed (codes %d %d)", codes[0], codes[1]);
  for (int r = 0; r < 2; r++) {
    print_message("rank %d: %s\n", r, m->msg[r]);
    assert_int_equal(m->status[r], GT_EINVAL);
    assert_non_null(strstr(m->msg[r], "--comm-encrypt"));
  }
  assert_non_null(strstr(m->msg[0], "the peer's frames are not encrypted (headers tagged), this end's encrypted"));
  assert_non_null(strstr(m->msg[0], "rank 1"));
  assert_non_null(strstr(m->msg[1], "the peer's frames are encrypted (AES-256-GCM), this end's not encrypted"));
  assert_non_null(strstr(m->msg[1], "connecting to rank 0"));
}

/* ---- the store's frames, in one process ---- */

static void test_sealed_store_frames(void **state) {
  (void)state;
  uint8_t nonces[64], c2s[GT_WIRE_KEY], s2c[GT_WIRE_KEY], c2s2[GT_WIRE_KEY], s2c2[GT_WIRE_KEY];
  for (int i = 0; i < 64; i++) nonces[i] = (uint8_t)(i * 7);
  assert_int_equal(gt_wire_derive_keys(HARNESS_SECRET, "giant-store", nonces, 64, 0, c2s, s2c), GT_OK);
  assert_int_equal(gt_wire_derive_keys(HARNESS_SECRET, "giant-store", nonces, 64, 0, c2s2, s2c2), GT_OK);
  assert_memory_equal(c2s, c2s2, GT_WIRE_KEY);    /* both ends derive the same keys */
  assert_memory_not_equal(c2s, s2c, GT_WIRE_KEY); /* one per direction */
  assert_int_equal(gt_wire_derive_keys(HARNESS_SECRET, "comm:x:headers", nonces, 64, 0, c2s2, s2c2), GT_OK);
  assert_memory_not_equal(c2s, c2s2, GT_WIRE_KEY); /* and per purpose */
  gt_wire_session cli, srv;
  assert_int_equal(gt_wire_session_open(&cli, c2s, s2c), GT_OK);
  assert_int_equal(gt_wire_session_open(&srv, s2c, c2s), GT_OK);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  double dl = gt_wire_deadline(5000); /* a socketpair in one process: microseconds */
  /* Two good frames, captured on the way, then read. */
  assert_int_equal(gt_wire_send_sealed(sv[0], &cli, GT_MSG_STORE_REQ, 1, "first", 5, dl, NULL), GT_OK);
  assert_int_equal(gt_wire_send_sealed(sv[0], &cli, GT_MSG_STORE_REQ, 2, "second", 6, dl, NULL), GT_OK);
  uint8_t f1[GT_WIRE_SEALED_HDR + 5 + GT_WIRE_TAG], f2[GT_WIRE_SEALED_HDR + 6 + GT_WIRE_TAG];
  assert_int_equal(gt_wire_recv_all(sv[1], f1, sizeof f1, dl, NULL), GT_OK);
  assert_int_equal(gt_wire_recv_all(sv[1], f2, sizeof f2, dl, NULL), GT_OK);
  gt_wire_hdr h;
  char buf[16];
  /* The first, as sent: accepted. */
  assert_int_equal(gt_wire_send_all(sv[0], f1, sizeof f1, dl, NULL), GT_OK);
  assert_int_equal(gt_wire_recv_sealed_header(sv[1], &srv, &h, "test", dl, NULL), GT_OK);
  assert_true(h.seq == 1 && h.len == 5);
  assert_int_equal(gt_wire_recv_sealed_payload(sv[1], &srv, buf, h.len, "test", dl, NULL), GT_OK);
  assert_memory_equal(buf, "first", 5);
  /* The first again (a replay): refused. */
  assert_int_equal(gt_wire_send_all(sv[0], f1, sizeof f1, dl, NULL), GT_OK);
  assert_int_equal(gt_wire_recv_sealed_header(sv[1], &srv, &h, "test", dl, NULL), GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "frame 1 from test failed authentication"));
  uint8_t rest[5 + GT_WIRE_TAG];
  assert_int_equal(gt_wire_recv_all(sv[1], rest, sizeof rest, dl, NULL), GT_OK);
  /* The second with a payload byte changed: its header passes, its payload not. */
  f2[GT_WIRE_SEALED_HDR] ^= 1;
  assert_int_equal(gt_wire_send_all(sv[0], f2, sizeof f2, dl, NULL), GT_OK);
  assert_int_equal(gt_wire_recv_sealed_header(sv[1], &srv, &h, "test", dl, NULL), GT_OK);
  assert_int_equal(gt_wire_recv_sealed_payload(sv[1], &srv, buf, h.len, "test", dl, NULL), GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "the payload of frame 1 from test"));
  close(sv[0]);
  close(sv[1]);
  gt_wire_session_close(&cli);
  gt_wire_session_close(&srv);
}

/* ---- encrypted frames, in one process ---- */

/* Sessions of both ends of one connection, encrypting. */
static void encrypted_pair(gt_wire_session *cli, gt_wire_session *srv) {
  uint8_t nonces[64], c2s[GT_WIRE_KEY], s2c[GT_WIRE_KEY];
  for (int i = 0; i < 64; i++) nonces[i] = (uint8_t)(i * 11);
  assert_int_equal(gt_wire_derive_keys(HARNESS_SECRET, "comm:enc", nonces, 64, 1, c2s, s2c), GT_OK);
  assert_int_equal(gt_wire_session_open(cli, c2s, s2c), GT_OK);
  assert_int_equal(gt_wire_session_open(srv, s2c, c2s), GT_OK);
  cli->mode = srv->mode = GT_WIRE_ENCRYPT;
}

enum { MSG = 3000, FRAME = GT_WIRE_SEALED_HDR + MSG + GT_WIRE_TAG };

/* Reads one frame off fd into the session; its status, *out the payload. */
static gt_status deliver(int wfd, int rfd, gt_wire_session *srv, const uint8_t *frame, uint8_t *out) {
  double dl = gt_wire_deadline(5000); /* a socketpair in one process: microseconds */
  assert_int_equal(gt_wire_send_all(wfd, frame, FRAME, dl, NULL), GT_OK);
  gt_wire_hdr h;
  gt_status st = gt_wire_recv_sealed_header(rfd, srv, &h, "rank 1", dl, NULL);
  if (st != GT_OK) {
    uint8_t rest[MSG + GT_WIRE_TAG]; /* the frame's remains, so the stream stays in step */
    assert_int_equal(gt_wire_recv_all(rfd, rest, sizeof rest, dl, NULL), GT_OK);
    return st;
  }
  assert_int_equal(h.len, MSG);
  return gt_wire_recv_sealed_payload(rfd, srv, out, h.len, "rank 1", dl, NULL);
}

static void test_encrypted_frames(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  double dl = gt_wire_deadline(5000);
  static uint8_t msg[2][MSG], f[3][FRAME], out[MSG];
  for (int i = 0; i < MSG; i++) {
    msg[0][i] = (uint8_t)(i * 37 + 1);
    msg[1][i] = (uint8_t)(i * 53 + 7);
  }
  /* Three frames captured on the way: two of the first message, one of the second. */
  gt_wire_session cli, srv;
  encrypted_pair(&cli, &srv);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(gt_wire_send_sealed(sv[0], &cli, GT_MSG_DATA, 7, msg[k == 2], MSG, dl, NULL), GT_OK);
    assert_int_equal(gt_wire_recv_all(sv[1], f[k], FRAME, dl, NULL), GT_OK);
  }
  /* The payload is not on the wire, nor any 16 bytes of it; the same
   * message twice gives two ciphertexts. */
  for (int k = 0; k < 2; k++)
    for (int i = 0; i + 16 <= MSG; i += 16) assert_null(memmem(f[k], FRAME, msg[0] + i, 16));
  assert_memory_not_equal(f[0] + GT_WIRE_SEALED_HDR, f[1] + GT_WIRE_SEALED_HDR, MSG);
  /* As sent: each round-trips. */
  assert_int_equal(deliver(sv[0], sv[1], &srv, f[0], out), GT_OK);
  assert_memory_equal(out, msg[0], MSG);
  /* The first again (a replay): its header's tag fails. */
  assert_int_equal(deliver(sv[0], sv[1], &srv, f[0], out), GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "frame 1 from rank 1 failed authentication"));
  /* The third before the second (reordered): refused alike. */
  assert_int_equal(deliver(sv[0], sv[1], &srv, f[2], out), GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "failed authentication"));
  /* Frame 1's header with frame 0's payload and tag (the same length): the
   * header passes, the payload fails its AES-GCM tag (its nonce differs). */
  static uint8_t spliced[FRAME];
  memcpy(spliced, f[1], GT_WIRE_SEALED_HDR);
  memcpy(spliced + GT_WIRE_SEALED_HDR, f[0] + GT_WIRE_SEALED_HDR, MSG + GT_WIRE_TAG);
  assert_int_equal(deliver(sv[0], sv[1], &srv, spliced, out), GT_EAUTH);
  assert_non_null(strstr(gt_last_error(), "frame 1 from rank 1 failed its AES-GCM tag: corrupted or forged"));
  for (int i = 0; i < MSG; i++) assert_int_equal(out[i], 0); /* nothing unverified left to read */
  gt_wire_session_close(&cli);
  gt_wire_session_close(&srv);

  /* A flipped byte of ciphertext, then of the tag, each in a fresh
   * connection's frame 0: the header passes, the payload fails. */
  for (int where = 0; where < 2; where++) {
    encrypted_pair(&cli, &srv);
    assert_int_equal(gt_wire_send_sealed(sv[0], &cli, GT_MSG_DATA, 1, msg[0], MSG, dl, NULL), GT_OK);
    assert_int_equal(gt_wire_recv_all(sv[1], f[0], FRAME, dl, NULL), GT_OK);
    f[0][where ? FRAME - 3 : GT_WIRE_SEALED_HDR + MSG / 2] ^= 0x10;
    assert_int_equal(deliver(sv[0], sv[1], &srv, f[0], out), GT_EAUTH);
    assert_non_null(strstr(gt_last_error(), "frame 0 from rank 1 failed its AES-GCM tag: corrupted or forged"));
    /* The same frame unchanged still opens: the failure counted nothing. */
    f[0][where ? FRAME - 3 : GT_WIRE_SEALED_HDR + MSG / 2] ^= 0x10;
    assert_int_equal(deliver(sv[0], sv[1], &srv, f[0], out), GT_OK);
    assert_memory_equal(out, msg[0], MSG);
    gt_wire_session_close(&cli);
    gt_wire_session_close(&srv);
  }
  close(sv[0]);
  close(sv[1]);
}

/* Settings differ between the ends of one connection: both fail with both
 * named, after the peer proved the secret; the same settings pass. */
typedef struct side_arg {
  int fd;
  gt_wire_mode mode;
  gt_status st;
  char msg[512];
  uint32_t id;
} side_arg;

static void *server_side(void *arg) {
  side_arg *a = arg;
  gt_wire_session s;
  a->st = gt_wire_auth_server(a->fd, HARNESS_SECRET, "comm:m", a->mode, &a->id, gt_wire_deadline(5000), &s);
  snprintf(a->msg, sizeof a->msg, "%s", gt_last_error());
  if (a->st == GT_OK) gt_wire_session_close(&s);
  return NULL;
}

static void handshake(gt_wire_mode client, gt_wire_mode server, side_arg *c, side_arg *s) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  *s = (side_arg){.fd = sv[1], .mode = server};
  *c = (side_arg){.fd = sv[0], .mode = client};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, server_side, s), 0);
  gt_wire_session cs;
  c->st = gt_wire_auth_client(sv[0], HARNESS_SECRET, "comm:m", client, 5, gt_wire_deadline(5000), &cs);
  snprintf(c->msg, sizeof c->msg, "%s", gt_last_error());
  if (c->st == GT_OK) {
    assert_int_equal(cs.mode, client);
    gt_wire_session_close(&cs);
  }
  pthread_join(t, NULL);
  close(sv[0]);
  close(sv[1]);
}

static void test_handshake_modes(void **state) {
  (void)state;
  side_arg c, s;
  handshake(GT_WIRE_ENCRYPT, GT_WIRE_ENCRYPT, &c, &s);
  assert_int_equal(c.st, GT_OK);
  assert_int_equal(s.st, GT_OK);
  handshake(GT_WIRE_ENCRYPT, GT_WIRE_HEADERS, &c, &s);
  assert_int_equal(c.st, GT_EINVAL);
  assert_int_equal(s.st, GT_EINVAL);
  assert_int_equal(s.id, 5); /* the peer's proven id, to name it */
  assert_non_null(strstr(c.msg, "the peer's frames are not encrypted (headers tagged), this end's encrypted"));
  assert_non_null(strstr(s.msg, "the peer's frames are encrypted (AES-256-GCM), this end's not encrypted"));
  handshake(GT_WIRE_MAC, GT_WIRE_ENCRYPT, &c, &s);
  assert_int_equal(c.st, GT_EINVAL);
  assert_int_equal(s.st, GT_EINVAL);
  assert_non_null(strstr(c.msg, "--comm-encrypt (GT_COMM_ENCRYPT) and --comm-integrity"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sealed_store_frames),
      cmocka_unit_test(test_encrypted_frames),
      cmocka_unit_test(test_handshake_modes),
      cmocka_unit_test(test_forged_header_is_refused),
      cmocka_unit_test(test_replayed_frame_is_refused),
      cmocka_unit_test(test_truncated_frame_fails_the_group),
      cmocka_unit_test(test_payload_integrity),
      cmocka_unit_test(test_encrypted_payload_forgery),
      cmocka_unit_test(test_encryption_mismatch_fails_the_handshake),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
