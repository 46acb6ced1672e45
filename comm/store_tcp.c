/* The TCP store's client (and, with is_host, the owner of the server it
 * talks to). One request at a time per client, under a mutex. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "giant/log.h"
#include "giant/engine/store.h"
#include "comm/store_tcp.h"
#include "comm/wire.h"

typedef struct client {
  int fd;
  gt_wire_session sess; /* every frame after the handshake is sealed */
  int port;
  uint32_t seq;
  bool broken;
  pthread_mutex_t mu;
  gt_store_server *srv; /* hosted here, stopped with us */
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
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

static int buf_u32(buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return buf_put(b, x, 4);
}

static int buf_item(buf *b, const void *p, size_t n) { return buf_u32(b, (uint32_t)n) || buf_put(b, p, n); }

static gt_status check_key(const char *key) {
  size_t n = key ? strlen(key) : 0;
  if (n == 0 || n >= STORE_MAX_KEY)
    return gt_errorf(GT_EINVAL, "store key must be 1..%d bytes, got %zu", STORE_MAX_KEY - 1, n);
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
  gt_wire_hdr h;
  uint8_t *p = NULL;
  st = gt_wire_send_sealed(c->fd, &c->sess, GT_MSG_STORE_REQ, seq, req->p, (uint32_t)req->len, deadline, NULL);
  if (st == GT_OK) st = gt_wire_recv_sealed_header(c->fd, &c->sess, &h, "the store server", deadline, NULL);
  if (st == GT_OK && (h.type != GT_MSG_STORE_REP || h.seq != seq || h.len < 4 || h.len > STORE_MAX_VAL + 4))
    st = gt_errorf(GT_EFORMAT, "store reply out of step (type %u seq %u len %u)", h.type, h.seq, h.len);
  if (st == GT_OK && !(p = malloc(h.len + 1))) st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = gt_wire_recv_sealed_payload(c->fd, &c->sess, p, h.len, "the store server", deadline, NULL);
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
  if (rep) {
    *rep = p;
    *rep_len = h.len - 4;
  } else {
    free(p);
  }
  return GT_OK;
}

static gt_status start_req(buf *b, uint8_t op, int timeout_ms, uint32_t nitems) {
  uint32_t t = timeout_ms < 0 ? UINT32_MAX / 2 : (uint32_t)timeout_ms;
  if (buf_put(b, &op, 1) || buf_u32(b, t) || buf_u32(b, nitems)) return gt_errorf(GT_ENOMEM, "out of memory");
  return GT_OK;
}

static gt_status t_set(gt_store *s, const char *key, const void *val, size_t len) {
  GT_TRY(check_key(key));
  if (len > STORE_MAX_VAL) return gt_errorf(GT_EINVAL, "store value of %zu bytes exceeds %u", len, STORE_MAX_VAL);
  buf b = {0};
  gt_status st = start_req(&b, STORE_SET, 0, 2);
  if (st == GT_OK && (buf_item(&b, key, strlen(key)) || buf_item(&b, val, len)))
    st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = call(s->impl, &b, 0, NULL, NULL);
  free(b.p);
  return st == GT_OK ? st : gt_error_context(st, "store set '%s'", key);
}

static gt_status t_get(gt_store *s, const char *key, void **val, size_t *len, int timeout_ms) {
  GT_TRY(check_key(key));
  buf b = {0};
  gt_status st = start_req(&b, STORE_GET, timeout_ms, 1);
  if (st == GT_OK && buf_item(&b, key, strlen(key))) st = gt_errorf(GT_ENOMEM, "out of memory");
  uint8_t *rep = NULL;
  size_t rl = 0;
  if (st == GT_OK) st = call(s->impl, &b, timeout_ms, &rep, &rl);
  free(b.p);
  if (st == GT_ETIMEDOUT)
    return gt_errorf(st, "store get '%s': no such key after %d ms (did every rank start?)", key, timeout_ms);
  if (st != GT_OK) return gt_error_context(st, "store get '%s'", key);
  *val = rep;
  *len = rl;
  return GT_OK;
}

static gt_status t_wait(gt_store *s, const char *const *keys, int nkeys, int timeout_ms) {
  if (nkeys <= 0) return GT_OK;
  buf b = {0};
  gt_status st = start_req(&b, STORE_WAIT, timeout_ms, (uint32_t)nkeys);
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
  gt_status st = start_req(&b, STORE_ADD, 0, 2);
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
  gt_status st = start_req(&b, STORE_DEL, 0, 1);
  if (st == GT_OK && buf_item(&b, key, strlen(key))) st = gt_errorf(GT_ENOMEM, "out of memory");
  if (st == GT_OK) st = call(s->impl, &b, 0, NULL, NULL);
  free(b.p);
  return st;
}

static void t_destroy(gt_store *s) {
  client *c = s->impl;
  close(c->fd);
  gt_wire_session_close(&c->sess);
  gt_store_server_stop(c->srv);
  pthread_mutex_destroy(&c->mu);
  free(c);
  free(s);
}

static const gt_store_ops tcp_ops = {t_set, t_get, t_wait, t_add, t_del, t_destroy};

int gt_store_tcp_port(const gt_store *s) { return s && s->ops == &tcp_ops ? ((client *)s->impl)->port : -1; }

gt_status gt_store_tcp_open(const gt_store_tcp_config *cfg, gt_store **out) {
  if (!cfg || !out) return gt_errorf(GT_EINVAL, "gt_store_tcp_open: NULL argument");
  const char *secret;
  GT_TRY(gt_wire_secret(cfg->secret, &secret));
  const char *host = cfg->host ? cfg->host : "127.0.0.1";
  gt_store_server *srv = NULL;
  int port = cfg->port;
  if (cfg->is_host) {
    GT_TRY(gt_store_server_start(cfg->host, cfg->port, secret, &srv));
    port = gt_store_server_port(srv);
  }
  if (port <= 0 || port > 65535) {
    gt_store_server_stop(srv);
    return gt_errorf(GT_EINVAL, "store port %d out of range 1..65535", port);
  }
  client *c = calloc(1, sizeof *c);
  gt_store *s = calloc(1, sizeof *s);
  if (!c || !s) {
    free(c);
    free(s);
    gt_store_server_stop(srv);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  int tmo = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
  double deadline = gt_wire_deadline(tmo);
  gt_status st = gt_wire_connect(host, port, deadline, &c->fd);
  if (st == GT_OK) {
    st = gt_wire_auth_client(c->fd, secret, STORE_CTX, GT_WIRE_MAC, 0, deadline, &c->sess);
    if (st != GT_OK) close(c->fd);
  }
  if (st != GT_OK) {
    free(c);
    free(s);
    gt_store_server_stop(srv);
    return gt_error_context(st, "opening the TCP store at %s:%d", host, port);
  }
  pthread_mutex_init(&c->mu, NULL);
  c->port = port;
  c->srv = srv;
  s->ops = &tcp_ops;
  s->impl = c;
  *out = s;
  return GT_OK;
}
