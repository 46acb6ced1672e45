/* The TCP store's server: a key-value map served by one thread per
 * connection in the hosting process, in the spirit of c10d's TCPStore.
 * Waits block on the server (a condition variable), so a client's wait
 * costs no polling; a connection that fails the handshake or sends a
 * malformed request is dropped with a logged reason.
 *
 * Bounded against a flood of connections (silent, or sending garbage):
 * at most MAX_HANDSHAKES connections may be proving the secret at once
 * (a new one evicts the oldest, since a real client proves it in
 * milliseconds and a silent one never does; until the evicted ones'
 * threads are gone no more are taken in, so threads stay bounded), at
 * most MAX_CLIENTS are served, each thread has a small stack, and the
 * accept thread reaps the threads of connections that ended at least
 * every REAP_S, so threads and descriptors return to what the real
 * clients hold. Out of descriptors, it waits and accepts again. Rejections are logged
 * at most once a second, with a count. Authenticated clients have no idle
 * timeout (a rank may wait on the store for as long as a step takes); the
 * sockets' keepalive and user timeout (gt_wire_tune) close a dead one. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "comm/store_tcp.h"
#include "comm/wire.h"

#define AUTH_TIMEOUT_MS 5000
#define MAX_HANDSHAKES 64
#define MAX_CLIENTS 4096
#define REAP_S 0.2
#define CONN_STACK ((size_t)512 << 10) /* ample: requests are read into the heap */

typedef struct kv {
  char *key;
  uint8_t *val;
  size_t len;
} kv;

typedef enum { CONN_HANDSHAKE, CONN_SERVING, CONN_DONE } conn_state;

typedef struct conn {
  struct gt_store_server *srv;
  int fd;
  gt_wire_session sess; /* the handshake's keys: every later frame is sealed */
  pthread_t thread;
  char peer[64];
  conn_state state;  /* under the server's lock */
  bool evicted;      /* its handshake was cut short to make room */
  uint64_t admitted; /* order of admission, to evict the oldest handshake */
  struct conn *next;
} conn;

struct gt_store_server {
  int lfd, port;
  char *secret;
  atomic_int stop;
  pthread_t accept_thread;
  pthread_mutex_t mu;
  pthread_cond_t changed;
  kv *items;
  size_t n, cap;
  conn *conns;
  int handshaking, live; /* connections in the handshake (not evicted), and not yet reaped */
  int in_handshake;      /* threads still in the handshake, evicted ones included */
  pthread_cond_t slot;   /* a thread left the handshake */
  uint64_t admitted;
  /* Rejections since the last log line, and when that was. */
  unsigned long rejected;
  double rejected_logged;
  char rejected_why[256];
};
typedef struct gt_store_server server;

static kv *find(server *s, const char *key) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->items[i].key, key) == 0) return &s->items[i];
  return NULL;
}

static gt_status put(server *s, const char *key, const void *val, size_t len) {
  uint8_t *copy = malloc(len + 1);
  if (!copy) return gt_errorf(GT_ENOMEM, "store: out of memory for a %zu-byte value", len);
  memcpy(copy, val, len);
  copy[len] = 0;
  kv *e = find(s, key);
  if (e) {
    free(e->val);
    e->val = copy;
    e->len = len;
    return GT_OK;
  }
  if (s->n == s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 64;
    kv *ni = realloc(s->items, nc * sizeof *ni);
    if (!ni) {
      free(copy);
      return gt_errorf(GT_ENOMEM, "store: out of memory for keys");
    }
    s->items = ni;
    s->cap = nc;
  }
  s->items[s->n].key = strdup(key);
  if (!s->items[s->n].key) {
    free(copy);
    return gt_errorf(GT_ENOMEM, "store: out of memory");
  }
  s->items[s->n].val = copy;
  s->items[s->n].len = len;
  s->n++;
  return GT_OK;
}

/* A cursor over a request payload that refuses to read past its end. */
typedef struct cur {
  const uint8_t *p;
  size_t left;
} cur;

static int take_u32(cur *c, uint32_t *v) {
  if (c->left < 4) return -1;
  *v = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 | (uint32_t)c->p[2] << 16 | (uint32_t)c->p[3] << 24;
  c->p += 4;
  c->left -= 4;
  return 0;
}

static int take_item(cur *c, const uint8_t **p, uint32_t *len) {
  if (take_u32(c, len) || *len > c->left) return -1;
  *p = c->p;
  c->p += *len;
  c->left -= *len;
  return 0;
}

/* Copies a key out of the request, NUL-terminated; keys hold no NUL. */
static int take_key(cur *c, char *key) {
  const uint8_t *p;
  uint32_t len;
  if (take_item(c, &p, &len) || len == 0 || len >= STORE_MAX_KEY || memchr(p, 0, len)) return -1;
  memcpy(key, p, len);
  key[len] = 0;
  return 0;
}

static int wait_until(server *s, struct timespec *abs) { return pthread_cond_timedwait(&s->changed, &s->mu, abs); }

static void deadline_ts(uint32_t ms, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Serves one request; returns <0 when the request is malformed. */
static int serve(server *s, conn *c, uint32_t seq, const uint8_t *req, size_t len, double deadline) {
  cur r = {req, len};
  if (r.left < 9) return -1;
  uint8_t op = r.p[0];
  r.p++;
  r.left--;
  uint32_t timeout_ms, nitems;
  take_u32(&r, &timeout_ms);
  take_u32(&r, &nitems);
  char key[STORE_MAX_KEY];
  int32_t status = GT_OK;
  uint8_t *rep = NULL;
  size_t rep_len = 4;
  uint8_t small[16];
  rep = small;
  pthread_mutex_lock(&s->mu);
  if (op == STORE_SET && nitems == 2) {
    const uint8_t *v;
    uint32_t vl;
    if (take_key(&r, key) || take_item(&r, &v, &vl)) goto bad;
    status = put(s, key, v, vl);
    pthread_cond_broadcast(&s->changed);
  } else if ((op == STORE_GET || op == STORE_WAIT) && nitems >= 1 && nitems <= 65536) {
    const uint8_t *keys = r.p;
    size_t keys_len = r.left;
    struct timespec abs;
    deadline_ts(timeout_ms, &abs);
    for (;;) {
      cur k = {keys, keys_len};
      uint32_t missing = 0;
      for (uint32_t i = 0; i < nitems; i++) {
        if (take_key(&k, key)) goto bad;
        if (!find(s, key)) missing++;
      }
      if (!missing) break;
      if (atomic_load(&s->stop)) {
        status = GT_ECONN;
        break;
      }
      if (wait_until(s, &abs) == ETIMEDOUT) {
        status = GT_ETIMEDOUT;
        break;
      }
    }
    if (status == GT_OK && op == STORE_GET) {
      cur k = {keys, keys_len};
      take_key(&k, key);
      kv *e = find(s, key);
      rep = malloc(4 + e->len);
      if (!rep) {
        rep = small;
        status = GT_ENOMEM;
      } else {
        memcpy(rep + 4, e->val, e->len);
        rep_len = 4 + e->len;
      }
    }
  } else if (op == STORE_ADD && nitems == 2) {
    const uint8_t *d;
    uint32_t dl;
    if (take_key(&r, key) || take_item(&r, &d, &dl) || dl != 8) goto bad;
    int64_t delta = 0, cur_v = 0;
    memcpy(&delta, d, 8);
    kv *e = find(s, key);
    if (e) {
      char *end;
      errno = 0;
      cur_v = strtoll((const char *)e->val, &end, 10);
      if (errno || end == (char *)e->val) status = GT_EINVAL;
    }
    if (status == GT_OK) {
      char num[32];
      int64_t sum = (int64_t)((uint64_t)cur_v + (uint64_t)delta);
      int nl = snprintf(num, sizeof num, "%lld", (long long)sum);
      status = put(s, key, num, (size_t)nl);
      memcpy(small + 4, &sum, 8);
      rep_len = 12;
      pthread_cond_broadcast(&s->changed);
    }
  } else if (op == STORE_DEL && nitems == 1) {
    if (take_key(&r, key)) goto bad;
    kv *e = find(s, key);
    if (e) {
      free(e->key);
      free(e->val);
      *e = s->items[--s->n];
    }
  } else {
    goto bad;
  }
  pthread_mutex_unlock(&s->mu);
  memcpy(rep, &status, 4);
  gt_status st =
      gt_wire_send_sealed(c->fd, &c->sess, GT_MSG_STORE_REP, seq, rep, (uint32_t)rep_len, deadline, &s->stop);
  if (rep != small) free(rep);
  return st == GT_OK ? 0 : 1;
bad:
  pthread_mutex_unlock(&s->mu);
  return -1;
}

/* Logs a refused or evicted connection, at most once a second. */
static void note_rejected(server *s, const char *peer, const char *why) {
  pthread_mutex_lock(&s->mu);
  s->rejected++;
  if (!s->rejected_why[0]) snprintf(s->rejected_why, sizeof s->rejected_why, "%s: %s", peer, why);
  double now = gt_now();
  unsigned long n = 0;
  char first[256];
  if (now - s->rejected_logged >= 1.0) {
    n = s->rejected;
    s->rejected = 0;
    s->rejected_logged = now;
    snprintf(first, sizeof first, "%s", s->rejected_why);
    s->rejected_why[0] = 0;
  }
  pthread_mutex_unlock(&s->mu);
  if (n == 1)
    gt_warn("store: rejected a connection from %s", first);
  else if (n > 1)
    gt_warn("store: rejected %lu connections in the last second, the first from %s", n, first);
}

static void set_state(conn *c, conn_state st) {
  server *s = c->srv;
  pthread_mutex_lock(&s->mu);
  if (c->state == CONN_HANDSHAKE && !c->evicted) s->handshaking--;
  if (c->state == CONN_HANDSHAKE) {
    s->in_handshake--;
    pthread_cond_signal(&s->slot);
  }
  c->state = st;
  pthread_mutex_unlock(&s->mu);
}

static void serve_conn(conn *c);

static void *conn_main(void *arg) {
  conn *c = arg;
  server *s = c->srv;
  uint32_t id = 0;
  gt_status st =
      gt_wire_auth_server(c->fd, s->secret, STORE_CTX, GT_WIRE_MAC, &id, gt_wire_deadline(AUTH_TIMEOUT_MS), &c->sess);
  if (st != GT_OK) {
    note_rejected(s, c->peer, gt_last_error());
    shutdown(c->fd, SHUT_RDWR);
  } else {
    set_state(c, CONN_SERVING);
    serve_conn(c);
    gt_wire_session_close(&c->sess);
  }
  /* Free this thread's OpenSSL state (its error queue) now, before the
   * server may reap it and the process may exit. */
  OPENSSL_thread_stop();
  set_state(c, CONN_DONE);
  return NULL;
}

/* An authenticated client's requests, until it goes away. */
static void serve_conn(conn *c) {
  server *s = c->srv;
  gt_status st;
  uint8_t *buf = NULL;
  size_t cap = 0;
  while (!atomic_load(&s->stop)) {
    uint8_t raw[GT_WIRE_SEALED_HDR];
    gt_wire_hdr h = {0};
    st = gt_wire_recv_all(c->fd, raw, sizeof raw, 1e300, &s->stop);
    if (st != GT_OK) break; /* the client went away: normal at the end */
    char from[96];
    snprintf(from, sizeof from, "store client %s", c->peer);
    /* A header whose tag fails is refused (and logged) before its length is believed. */
    if (gt_wire_open_header(&c->sess, raw, &h, from) != GT_OK) break;
    if (h.type != GT_MSG_STORE_REQ || h.len > STORE_MAX_REQ) {
      gt_warn("store: dropped client %s: malformed request header (type %u, %u bytes)", c->peer, h.type, h.len);
      break;
    }
    if (h.len > cap || !buf) {
      uint8_t *nb = realloc(buf, h.len ? h.len : 1);
      if (!nb) break;
      buf = nb;
      cap = h.len;
    }
    if (gt_wire_recv_sealed_payload(c->fd, &c->sess, buf, h.len, from, gt_wire_deadline(30000), &s->stop) != GT_OK)
      break;
    int r = serve(s, c, h.seq, buf, h.len, gt_wire_deadline(30000));
    if (r < 0) gt_warn("store: dropped client %s: malformed request", c->peer);
    if (r != 0) break;
  }
  free(buf);
  shutdown(c->fd, SHUT_RDWR);
}

/* Joins and frees the connections whose threads have ended. */
static void reap(server *s) {
  conn *done = NULL;
  pthread_mutex_lock(&s->mu);
  for (conn **pp = &s->conns; *pp;) {
    conn *c = *pp;
    if (c->state != CONN_DONE) {
      pp = &c->next;
      continue;
    }
    *pp = c->next;
    c->next = done;
    done = c;
    s->live--;
  }
  pthread_mutex_unlock(&s->mu);
  while (done) {
    conn *next = done->next;
    pthread_join(done->thread, NULL);
    close(done->fd);
    free(done);
    done = next;
  }
}

/* Takes a new connection in, within the bounds. */
static void admit(server *s, int fd, const char *peer) {
  pthread_mutex_lock(&s->mu);
  if (s->live >= MAX_CLIENTS) {
    pthread_mutex_unlock(&s->mu);
    close(fd);
    note_rejected(s, peer, "the store already serves its most connections");
    return;
  }
  if (s->handshaking >= MAX_HANDSHAKES) {
    /* The oldest handshake goes: its thread's wait fails at once. */
    conn *oldest = NULL;
    for (conn *c = s->conns; c; c = c->next)
      if (c->state == CONN_HANDSHAKE && !c->evicted && (!oldest || c->admitted < oldest->admitted)) oldest = c;
    if (oldest) {
      shutdown(oldest->fd, SHUT_RDWR);
      oldest->evicted = true;
      s->handshaking--;
    }
  }
  conn *c = calloc(1, sizeof *c);
  if (!c) {
    pthread_mutex_unlock(&s->mu);
    close(fd);
    return;
  }
  c->srv = s;
  c->fd = fd;
  c->state = CONN_HANDSHAKE;
  c->admitted = ++s->admitted;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, CONN_STACK);
  if (pthread_create(&c->thread, &at, conn_main, c) != 0) {
    pthread_attr_destroy(&at);
    pthread_mutex_unlock(&s->mu);
    close(fd);
    free(c);
    note_rejected(s, peer, "no thread to serve it");
    return;
  }
  pthread_attr_destroy(&at);
  s->handshaking++;
  s->in_handshake++;
  s->live++;
  c->next = s->conns;
  s->conns = c;
  pthread_mutex_unlock(&s->mu);
}

/* Evicted handshakes' threads leave as soon as they run; until as many
 * again as may handshake have left, no new connection is taken (the
 * kernel's backlog holds them), so the threads stay bounded however slow
 * the machine. */
static void wait_for_slot(server *s) {
  struct timespec ts;
  deadline_ts((uint32_t)(REAP_S * 1000), &ts);
  pthread_mutex_lock(&s->mu);
  while (s->in_handshake >= 2 * MAX_HANDSHAKES && !atomic_load(&s->stop))
    if (pthread_cond_timedwait(&s->slot, &s->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&s->mu);
}

static void *accept_main(void *arg) {
  server *s = arg;
  while (!atomic_load(&s->stop)) {
    reap(s);
    wait_for_slot(s);
    int fd;
    char peer[64];
    gt_status st = gt_wire_accept(s->lfd, gt_now() + REAP_S, &s->stop, &fd, peer, sizeof peer);
    if (st == GT_ETIMEDOUT) continue;
    if (st == GT_EABORTED) break;
    if (st != GT_OK) {
      /* Out of descriptors (EMFILE) or memory: the store keeps serving
       * whom it has, and accepts again once some are freed. */
      note_rejected(s, "?", gt_last_error());
      struct timespec ts = {0, 50 * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    admit(s, fd, peer);
  }
  return NULL;
}

void gt_store_server_stop(server *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  pthread_join(s->accept_thread, NULL);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->changed);
  conn *c = s->conns;
  s->conns = NULL;
  pthread_mutex_unlock(&s->mu);
  while (c) {
    conn *next = c->next;
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    pthread_join(c->thread, NULL);
    close(c->fd);
    free(c);
    c = next;
  }
  close(s->lfd);
  for (size_t i = 0; i < s->n; i++) {
    free(s->items[i].key);
    free(s->items[i].val);
  }
  free(s->items);
  free(s->secret);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->changed);
  pthread_cond_destroy(&s->slot);
  free(s);
}

gt_status gt_store_server_start(const char *host, int port, const char *secret, server **out) {
  server *s = calloc(1, sizeof *s);
  if (!s) return gt_errorf(GT_ENOMEM, "store: out of memory");
  gt_status st = gt_wire_listen(host, port, &s->lfd, &s->port);
  if (st != GT_OK) {
    free(s);
    return gt_error_context(st, "starting the TCP store");
  }
  s->secret = strdup(secret);
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->changed, &ca);
  pthread_cond_init(&s->slot, &ca);
  pthread_condattr_destroy(&ca);
  if (!s->secret || pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
    close(s->lfd);
    free(s->secret);
    free(s);
    return gt_errorf(GT_ENOMEM, "store: cannot start the server thread");
  }
  *out = s;
  return GT_OK;
}

int gt_store_server_port(const server *s) { return s->port; }
