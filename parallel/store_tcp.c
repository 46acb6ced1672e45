/* The TCP store: a key-value server in a thread of the hosting process and
 * the client every rank uses, in the spirit of c10d's TCPStore.
 *
 * Every connection passes the secret handshake, then sends requests and
 * reads one reply each. A request is one frame:
 *   op u8 | timeout_ms u32 | nitems u32 | items...
 * where an item is (len u32, bytes). SET has key, value; GET, DEL one key;
 * WAIT its keys; ADD key and an 8-byte delta. A reply is status i32 then
 * for GET the value, for ADD the 8-byte sum. Waits block on the server, one
 * thread per connection, so a client's wait costs no polling. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "giant/comm.h"
#include "giant/log.h"
#include "parallel/wire.h"

#define MAX_KEY 4096
#define MAX_VAL (64u << 20)
#define MAX_REQ (MAX_VAL + 2 * MAX_KEY + 64)
#define AUTH_TIMEOUT_MS 5000

enum { OP_SET = 1, OP_GET = 2, OP_WAIT = 3, OP_ADD = 4, OP_DEL = 5 };
static const char *const CTX = "giant-store";

/* ---------------- server ---------------- */

typedef struct kv {
  char *key;
  uint8_t *val;
  size_t len;
} kv;

typedef struct conn {
  struct server *srv;
  int fd;
  pthread_t thread;
  char peer[64];
  struct conn *next;
} conn;

typedef struct server {
  int lfd, port;
  char *secret;
  atomic_int stop;
  pthread_t accept_thread;
  pthread_mutex_t mu;
  pthread_cond_t changed;
  kv *items;
  size_t n, cap;
  conn *conns;
} server;

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
    e->val = copy, e->len = len;
    return GT_OK;
  }
  if (s->n == s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 64;
    kv *ni = realloc(s->items, nc * sizeof *ni);
    if (!ni) {
      free(copy);
      return gt_errorf(GT_ENOMEM, "store: out of memory for keys");
    }
    s->items = ni, s->cap = nc;
  }
  s->items[s->n].key = strdup(key);
  if (!s->items[s->n].key) {
    free(copy);
    return gt_errorf(GT_ENOMEM, "store: out of memory");
  }
  s->items[s->n].val = copy, s->items[s->n].len = len;
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
  c->p += 4, c->left -= 4;
  return 0;
}

static int take_item(cur *c, const uint8_t **p, uint32_t *len) {
  if (take_u32(c, len) || *len > c->left) return -1;
  *p = c->p;
  c->p += *len, c->left -= *len;
  return 0;
}

/* Copies a key out of the request, NUL-terminated; keys hold no NUL. */
static int take_key(cur *c, char *key) {
  const uint8_t *p;
  uint32_t len;
  if (take_item(c, &p, &len) || len == 0 || len >= MAX_KEY || memchr(p, 0, len)) return -1;
  memcpy(key, p, len);
  key[len] = 0;
  return 0;
}

static int wait_until(server *s, struct timespec *abs) {
  return pthread_cond_timedwait(&s->changed, &s->mu, abs);
}

static void deadline_ts(uint32_t ms, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

/* Serves one request; returns <0 when the request is malformed. */
static int serve(server *s, conn *c, uint32_t seq, const uint8_t *req, size_t len,
                 double deadline) {
  cur r = {req, len};
  if (r.left < 9) return -1;
  uint8_t op = r.p[0];
  r.p++, r.left--;
  uint32_t timeout_ms, nitems;
  take_u32(&r, &timeout_ms);
  take_u32(&r, &nitems);
  char key[MAX_KEY];
  int32_t status = GT_OK;
  uint8_t *rep = NULL;
  size_t rep_len = 4;
  uint8_t small[16];
  rep = small;
  pthread_mutex_lock(&s->mu);
  if (op == OP_SET && nitems == 2) {
    const uint8_t *v;
    uint32_t vl;
    if (take_key(&r, key) || take_item(&r, &v, &vl)) goto bad;
    status = put(s, key, v, vl);
    pthread_cond_broadcast(&s->changed);
  } else if ((op == OP_GET || op == OP_WAIT) && nitems >= 1 && nitems <= 65536) {
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
    if (status == GT_OK && op == OP_GET) {
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
  } else if (op == OP_ADD && nitems == 2) {
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
  } else if (op == OP_DEL && nitems == 1) {
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
  gt_status st = gt_wire_send_frame(c->fd, GT_MSG_STORE_REP, seq, rep, (uint32_t)rep_len,
                                    deadline, &s->stop);
  if (rep != small) free(rep);
  return st == GT_OK ? 0 : 1;
bad:
  pthread_mutex_unlock(&s->mu);
  return -1;
}

static void *conn_main(void *arg) {
  conn *c = arg;
  server *s = c->srv;
  uint32_t id = 0;
  gt_status st = gt_wire_auth_server(c->fd, s->secret, CTX, &id, gt_wire_deadline(AUTH_TIMEOUT_MS));
  if (st != GT_OK) {
    gt_warn("store: rejected a connection from %s: %s", c->peer, gt_last_error());
    shutdown(c->fd, SHUT_RDWR);
    return NULL;
  }
  uint8_t *buf = NULL;
  size_t cap = 0;
  while (!atomic_load(&s->stop)) {
    uint8_t raw[GT_WIRE_HDR];
    gt_wire_hdr h;
    st = gt_wire_recv_all(c->fd, raw, sizeof raw, 1e300, &s->stop);
    if (st != GT_OK) break; /* the client went away: normal at the end */
    if (gt_wire_hdr_decode(raw, &h) != GT_OK || h.type != GT_MSG_STORE_REQ || h.len > MAX_REQ) {
      gt_warn("store: dropped client %s: malformed request header (type %u, %u bytes)", c->peer,
              h.type, h.len);
      break;
    }
    if (h.len > cap) {
      uint8_t *nb = realloc(buf, h.len);
      if (!nb) break;
      buf = nb, cap = h.len;
    }
    if (gt_wire_recv_all(c->fd, buf, h.len, gt_wire_deadline(30000), &s->stop) != GT_OK) break;
    int r = serve(s, c, h.seq, buf, h.len, gt_wire_deadline(30000));
    if (r < 0) gt_warn("store: dropped client %s: malformed request", c->peer);
    if (r != 0) break;
  }
  free(buf);
  shutdown(c->fd, SHUT_RDWR);
  return NULL;
}

static void *accept_main(void *arg) {
  server *s = arg;
  while (!atomic_load(&s->stop)) {
    int fd;
    char peer[64];
    if (gt_wire_accept(s->lfd, 1e300, &s->stop, &fd, peer, sizeof peer) != GT_OK) break;
    conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->srv = s, c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
      close(fd);
      free(c);
      continue;
    }
    pthread_mutex_lock(&s->mu);
    c->next = s->conns, s->conns = c;
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

static void server_stop(server *s) {
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
  for (size_t i = 0; i < s->n; i++) free(s->items[i].key), free(s->items[i].val);
  free(s->items);
  free(s->secret);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->changed);
  free(s);
}

static gt_status server_start(const char *host, int port, const char *secret, server **out) {
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

/* ---------------- client ---------------- */

typedef struct client {
  int fd;
  int port;
  uint32_t seq;
  bool broken;
  pthread_mutex_t mu;
  server *srv; /* hosted here, stopped with us */
} client;

typedef struct buf {
  uint8_t *p;
  size_t len, cap;
} buf;

static int buf_put(buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t nc = (b->len + n) * 2 + 64;
    uint8_t *np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np, b->cap = nc;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

static int buf_u32(buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return buf_put(b, x, 4);
}

static int buf_item(buf *b, const void *p, size_t n) {
  return buf_u32(b, (uint32_t)n) || buf_put(b, p, n);
}

static gt_status check_key(const char *key) {
  size_t n = key ? strlen(key) : 0;
  if (n == 0 || n >= MAX_KEY)
    return gt_errorf(GT_EINVAL, "store key must be 1..%d bytes, got %zu", MAX_KEY - 1, n);
  return GT_OK;
}

/* Sends a request and reads its reply; *rep (malloc'ed) holds what follows
 * the status. */
static gt_status call(client *c, buf *req, int timeout_ms, uint8_t **rep, size_t *rep_len) {
  gt_status st;
  pthread_mutex_lock(&c->mu);
  if (c->broken) {
    pthread_mutex_unlock(&c->mu);
    return gt_errorf(GT_ECONN, "store connection is broken by an earlier failure: reopen the store");
  }
  uint32_t seq = ++c->seq;
  double deadline = gt_wire_deadline(timeout_ms < 0 ? -1 : timeout_ms + 10000);
  uint8_t raw[GT_WIRE_HDR];
  gt_wire_hdr h;
  uint8_t *p = NULL;
  st = gt_wire_send_frame(c->fd, GT_MSG_STORE_REQ, seq, req->p, (uint32_t)req->len, deadline, NULL);
  if (st == GT_OK) st = gt_wire_recv_all(c->fd, raw, sizeof raw, deadline, NULL);
  if (st == GT_OK) st = gt_wire_hdr_decode(raw, &h);
  if (st == GT_OK && (h.type != GT_MSG_STORE_REP || h.seq != seq || h.len < 4 || h.len > MAX_VAL + 4))
    st = gt_errorf(GT_EFORMAT, "store reply out of step (type %u seq %u len %u)", h.type, h.seq, h.len);
  if (st == GT_OK && !(p = malloc(h.len + 1))) st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = gt_wire_recv_all(c->fd, p, h.len, deadline, NULL);
  if (st != GT_OK) {
    c->broken = true;
    pthread_mutex_unlock(&c->mu);
    free(p);
    return gt_error_context(st, "store server");
  }
  pthread_mutex_unlock(&c->mu);
  int32_t rs;
  memcpy(&rs, p, 4);
  if (rs != GT_OK) {
    free(p);
    return (gt_status)rs;
  }
  memmove(p, p + 4, h.len - 4);
  p[h.len - 4] = 0;
  if (rep) *rep = p, *rep_len = h.len - 4;
  else free(p);
  return GT_OK;
}

static gt_status start_req(buf *b, uint8_t op, int timeout_ms, uint32_t nitems) {
  uint32_t t = timeout_ms < 0 ? UINT32_MAX / 2 : (uint32_t)timeout_ms;
  if (buf_put(b, &op, 1) || buf_u32(b, t) || buf_u32(b, nitems))
    return gt_errorf(GT_ENOMEM, "out of memory");
  return GT_OK;
}

static gt_status t_set(gt_store *s, const char *key, const void *val, size_t len) {
  GT_TRY(check_key(key));
  if (len > MAX_VAL) return gt_errorf(GT_EINVAL, "store value of %zu bytes exceeds %u", len, MAX_VAL);
  buf b = {0};
  gt_status st = start_req(&b, OP_SET, 0, 2);
  if (st == GT_OK && (buf_item(&b, key, strlen(key)) || buf_item(&b, val, len)))
    st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = call(s->impl, &b, 0, NULL, NULL);
  free(b.p);
  return st == GT_OK ? st : gt_error_context(st, "store set '%s'", key);
}

static gt_status t_get(gt_store *s, const char *key, void **val, size_t *len, int timeout_ms) {
  GT_TRY(check_key(key));
  buf b = {0};
  gt_status st = start_req(&b, OP_GET, timeout_ms, 1);
  if (st == GT_OK && buf_item(&b, key, strlen(key))) st = gt_errorf(GT_ENOMEM, "out of memory");
  uint8_t *rep = NULL;
  size_t rl = 0;
  if (st == GT_OK) st = call(s->impl, &b, timeout_ms, &rep, &rl);
  free(b.p);
  if (st == GT_ETIMEDOUT)
    return gt_errorf(st, "store get '%s': no such key after %d ms (did every rank start?)", key, timeout_ms);
  if (st != GT_OK) return gt_error_context(st, "store get '%s'", key);
  *val = rep, *len = rl;
  return GT_OK;
}

static gt_status t_wait(gt_store *s, const char *const *keys, int nkeys, int timeout_ms) {
  if (nkeys <= 0) return GT_OK;
  buf b = {0};
  gt_status st = start_req(&b, OP_WAIT, timeout_ms, (uint32_t)nkeys);
  for (int i = 0; st == GT_OK && i < nkeys; i++) {
    st = check_key(keys[i]);
    if (st == GT_OK && buf_item(&b, keys[i], strlen(keys[i]))) st = gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (st == GT_OK) st = call(s->impl, &b, timeout_ms, NULL, NULL);
  free(b.p);
  if (st == GT_ETIMEDOUT)
    return gt_errorf(st, "store wait for %d key(s) ('%s'...) timed out after %d ms", nkeys, keys[0], timeout_ms);
  return st == GT_OK ? st : gt_error_context(st, "store wait");
}

static gt_status t_add(gt_store *s, const char *key, int64_t delta, int64_t *result) {
  GT_TRY(check_key(key));
  buf b = {0};
  gt_status st = start_req(&b, OP_ADD, 0, 2);
  if (st == GT_OK && (buf_item(&b, key, strlen(key)) || buf_item(&b, &delta, 8)))
    st = gt_errorf(GT_ENOMEM, "out of memory");
  uint8_t *rep = NULL;
  size_t rl = 0;
  if (st == GT_OK) st = call(s->impl, &b, 0, &rep, &rl);
  free(b.p);
  if (st == GT_EINVAL) return gt_errorf(st, "store add '%s': the value there is not an integer", key);
  if (st != GT_OK) return gt_error_context(st, "store add '%s'", key);
  if (rl != 8) {
    free(rep);
    return gt_errorf(GT_EFORMAT, "store add '%s': malformed reply", key);
  }
  if (result) memcpy(result, rep, 8);
  free(rep);
  return GT_OK;
}

static gt_status t_del(gt_store *s, const char *key) {
  GT_TRY(check_key(key));
  buf b = {0};
  gt_status st = start_req(&b, OP_DEL, 0, 1);
  if (st == GT_OK && buf_item(&b, key, strlen(key))) st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = call(s->impl, &b, 0, NULL, NULL);
  free(b.p);
  return st;
}

static void t_destroy(gt_store *s) {
  client *c = s->impl;
  close(c->fd);
  server_stop(c->srv);
  pthread_mutex_destroy(&c->mu);
  free(c);
  free(s);
}

static const gt_store_ops tcp_ops = {t_set, t_get, t_wait, t_add, t_del, t_destroy};

int gt_store_tcp_port(const gt_store *s) {
  return s && s->ops == &tcp_ops ? ((client *)s->impl)->port : -1;
}

gt_status gt_store_tcp_open(const gt_store_tcp_config *cfg, gt_store **out) {
  if (!cfg || !out) return gt_errorf(GT_EINVAL, "gt_store_tcp_open: NULL argument");
  const char *secret;
  GT_TRY(gt_wire_secret(cfg->secret, &secret));
  const char *host = cfg->host ? cfg->host : "127.0.0.1";
  server *srv = NULL;
  int port = cfg->port;
  if (cfg->is_host) {
    GT_TRY(server_start(cfg->is_host && cfg->host ? cfg->host : NULL, cfg->port, secret, &srv));
    port = srv->port;
  }
  if (port <= 0 || port > 65535) {
    server_stop(srv);
    return gt_errorf(GT_EINVAL, "store port %d out of range 1..65535", port);
  }
  client *c = calloc(1, sizeof *c);
  gt_store *s = calloc(1, sizeof *s);
  if (!c || !s) {
    free(c), free(s);
    server_stop(srv);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  int tmo = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
  double deadline = gt_wire_deadline(tmo);
  gt_status st = gt_wire_connect(host, port, deadline, &c->fd);
  if (st == GT_OK) {
    st = gt_wire_auth_client(c->fd, secret, CTX, 0, deadline);
    if (st != GT_OK) close(c->fd);
  }
  if (st != GT_OK) {
    free(c), free(s);
    server_stop(srv);
    return gt_error_context(st, "opening the TCP store at %s:%d", host, port);
  }
  pthread_mutex_init(&c->mu, NULL);
  c->port = port, c->srv = srv;
  s->ops = &tcp_ops, s->impl = c;
  *out = s;
  return GT_OK;
}
