/* Framed messages over TCP with deadlines; see wire.h. */
#include "comm/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/ports.h"
#include "giant/log.h"
#include "giant/protocol.h"

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void gt_wire_hdr_encode(uint8_t out[GT_WIRE_HDR], uint16_t type, uint32_t seq, uint32_t len) {
  put32(out, GT_WIRE_MAGIC);
  out[4] = GT_WIRE_VERSION & 0xff;
  out[5] = GT_WIRE_VERSION >> 8;
  out[6] = (uint8_t)type;
  out[7] = (uint8_t)(type >> 8);
  put32(out + 8, seq);
  put32(out + 12, len);
}

gt_status gt_wire_hdr_decode(const uint8_t in[GT_WIRE_HDR], gt_wire_hdr *h) {
  h->magic = get32(in);
  h->version = (uint16_t)(in[4] | in[5] << 8);
  h->type = (uint16_t)(in[6] | in[7] << 8);
  h->seq = get32(in + 8);
  h->len = get32(in + 12);
  if (h->magic != GT_WIRE_MAGIC)
    return gt_errorf(GT_EFORMAT,
                     "bad frame magic 0x%08x (expected 0x%08x): the peer is not a Giant process of this job, or the "
                     "stream is out of step",
                     h->magic, GT_WIRE_MAGIC);
  if (h->version != GT_WIRE_VERSION)
    return gt_errorf(GT_EFORMAT, "wire protocol version %u, this build speaks %u: run one Giant version across the job",
                     h->version, GT_WIRE_VERSION);
  return GT_OK;
}

gt_status gt_wire_hdr_expect(const gt_wire_hdr *h, uint16_t type, uint32_t seq, uint32_t len) {
  if (h->type != type || h->seq != seq || h->len != len)
    return gt_errorf(GT_EFORMAT,
                     "unexpected frame (type %u seq %u len %u; expected type %u seq %u len %u): ranks issued different "
                     "operations or the stream is corrupt",
                     h->type, h->seq, h->len, type, seq, len);
  return GT_OK;
}

double gt_wire_deadline(int timeout_ms) {
  if (timeout_ms < 0) return 1e300;
  return gt_now() + timeout_ms / 1000.0;
}

/* Milliseconds to wait in one poll: short, so abort flags are seen. */
static int poll_slice(double deadline) {
  double left = deadline - gt_now();
  if (left <= 0) return 0;
  return left > 0.05 ? 50 : (int)(left * 1000) + 1;
}

static gt_status wait_fd(int fd, short ev, double deadline, const atomic_int *abort_flag, const char *what) {
  for (;;) {
    if (abort_flag && atomic_load(abort_flag)) return gt_errorf(GT_EABORTED, "%s: aborted", what);
    if (gt_now() >= deadline) return gt_errorf(GT_ETIMEDOUT, "%s: timed out", what);
    struct pollfd p = {.fd = fd, .events = ev};
    int r = poll(&p, 1, poll_slice(deadline));
    if (r < 0 && errno != EINTR) return gt_errorf(GT_EIO, "%s: poll: %s", what, strerror(errno));
    if (r > 0) return GT_OK;
  }
}

gt_status gt_wire_send_all(int fd, const void *buf, size_t len, double deadline, const atomic_int *abort_flag) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GT_TRY(wait_fd(fd, POLLOUT, deadline, abort_flag, "send"));
      continue;
    }
    return gt_errorf(GT_ECONN, "send: %s (the peer closed the connection or died)",
                     n < 0 ? strerror(errno) : "nothing sent");
  }
  return GT_OK;
}

gt_status gt_wire_recv_all(int fd, void *buf, size_t len, double deadline, const atomic_int *abort_flag) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return gt_errorf(GT_ECONN, "recv: the peer closed the connection (it exited, died or aborted)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      GT_TRY(wait_fd(fd, POLLIN, deadline, abort_flag, "recv"));
      continue;
    }
    return gt_errorf(GT_ECONN, "recv: %s", strerror(errno));
  }
  return GT_OK;
}

gt_status gt_wire_send_frame(int fd, uint16_t type, uint32_t seq, const void *payload, uint32_t len, double deadline,
                             const atomic_int *abort_flag) {
  uint8_t h[GT_WIRE_HDR];
  gt_wire_hdr_encode(h, type, seq, len);
  GT_TRY(gt_wire_send_all(fd, h, sizeof h, deadline, abort_flag));
  if (len) GT_TRY(gt_wire_send_all(fd, payload, len, deadline, abort_flag));
  return GT_OK;
}

gt_status gt_wire_recv_frame(int fd, uint16_t type, gt_wire_hdr *h, void *payload, size_t cap, double deadline,
                             const atomic_int *abort_flag) {
  uint8_t raw[GT_WIRE_HDR];
  GT_TRY(gt_wire_recv_all(fd, raw, sizeof raw, deadline, abort_flag));
  GT_TRY(gt_wire_hdr_decode(raw, h));
  if (h->type != type) return gt_errorf(GT_EFORMAT, "unexpected frame type %u (expected %u)", h->type, type);
  if (h->len > cap) return gt_errorf(GT_EFORMAT, "frame of %u bytes exceeds the %zu this message allows", h->len, cap);
  if (h->len) GT_TRY(gt_wire_recv_all(fd, payload, h->len, deadline, abort_flag));
  return GT_OK;
}

void gt_wire_tune(int fd) {
  int one = 1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 10, intvl = 2, cnt = 5;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  /* Unacknowledged data older than this breaks the connection: a host
   * that vanished is noticed even while we only send. */
  unsigned int user_timeout = 30000;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

static gt_status resolve(const char *host, int port, int passive, struct addrinfo **res) {
  struct addrinfo hints = {0};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int r = getaddrinfo(host, ps, &hints, res);
  if (r != 0) return gt_errorf(GT_EINVAL, "cannot resolve '%s': %s", host ? host : "*", gai_strerror(r));
  return GT_OK;
}

gt_status gt_wire_listen(const char *host, int port, int *fd_out, int *port_out) {
  /* "Any port" means any of GT_COMM_PORTS when the job keeps to a range. */
  gt_port_range r = {0, 0};
  if (port == 0) GT_TRY(gt_ports_from_env(&r));
  if (r.lo) return gt_ports_listen(host, &r, gt_ports_first(), fd_out, port_out);
  return gt_ports_listen_at(host, port, fd_out, port_out);
}

gt_status gt_wire_connect(const char *host, int port, double deadline, int *fd_out) {
  int err;
  return gt_wire_connect_err(host, port, deadline, fd_out, &err);
}

gt_status gt_wire_connect_err(const char *host, int port, double deadline, int *fd_out, int *err_out) {
  *err_out = 0;
  struct addrinfo *ai;
  GT_TRY(resolve(host, port, 0, &ai));
  int delay_ms = 5;
  for (;;) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      freeaddrinfo(ai);
      return gt_errorf(GT_EIO, "socket: %s", strerror(errno));
    }
    int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
    int err = r == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      double left = deadline - gt_now();
      int pr = poll(&p, 1, left <= 0 ? 0 : left > 1.0 ? 1000 : (int)(left * 1000) + 1);
      socklen_t el = sizeof err;
      if (pr > 0)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      else
        err = ETIMEDOUT;
    }
    if (err == 0) {
      freeaddrinfo(ai);
      gt_wire_tune(fd);
      *fd_out = fd;
      return GT_OK;
    }
    close(fd);
    if (gt_now() >= deadline) {
      freeaddrinfo(ai);
      *err_out = err;
      return gt_errorf(GT_ETIMEDOUT, "cannot connect to %s:%d: %s (is the peer up and reachable?)", host, port,
                       strerror(err));
    }
    struct timespec ts = {0, delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 100) delay_ms *= 2;
  }
}

gt_status gt_wire_accept(int lfd, double deadline, const atomic_int *abort_flag, int *fd_out, char *peer,
                         size_t peer_len) {
  for (;;) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
    if (fd >= 0) {
      gt_wire_tune(fd);
      if (peer) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        snprintf(peer, peer_len, "%s:%d", ip, ntohs(sa.sin_port));
      }
      *fd_out = fd;
      return GT_OK;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return gt_errorf(GT_EIO, "accept: %s", strerror(errno));
    GT_TRY(wait_fd(lfd, POLLIN, deadline, abort_flag, "waiting for peers to connect"));
  }
}

gt_status gt_wire_secret(const char *given, const char **out) {
  const char *s = given ? given : getenv(GT_ENV_JOB_SECRET);
  if (!s || !*s)
    return gt_errorf(
        GT_EINVAL, "no job secret: set GT_JOB_SECRET (the same random string on every rank) or pass one in the config");
  /* A short secret falls to a guess offline: anyone who sees one handshake
   * can try candidates against its HMAC. */
  if (strlen(s) < GT_WIRE_SECRET_MIN)
    return gt_errorf(GT_EINVAL, "the job secret %s is %zu bytes: it must be at least %d (e.g. `openssl rand -hex 16`)",
                     given ? "given" : "in GT_JOB_SECRET", strlen(s), GT_WIRE_SECRET_MIN);
  *out = s;
  return GT_OK;
}
