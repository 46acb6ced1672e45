/* Listening sockets inside a port range; see ports.h. */
#include "comm/ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "giant/protocol.h"

static int parse_port(const char *s, char **end) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  long v = strtol(s, end, 10);
  return errno || v < 1 || v > 65535 ? -1 : (int)v;
}

gt_status gt_ports_parse(const char *s, const char *what, gt_port_range *r) {
  *r = (gt_port_range){0, 0};
  char *end = NULL;
  int lo = s ? parse_port(s, &end) : -1, hi = lo;
  if (lo > 0 && *end == '-') hi = parse_port(end + 1, &end);
  if (lo < 0 || hi < 0 || *end)
    return gt_errorf(GT_EINVAL, "%s '%s': want A-B, two ports in 1..65535 (e.g. 41000-41099)", what, s ? s : "");
  if (lo > hi) return gt_errorf(GT_EINVAL, "%s '%s': the first port is greater than the last", what, s);
  r->lo = lo;
  r->hi = hi;
  return GT_OK;
}

gt_status gt_ports_from_env(gt_port_range *r) {
  const char *v = getenv(GT_ENV_COMM_PORTS);
  *r = (gt_port_range){0, 0};
  if (!v || !*v) return GT_OK;
  return gt_ports_parse(v, GT_ENV_COMM_PORTS, r);
}

int gt_ports_count(const gt_port_range *r) { return r->lo > 0 ? r->hi - r->lo + 1 : 0; }

unsigned gt_ports_first(void) {
  const char *v = getenv(GT_ENV_LOCAL_RANK);
  char *end;
  long x = v && *v ? strtol(v, &end, 10) : -1;
  if (v && *v && !*end && x >= 0 && x <= 1 << 20) return (unsigned)x;
  return (unsigned)getpid();
}

/* One listening socket at ai's address and `port`; -1 with *err set to
 * what failed's errno. */
static int listen_at(const struct addrinfo *ai, int port, int *err) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  /* A port whose listener closed keeps the connections it accepted (and
   * their TIME_WAIT after them); with SO_REUSEADDR on both sides, a new
   * listener may bind it all the same, so a group re-formed after a
   * reshape finds the ports its last formation used. */
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa;
  memcpy(&sa, ai->ai_addr, sizeof sa);
  sa.sin_port = htons((uint16_t)port);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

static gt_status resolve(const char *host, struct addrinfo **ai) {
  struct addrinfo hints = {0};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(host, "0", &hints, ai);
  if (g != 0) return gt_errorf(GT_EINVAL, "cannot resolve '%s': %s", host ? host : "*", gai_strerror(g));
  return GT_OK;
}

static void done(int fd, int port, int *fd_out, int *port_out) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) port = ntohs(sa.sin_port);
  *fd_out = fd;
  if (port_out) *port_out = port;
}

gt_status gt_ports_listen_at(const char *host, int port, int *fd_out, int *port_out) {
  if (port < 0 || port > 65535) return gt_errorf(GT_EINVAL, "port %d out of range 0..65535", port);
  struct addrinfo *ai;
  GT_TRY(resolve(host, &ai));
  int err = 0, fd = listen_at(ai, port, &err);
  freeaddrinfo(ai);
  if (fd < 0) return gt_errorf(GT_EIO, "cannot listen on %s:%d: %s", host ? host : "*", port, strerror(err));
  done(fd, port, fd_out, port_out);
  return GT_OK;
}

gt_status gt_ports_listen(const char *host, const gt_port_range *r, unsigned first, int *fd_out, int *port_out) {
  if (r->lo < 1 || r->hi > 65535 || r->lo > r->hi)
    return gt_errorf(GT_EINVAL, "port range %d-%d is not within 1..65535", r->lo, r->hi);
  struct addrinfo *ai;
  GT_TRY(resolve(host, &ai));
  const char *shown = host ? host : "*";
  int n = r->hi - r->lo + 1, in_use = 0, denied = 0;
  gt_status st = GT_OK;
  int fd = -1, port = 0;
  for (int i = 0; i < n && st == GT_OK; i++) {
    port = r->lo + (int)((first + (unsigned)i) % (unsigned)n);
    int err = 0;
    fd = listen_at(ai, port, &err);
    if (fd >= 0) break;
    if (err == EADDRINUSE)
      in_use++;
    else if (err == EACCES)
      denied++;
    else /* no other port would do better: a host not of this machine, out of files */
      st = gt_errorf(GT_EIO, "cannot listen on %s:%d: %s", shown, port, strerror(err));
  }
  freeaddrinfo(ai);
  if (st != GT_OK) return st;
  if (fd < 0) {
    char why[128];
    if (in_use == n)
      snprintf(why, sizeof why, "all %d in use", n);
    else
      snprintf(why, sizeof why, "%d of %d in use, %d below 1024, which only root may bind", in_use, n, denied);
    return gt_errorf(GT_EIO,
                     "no free port on %s in --comm-ports %d-%d (" GT_ENV_COMM_PORTS
                     "): %s; widen the range, or "
                     "free its ports",
                     shown, r->lo, r->hi, why);
  }
  done(fd, port, fd_out, port_out);
  return GT_OK;
}
