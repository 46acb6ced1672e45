/* The TCP transport: the mesh of authenticated connections, and the engine
 * that runs a plan over it.
 *
 * The engine keeps one non-blocking send and one non-blocking receive in
 * flight and polls both (and the wake fd that abort writes to). Received
 * bytes land in a staging piece and are reduced or copied out as soon as
 * the piece is complete, so the kernel keeps receiving while we reduce.
 * Every step's bytes are preceded by a header that the receiver checks
 * (its tag, then type, per-peer sequence, length) and, with payload
 * integrity or encryption on, followed by the payload's tag (wire.h,
 * sealed frames). Encryption streams too: the sender encrypts the next
 * piece it may send into a staging piece of its own (the user's buffer is
 * never written), and the receiver decrypts each read where it landed,
 * before the bytes are reduced, copied on or forwarded. */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "giant/log.h"
#include "giant/protocol.h"
#include "comm/comm_internal.h"
#include "comm/wire.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

#define PIECE (512u << 10)
#define SEND_MAX (1u << 20)
/* The bytes encrypted at a time into the send side's staging piece: small
 * enough to stay in cache between the cipher and send's copy. */
#define SEAL_PIECE (256u << 10)
/* The send buffer for a peer on this host while a plan moves steps of
 * NEAR_BIG bytes or more, and the one gt_wire_tune gives every socket.
 * Over loopback the kernel queues what we send straight into the peer's
 * receive queue, so a big send buffer lets us run megabytes ahead and the
 * peer then copies data that has left the caches; 256 KiB (512 KiB as the
 * kernel counts it) keeps what is in flight in cache. Alternated in the
 * same ranks on two cores, two-rank all-reduce: on a heavily loaded
 * machine 1.6x at 64 MiB and 1.8x at 4 MiB over 4 MiB buffers; lightly
 * loaded, 1.1-1.2x over 64 KiB at 4 to 64 MiB, and 1 MiB slower again.
 * Any small buffer cost 10% at 1 MiB (steps of 512 KiB), hence the
 * threshold. Peers on other hosts keep the big buffer, which a real
 * network's latency needs. */
#define NEAR_SNDBUF (256 << 10)
#define NEAR_BIG ((size_t)1 << 20)
#define FAR_SNDBUF (4 << 20)

typedef struct side {
  int step;                        /* current step */
  size_t done;                     /* bytes of it delivered (rx: reduced/copied) */
  uint8_t hdr[GT_WIRE_SEALED_HDR]; /* the header and its tag */
  int hdr_done;                    /* header bytes moved */
  size_t fill;                     /* rx: bytes in the staging piece */
  size_t ct_from, ct_to;           /* tx, encrypting: the step's bytes in the staging piece */
  uint8_t tag[GT_WIRE_TAG];        /* payload integrity or encryption: the payload's tag */
  int tag_done;                    /* its bytes moved */
} side;

static size_t allowed(const plan *p, const side *rx, int k, size_t len) {
  int d = k - p->dep;
  if (p->dep < 0 || d < 0) return len;
  if (rx->step > d) return len;
  if (rx->step == d) return rx->done;
  return 0;
}

/* Header, payload and (with payload integrity or encryption) the payload's tag all moved. */
static bool frame_done(const side *x, size_t len, bool tagged) {
  return x->hdr_done == GT_WIRE_SEALED_HDR && x->done == len && (!tagged || x->tag_done == GT_WIRE_TAG);
}

static gt_status peer_gone(gt_comm *c, int peer, const char *what, int err) {
  if (atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
  return gt_errorf(GT_ECONN, "%s rank %d: %s (the peer died, exited or its group failed)", what, peer,
                   err ? strerror(err) : "connection closed");
}

static gt_status consume(const plan *p, const plan_step *s, size_t off, const char *data, size_t len) {
  if (s->src2) {
    size_t es = gt_dtype_size(p->dtype);
    gt_comm_reduce(p->dtype, s->ptr + off, s->src2 + off, data, len / es);
  } else if (s->ptr + off != data) {
    memcpy(s->ptr + off, data, len);
  }
  return GT_OK;
}

/* Sizes the send buffer to peer for this plan (see NEAR_SNDBUF). */
static void size_sndbuf(gt_comm *c, const plan *p, int fd) {
  if (fd < 0 || c->sndbuf[p->tx_peer] <= 0) return;
  size_t big = 0;
  for (int k = 0; k < p->ntx; k++) big = p->tx[k].len > big ? p->tx[k].len : big;
  int want = big >= NEAR_BIG ? NEAR_SNDBUF : FAR_SNDBUF;
  if (want != c->sndbuf[p->tx_peer] && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want) == 0)
    c->sndbuf[p->tx_peer] = want;
}

/* Whether the connection's two ends are on this host: loopback, or the
 * same address at both ends. */
static bool same_host(int fd) {
  struct sockaddr_in a = {0}, b = {0};
  socklen_t la = sizeof a, lb = sizeof b;
  if (getsockname(fd, (struct sockaddr *)&a, &la) || getpeername(fd, (struct sockaddr *)&b, &lb)) return false;
  if (a.sin_family != AF_INET || b.sin_family != AF_INET) return false;
  return a.sin_addr.s_addr == b.sin_addr.s_addr || (ntohl(b.sin_addr.s_addr) >> 24) == 127;
}

/* The next frame to send: its sealed header, and the start of its payload's
 * tag or encryption. */
static gt_status tx_begin(gt_wire_session *ss, side *tx, const plan *p, bool mac, bool enc) {
  size_t len = p->tx[tx->step].len;
  GT_TRY(gt_wire_seal_header(ss, tx->hdr, GT_MSG_DATA, p->tx_seq, (uint32_t)len));
  if (enc) {
    GT_TRY(gt_wire_crypt_start(&ss->tx, true, ss->tx_count));
    return len ? GT_OK : gt_wire_crypt_tag(&ss->tx, tx->tag);
  }
  if (!mac) return GT_OK;
  GT_TRY(gt_wire_mac_start(&ss->tx, 'P', ss->tx_count));
  return len ? GT_OK : gt_wire_mac_tag(&ss->tx, tx->tag);
}

gt_status gt_comm_run_tcp(gt_comm *c, const plan *p, double deadline) {
  side tx = {0}, rx = {0};
  int tfd = p->tx_peer >= 0 ? c->fds[p->tx_peer] : -1;
  int rfd = p->rx_peer >= 0 ? c->fds[p->rx_peer] : -1;
  gt_wire_session *ts = p->tx_peer >= 0 ? &c->sess[p->tx_peer] : NULL;
  gt_wire_session *rs = p->rx_peer >= 0 ? &c->sess[p->rx_peer] : NULL;
  bool enc = c->encrypt, mac = c->payload_mac && !enc, tagged = mac || enc;
  size_sndbuf(c, p, tfd);
  char from[96];
  snprintf(from, sizeof from, "rank %d of group '%s'", p->rx_peer, c->prefix);
  char *stage = NULL;
  bool reducing = false;
  for (int k = 0; k < p->nrx; k++) reducing |= p->rx[k].src2 != NULL;
  if (reducing && !(stage = malloc(PIECE))) return gt_errorf(GT_ENOMEM, "out of memory for a receive buffer");
  char *seal = NULL; /* encrypting: the ciphertext being sent */
  if (enc && p->ntx && !(seal = malloc(SEAL_PIECE))) {
    free(stage);
    return gt_errorf(GT_ENOMEM, "out of memory for a send buffer");
  }
  gt_status st = p->ntx ? tx_begin(ts, &tx, p, mac, enc) : GT_OK;
  if (st != GT_OK) goto out;
  uint32_t rx_seq = p->rx_seq;
  while (tx.step < p->ntx || rx.step < p->nrx) {
    if (atomic_load(&c->aborted)) {
      st = gt_comm_aborted_status(c);
      break;
    }
    bool progress = false, want_out = false;
    /* ---- send: sealed header, payload, payload tag ---- */
    while (tx.step < p->ntx) {
      const plan_step *s = &p->tx[tx.step];
      if (frame_done(&tx, s->len, tagged)) {
        ts->tx_count++;
        tx = (side){.step = tx.step + 1};
        if (tx.step < p->ntx && (st = tx_begin(ts, &tx, p, mac, enc)) != GT_OK) goto out;
        progress = true;
        continue;
      }
      const char *src;
      size_t n;
      int phase = tx.hdr_done < GT_WIRE_SEALED_HDR ? 0 : tx.done < s->len ? 1 : 2;
      if (phase == 0) {
        src = (const char *)tx.hdr + tx.hdr_done;
        n = GT_WIRE_SEALED_HDR - (size_t)tx.hdr_done;
      } else if (phase == 1) {
        size_t a = allowed(p, &rx, tx.step, s->len);
        if (enc && tx.done == tx.ct_to) { /* the staged ciphertext is sent: the next piece */
          if (a <= tx.done) break;
          size_t k = a - tx.done < SEAL_PIECE ? a - tx.done : SEAL_PIECE;
          if ((st = gt_wire_crypt(&ts->tx, seal, s->ptr + tx.done, k)) != GT_OK) goto out;
          tx.ct_from = tx.done;
          tx.ct_to = tx.done + k;
        }
        if (enc) {
          src = seal + (tx.done - tx.ct_from);
          n = tx.ct_to - tx.done;
        } else {
          if (a <= tx.done) break;
          src = s->ptr + tx.done;
          n = a - tx.done;
        }
        if (n > SEND_MAX) n = SEND_MAX;
      } else {
        src = (const char *)tx.tag + tx.tag_done;
        n = GT_WIRE_TAG - (size_t)tx.tag_done;
      }
      ssize_t w = send(tfd, src, n, MSG_NOSIGNAL);
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
      if (phase == 0) {
        tx.hdr_done += (int)w;
      } else if (phase == 1) {
        if (mac && (st = gt_wire_mac_add(&ts->tx, src, (size_t)w)) != GT_OK) goto out;
        tx.done += (size_t)w;
        if (mac && tx.done == s->len && (st = gt_wire_mac_tag(&ts->tx, tx.tag)) != GT_OK) goto out;
        if (enc && tx.done == s->len && (st = gt_wire_crypt_tag(&ts->tx, tx.tag)) != GT_OK) goto out;
      } else {
        tx.tag_done += (int)w;
      }
    }
    /* ---- receive: header checked before its length is believed ---- */
    while (rx.step < p->nrx) {
      const plan_step *s = &p->rx[rx.step];
      if (frame_done(&rx, s->len, tagged)) {
        rs->rx_count++;
        rx = (side){.step = rx.step + 1};
        progress = true;
        continue;
      }
      char *dst;
      size_t n;
      int phase = rx.hdr_done < GT_WIRE_SEALED_HDR ? 0 : rx.done < s->len ? 1 : 2;
      if (phase == 0) {
        dst = (char *)rx.hdr + rx.hdr_done;
        n = GT_WIRE_SEALED_HDR - (size_t)rx.hdr_done;
      } else if (phase == 1 && s->src2) {
        size_t piece = s->len - rx.done < PIECE ? s->len - rx.done : PIECE;
        dst = stage + rx.fill;
        n = piece - rx.fill;
      } else if (phase == 1) {
        dst = s->ptr + rx.done;
        n = s->len - rx.done;
      } else {
        dst = (char *)rx.tag + rx.tag_done;
        n = GT_WIRE_TAG - (size_t)rx.tag_done;
      }
      ssize_t got = recv(rfd, dst, n, 0);
      if (got == 0) {
        st = peer_gone(c, p->rx_peer, "receiving from", 0);
        goto out;
      }
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        st = peer_gone(c, p->rx_peer, "receiving from", errno);
        goto out;
      }
      progress = true;
      if (phase == 0) {
        rx.hdr_done += (int)got;
        if (rx.hdr_done == GT_WIRE_SEALED_HDR) {
          gt_wire_hdr h;
          if ((st = gt_wire_open_header(rs, rx.hdr, &h, from)) != GT_OK) goto out;
          if ((st = gt_wire_hdr_expect(&h, GT_MSG_DATA, rx_seq, (uint32_t)s->len)) != GT_OK) {
            st = gt_error_context(st, "from rank %d", p->rx_peer);
            goto out;
          }
          if (mac && (st = gt_wire_mac_start(&rs->rx, 'P', rs->rx_count)) != GT_OK) goto out;
          if (enc && (st = gt_wire_crypt_start(&rs->rx, false, rs->rx_count)) != GT_OK) goto out;
        }
      } else if (phase == 1) {
        /* Reduced as it comes (the kernel keeps receiving meanwhile): a bad
         * payload tag fails the operation after the fact, and the buffer of
         * a failed operation holds nothing to use. Decrypted where it
         * landed, the staging piece or the user's buffer. */
        if (mac && (st = gt_wire_mac_add(&rs->rx, dst, (size_t)got)) != GT_OK) goto out;
        if (enc && (st = gt_wire_crypt(&rs->rx, dst, dst, (size_t)got)) != GT_OK) goto out;
        if (s->src2) {
          rx.fill += (size_t)got;
          size_t piece = s->len - rx.done < PIECE ? s->len - rx.done : PIECE;
          if (rx.fill == piece) {
            consume(p, s, rx.done, stage, piece);
            rx.done += piece;
            rx.fill = 0;
          }
        } else {
          rx.done += (size_t)got;
        }
      } else {
        rx.tag_done += (int)got;
        if (rx.tag_done == GT_WIRE_TAG && enc) {
          if ((st = gt_wire_crypt_check(&rs->rx, rx.tag, rs->rx_count, from)) != GT_OK) goto out;
        } else if (rx.tag_done == GT_WIRE_TAG) {
          char what[160];
          snprintf(what, sizeof what, "the payload of frame %llu from %s", (unsigned long long)rs->rx_count, from);
          if ((st = gt_wire_mac_check(&rs->rx, rx.tag, what)) != GT_OK) goto out;
        }
      }
    }
    if (progress) continue;
    /* ---- nothing moved: sleep until a socket is ready ---- */
    double now = gt_now();
    if (now >= deadline) {
      if (rx.step < p->nrx)
        st = gt_errorf(GT_ETIMEDOUT,
                       "no data from rank %d before the operation timeout (%.1f s): it is stopped, hung or far behind",
                       p->rx_peer, c->op_timeout);
      else
        st = gt_errorf(GT_ETIMEDOUT,
                       "rank %d took no data before the operation timeout (%.1f s): it is stopped, hung or far behind",
                       p->tx_peer, c->op_timeout);
      break;
    }
    struct pollfd pf[3];
    int np = 0;
    pf[np++] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    if (rx.step < p->nrx) pf[np++] = (struct pollfd){.fd = rfd, .events = POLLIN | POLLRDHUP};
    if (want_out)
      pf[np++] = (struct pollfd){.fd = tfd, .events = POLLOUT};
    else if (tx.step < p->ntx)
      pf[np++] = (struct pollfd){.fd = tfd, .events = POLLRDHUP};
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
  free(seal);
  return st;
}

/* ---- forming the mesh ---- */

/* The longest node name a rank's address carries (giantrun's node ids are
 * at most 100 characters of [A-Za-z0-9._-]). */
#define NODE_MAX 100

static bool node_name_ok(const char *s) {
  if (!*s || strlen(s) > NODE_MAX) return false;
  for (const char *q = s; *q; q++)
    if (!isalnum((unsigned char)*q) && !strchr("._-", *q)) return false;
  return true;
}

/* This rank's node, as giantrun names it ($GT_NODE_ID), or NULL: published
 * with its address, so that a peer that cannot reach the address can say
 * which node advertised it. */
static const char *own_node(void) {
  const char *n = getenv(GT_ENV_NODE_ID);
  return n && node_name_ok(n) ? n : NULL;
}

/* A peer's "HOST PORT [NODE]" as the store holds it: bytes anyone with the
 * store could have written, not a C string. Refused, and shown with
 * anything unprintable as '?', unless it is one host name (letters, digits
 * and ".-:_[]%"), a port in 1..65535 and perhaps a node name. */
static gt_status parse_addr(const void *v, size_t len, int rank, char host[100], int *port, char node[NODE_MAX + 1]) {
  char s[256], shown[256];
  size_t n = len < sizeof s - 1 ? len : sizeof s - 1;
  memcpy(s, v, n);
  s[n] = '\0';
  for (size_t i = 0; i <= n; i++) shown[i] = s[i] && (s[i] < 0x20 || s[i] > 0x7e) ? '?' : s[i];
  char extra = 0;
  node[0] = 0;
  int got = n == len && strlen(s) == len ? sscanf(s, "%99s %d %100s %c", host, port, node, &extra) : 0;
  /* A host is a name or an IPv4/IPv6 literal. */
  for (const char *q = host; (got == 2 || got == 3) && *q; q++)
    if (!isalnum((unsigned char)*q) && !strchr(".-:_[]%", *q)) got = 0;
  if (got == 3 && !node_name_ok(node)) got = 0;
  if ((got != 2 && got != 3) || *port <= 0 || *port > 65535)
    return gt_errorf(GT_EFORMAT,
                     "malformed address '%s%s' of rank %d in the store (want 'HOST PORT [NODE]'): the store is "
                     "shared with something that is not this job, or was damaged; use a fresh store or prefix",
                     shown, n < len ? "..." : "", rank);
  return GT_OK;
}

/* Connects to rank j at the address it published. Its listener was open
 * before it published, so the connection is up in a round trip (or
 * queued in its backlog while it still connects to ranks below it); one
 * that no attempt reaches for connect_timeout_ms will not be reached at
 * all: an address of another network, a firewall. That fails the group
 * then, naming the address and whose it is, rather than at the group's
 * timeout, which is for peers that have not published yet. */
static gt_status reach(gt_comm *c, int j, const char *h, int p, const char *node, double deadline) {
  double t0 = gt_now(), by = t0 + c->connect_timeout_ms / 1000.0;
  int err = 0;
  gt_status st = gt_wire_connect_err(h, p, by < deadline ? by : deadline, &c->fds[j], &err);
  if (st != GT_ETIMEDOUT) return st;
  char whose[160];
  if (*node)
    snprintf(whose, sizeof whose, "the address node %s advertised; set giantrun's --comm-host or --comm-iface there",
             node);
  else
    snprintf(whose, sizeof whose,
             "the address it advertised; set giantrun's --comm-host or --comm-iface, or GT_COMM_HOST, on its node");
  return gt_errorf(GT_ETIMEDOUT, "cannot reach rank %d at %s:%d (%s if it is wrong): no connection in %.1f s (%s)", j,
                   h, p, whose, gt_now() - t0, strerror(err));
}

gt_status gt_comm_mesh_connect(gt_comm *c, const char *host, double deadline) {
  if (c->size == 1) return GT_OK;
  int lfd = -1, port = 0;
  GT_TRY(gt_wire_listen(host, 0, &lfd, &port));
  char key[320], val[256], ctx[256];
  /* Each end's payload mode is in the handshake, which names both when
   * they differ: ranks that disagree fail the handshake rather than
   * misread each other's frames. (The transport is agreed over this mesh
   * next, gt_comm_shm_setup.) */
  gt_wire_mode mode = c->encrypt ? GT_WIRE_ENCRYPT : c->payload_mac ? GT_WIRE_MAC : GT_WIRE_HEADERS;
  snprintf(ctx, sizeof ctx, "comm:%s", c->prefix);
  gt_comm_key(c, key, sizeof key, "addr/%d", c->rank);
  const char *node = own_node();
  int vl = snprintf(val, sizeof val, "%.99s %d%s%s", host, port, node ? " " : "", node ? node : "");
  gt_status st = gt_store_set(c->store, key, val, (size_t)vl);
  /* Connect to every lower rank; they accept us. */
  for (int j = 0; st == GT_OK && j < c->rank; j++) {
    void *v = NULL;
    size_t len = 0;
    gt_comm_key(c, key, sizeof key, "addr/%d", j);
    int ms = (int)((deadline - gt_now()) * 1000);
    st = gt_store_get(c->store, key, &v, &len, ms > 0 ? ms : 0);
    if (st != GT_OK) break;
    char h[100] = "", peer_node[NODE_MAX + 1];
    int p = 0;
    st = parse_addr(v, len, j, h, &p, peer_node);
    free(v);
    if (st != GT_OK) break;
    st = reach(c, j, h, p, peer_node, deadline);
    if (st == GT_ETIMEDOUT) break; /* its message names the peer */
    if (st == GT_OK)
      st = gt_wire_auth_client(c->fds[j], c->secret, ctx, mode, (uint32_t)c->rank, deadline, &c->sess[j]);
    if (st != GT_OK) st = gt_error_context(st, "connecting to rank %d at %s:%d", j, h, p);
  }
  /* Take every higher rank in; refuse anything else and keep going. */
  if (st == GT_OK) st = gt_comm_accept_peers(c, lfd, ctx, mode, deadline);
  close(lfd);
  for (int j = 0; st == GT_OK && j < c->size; j++)
    if (c->fds[j] >= 0 && same_host(c->fds[j])) c->sndbuf[j] = FAR_SNDBUF;
  return st;
}
