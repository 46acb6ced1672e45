/* The TCP transport: the mesh of authenticated connections, and the engine
 * that runs a plan over it.
 *
 * The engine keeps one non-blocking send and one non-blocking receive in
 * flight and polls both (and the wake fd that abort writes to). Received
 * bytes land in a staging piece and are reduced or copied out as soon as
 * the piece is complete, so the kernel keeps receiving while we reduce.
 * Every step's bytes are preceded by a header frame that the receiver
 * checks (type, per-peer sequence, length). */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "giant/log.h"
#include "comm/comm_internal.h"
#include "comm/wire.h"

#define PIECE (512u << 10)
#define SEND_MAX (1u << 20)

typedef struct side {
  int step;            /* current step */
  size_t done;         /* bytes of it delivered (rx: reduced/copied) */
  uint8_t hdr[GT_WIRE_HDR];
  int hdr_done;        /* header bytes moved */
  size_t fill;         /* rx: bytes in the staging piece */
} side;

static size_t allowed(const plan *p, const side *rx, int k, size_t len) {
  int d = k - p->dep;
  if (p->dep < 0 || d < 0) return len;
  if (rx->step > d) return len;
  if (rx->step == d) return rx->done;
  return 0;
}

static gt_status peer_gone(gt_comm *c, int peer, const char *what, int err) {
  if (atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
  return gt_errorf(GT_ECONN, "%s rank %d: %s (the peer died, exited or its group failed)", what,
                   peer, err ? strerror(err) : "connection closed");
}

static gt_status consume(const plan *p, const plan_step *s, size_t off, const char *data,
                         size_t len) {
  if (s->src2) {
    size_t es = gt_dtype_size(p->dtype);
    gt_comm_reduce(p->dtype, s->ptr + off, s->src2 + off, data, len / es);
  } else if (s->ptr + off != data) {
    memcpy(s->ptr + off, data, len);
  }
  return GT_OK;
}

gt_status gt_comm_run_tcp(gt_comm *c, const plan *p, double deadline) {
  side tx = {0}, rx = {0};
  int tfd = p->tx_peer >= 0 ? c->fds[p->tx_peer] : -1;
  int rfd = p->rx_peer >= 0 ? c->fds[p->rx_peer] : -1;
  char *stage = NULL;
  bool reducing = false;
  for (int k = 0; k < p->nrx; k++) reducing |= p->rx[k].src2 != NULL;
  if (reducing && !(stage = malloc(PIECE)))
    return gt_errorf(GT_ENOMEM, "out of memory for a receive buffer");
  if (p->ntx) gt_wire_hdr_encode(tx.hdr, GT_MSG_DATA, p->tx_seq, (uint32_t)p->tx[0].len);
  gt_status st = GT_OK;
  uint32_t rx_seq = p->rx_seq;
  while (tx.step < p->ntx || rx.step < p->nrx) {
    if (atomic_load(&c->aborted)) {
      st = gt_comm_aborted_status(c);
      break;
    }
    bool progress = false, want_out = false;
    /* ---- send ---- */
    while (tx.step < p->ntx) {
      const plan_step *s = &p->tx[tx.step];
      const char *src;
      size_t n;
      if (tx.hdr_done < GT_WIRE_HDR) {
        src = (const char *)tx.hdr + tx.hdr_done, n = GT_WIRE_HDR - (size_t)tx.hdr_done;
      } else {
        size_t a = allowed(p, &rx, tx.step, s->len);
        if (a <= tx.done) break;
        src = s->ptr + tx.done, n = a - tx.done;
        if (n > SEND_MAX) n = SEND_MAX;
      }
      ssize_t w = n ? send(tfd, src, n, MSG_NOSIGNAL) : 0;
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          want_out = true;
          break;
        }
        st = peer_gone(c, p->tx_peer, "sending to", errno);
        goto out;
      }
      progress |= w > 0;
      if (tx.hdr_done < GT_WIRE_HDR) tx.hdr_done += (int)w;
      else tx.done += (size_t)w;
      if (tx.hdr_done == GT_WIRE_HDR && tx.done == s->len) {
        tx.step++, tx.done = 0, tx.hdr_done = 0;
        if (tx.step < p->ntx)
          gt_wire_hdr_encode(tx.hdr, GT_MSG_DATA, p->tx_seq, (uint32_t)p->tx[tx.step].len);
        progress = true;
      }
    }
    /* ---- receive ---- */
    while (rx.step < p->nrx) {
      const plan_step *s = &p->rx[rx.step];
      char *dst;
      size_t n;
      if (rx.hdr_done < GT_WIRE_HDR) {
        dst = (char *)rx.hdr + rx.hdr_done, n = GT_WIRE_HDR - (size_t)rx.hdr_done;
      } else if (s->src2) {
        size_t piece = s->len - rx.done < PIECE ? s->len - rx.done : PIECE;
        dst = stage + rx.fill, n = piece - rx.fill;
      } else {
        dst = s->ptr + rx.done, n = s->len - rx.done;
      }
      ssize_t got = n ? recv(rfd, dst, n, 0) : 0;
      if (n && got == 0) {
        st = peer_gone(c, p->rx_peer, "receiving from", 0);
        goto out;
      }
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        st = peer_gone(c, p->rx_peer, "receiving from", errno);
        goto out;
      }
      progress |= got > 0;
      if (rx.hdr_done < GT_WIRE_HDR) {
        rx.hdr_done += (int)got;
        if (rx.hdr_done == GT_WIRE_HDR) {
          gt_wire_hdr h;
          st = gt_wire_hdr_decode(rx.hdr, &h);
          if (st == GT_OK) st = gt_wire_hdr_expect(&h, GT_MSG_DATA, rx_seq, (uint32_t)s->len);
          if (st != GT_OK) {
            st = gt_error_context(st, "from rank %d", p->rx_peer);
            goto out;
          }
        }
      } else if (s->src2) {
        rx.fill += (size_t)got;
        size_t piece = s->len - rx.done < PIECE ? s->len - rx.done : PIECE;
        if (rx.fill == piece) {
          consume(p, s, rx.done, stage, piece);
          rx.done += piece, rx.fill = 0;
        }
      } else {
        rx.done += (size_t)got;
      }
      if (rx.hdr_done == GT_WIRE_HDR && rx.done == s->len) {
        rx.step++, rx.done = 0, rx.hdr_done = 0, rx.fill = 0;
        progress = true;
      }
    }
    if (progress) continue;
    /* ---- nothing moved: sleep until a socket is ready ---- */
    double now = gt_now();
    if (now >= deadline) {
      if (rx.step < p->nrx)
        st = gt_errorf(GT_ETIMEDOUT, "no data from rank %d before the operation timeout (%.1f s): it is stopped, hung or far behind",
                       p->rx_peer, c->op_timeout);
      else
        st = gt_errorf(GT_ETIMEDOUT, "rank %d took no data before the operation timeout (%.1f s): it is stopped, hung or far behind",
                       p->tx_peer, c->op_timeout);
      break;
    }
    struct pollfd pf[3];
    int np = 0;
    pf[np++] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    if (rx.step < p->nrx) pf[np++] = (struct pollfd){.fd = rfd, .events = POLLIN | POLLRDHUP};
    if (want_out) pf[np++] = (struct pollfd){.fd = tfd, .events = POLLOUT};
    else if (tx.step < p->ntx) pf[np++] = (struct pollfd){.fd = tfd, .events = POLLRDHUP};
    double left = deadline - now;
    int ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
    if (poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR) {
      st = gt_errorf(GT_EIO, "poll: %s", strerror(errno));
      break;
    }
    /* A peer that closed while we only send shows as RDHUP or HUP. */
    for (int i = 1; i < np; i++) {
      if (pf[i].fd == tfd && (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
          !(pf[i].fd == rfd && (pf[i].revents & POLLIN)) && tx.step < p->ntx) {
        st = peer_gone(c, p->tx_peer, "sending to", 0);
        goto out;
      }
    }
  }
out:
  free(stage);
  return st;
}

/* ---- forming the mesh ---- */

/* A peer's "HOST PORT" as the store holds it: bytes anyone with the store
 * could have written, not a C string. Refused, and shown with anything
 * unprintable as '?', unless it is one host name (letters, digits and
 * ".-:_[]%") and a port in 1..65535. */
static gt_status parse_addr(const void *v, size_t len, int rank, char host[100], int *port) {
  char s[128], shown[128];
  size_t n = len < sizeof s - 1 ? len : sizeof s - 1;
  memcpy(s, v, n);
  s[n] = '\0';
  for (size_t i = 0; i <= n; i++) shown[i] = s[i] && (s[i] < 0x20 || s[i] > 0x7e) ? '?' : s[i];
  char extra = 0;
  int got = n == len && strlen(s) == len ? sscanf(s, "%99s %d %c", host, port, &extra) : 0;
  /* A host is a name or an IPv4/IPv6 literal. */
  for (const char *q = host; got == 2 && *q; q++)
    if (!isalnum((unsigned char)*q) && !strchr(".-:_[]%", *q)) got = 0;
  if (got != 2 || *port <= 0 || *port > 65535)
    return gt_errorf(GT_EFORMAT,
                     "malformed address '%s%s' of rank %d in the store (want 'HOST PORT'): the store is shared "
                     "with something that is not this job, or was damaged; use a fresh store or prefix",
                     shown, n < len ? "..." : "", rank);
  return GT_OK;
}

gt_status gt_comm_mesh_connect(gt_comm *c, const char *host, double deadline) {
  if (c->size == 1) return GT_OK;
  int lfd = -1, port = 0;
  GT_TRY(gt_wire_listen(host, 0, &lfd, &port));
  char key[320], val[128], ctx[256];
  snprintf(ctx, sizeof ctx, "comm:%s", c->prefix);
  gt_comm_key(c, key, sizeof key, "addr/%d", c->rank);
  int vl = snprintf(val, sizeof val, "%s %d", host, port);
  gt_status st = gt_store_set(c->store, key, val, (size_t)vl);
  /* Connect to every lower rank; they accept us. */
  for (int j = 0; st == GT_OK && j < c->rank; j++) {
    void *v = NULL;
    size_t len = 0;
    gt_comm_key(c, key, sizeof key, "addr/%d", j);
    int ms = (int)((deadline - gt_now()) * 1000);
    st = gt_store_get(c->store, key, &v, &len, ms > 0 ? ms : 0);
    if (st != GT_OK) break;
    char h[100] = "";
    int p = 0;
    st = parse_addr(v, len, j, h, &p);
    free(v);
    if (st != GT_OK) break;
    st = gt_wire_connect(h, p, deadline, &c->fds[j]);
    if (st == GT_OK) st = gt_wire_auth_client(c->fds[j], c->secret, ctx, (uint32_t)c->rank, deadline);
    if (st != GT_OK) st = gt_error_context(st, "connecting to rank %d at %s:%d", j, h, p);
  }
  /* Take every higher rank in; refuse anything else and keep going. */
  if (st == GT_OK) st = gt_comm_accept_peers(c, lfd, ctx, deadline);
  close(lfd);
  return st;
}
