/* The address this node's workers advertise to their peers, which they get
 * as GT_COMM_HOST: --comm-host, else the IPv4 address of --comm-iface,
 * else $GT_COMM_HOST, else the local address of this node's route to etcd.
 * The last is what torchrun does: the nodes reach each other over the
 * network they reach etcd by, and the kernel says which of this node's
 * addresses that network sees (a UDP socket connect()ed to etcd sends
 * nothing, but is given the source address of its route). A loopback etcd
 * gives 127.0.0.1, so one machine needs nothing set. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "giant/status.h"
#include "launch/agent.h"

/* One endpoint of a list, "[scheme://]HOST[:PORT]" or "[scheme://][V6]:PORT",
 * into host and port (2379, etcd's, when none is given). */
static void split_endpoint(const char *ep, size_t len, char *host, size_t hn, char *port, size_t pn) {
  const char *sep = memmem(ep, len, "://", 3);
  if (sep) {
    len -= (size_t)(sep + 3 - ep);
    ep = sep + 3;
  }
  const char *end = ep + len, *colon = NULL;
  if (len && *ep == '[') {
    const char *close = memchr(ep, ']', len);
    const char *h = ep + 1;
    size_t n = close ? (size_t)(close - h) : len - 1;
    snprintf(host, hn, "%.*s", (int)n, h);
    colon = close && close + 1 < end && close[1] == ':' ? close + 1 : NULL;
  } else {
    for (const char *q = ep; q < end; q++)
      if (*q == ':') colon = q;
    snprintf(host, hn, "%.*s", (int)((colon ? colon : end) - ep), ep);
  }
  if (colon && colon + 1 < end)
    snprintf(port, pn, "%.*s", (int)(end - colon - 1), colon + 1);
  else
    snprintf(port, pn, "2379");
}

/* The local IPv4 address of the route to host:port, into out; 0, or the
 * errno (or -1 with *gai set when the name does not resolve). */
static int route_to(const char *host, const char *port, char *out, size_t n, int *gai) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai;
  int r = getaddrinfo(host, port, &hints, &ai);
  if (r != 0) {
    *gai = r;
    return -1;
  }
  int err = EADDRNOTAVAIL;
  for (struct addrinfo *a = ai; a && err; a = a->ai_next) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 || getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
      err = errno;
    else if (inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)n))
      err = 0;
    close(fd);
  }
  freeaddrinfo(ai);
  return err;
}

gt_status agent_route_addr(const char *endpoints, char *out, size_t n) {
  char why[300] = "no endpoint given";
  for (const char *ep = endpoints ? endpoints : ""; *ep;) {
    size_t len = strcspn(ep, ",");
    char host[256], port[32];
    split_endpoint(ep, len, host, sizeof host, port, sizeof port);
    int gai = 0, err = route_to(host, port, out, n, &gai);
    if (err == 0) return GT_OK;
    snprintf(why, sizeof why, "%s:%s: %s", host, port, err < 0 ? gai_strerror(gai) : strerror(err));
    ep += len;
    ep += *ep == ',';
  }
  return gt_errorf(GT_ECONN,
                   "cannot tell this node's address from its route to etcd (%s): IPv4 only; give --comm-host ADDR "
                   "or --comm-iface NAME",
                   why);
}

/* Whether name is in the ", "-separated list. */
static bool listed(const char *names, const char *name) {
  size_t k = strlen(name);
  for (const char *p = names; (p = strstr(p, name)) != NULL; p += k)
    if ((p == names || p[-1] == ' ') && (p[k] == ',' || p[k] == 0)) return true;
  return false;
}

gt_status agent_iface_addr(const char *iface, char *out, size_t n) {
  struct ifaddrs *all;
  if (getifaddrs(&all) != 0) return gt_errorf(GT_EIO, "--comm-iface %s: getifaddrs: %s", iface, strerror(errno));
  bool found = false, have = false;
  char names[256] = "";
  size_t used = 0;
  for (struct ifaddrs *a = all; a && !have; a = a->ifa_next) {
    if (!strcmp(a->ifa_name, iface)) {
      found = true;
      if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET)
        have = inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, out, (socklen_t)n) != NULL;
    } else if (!listed(names, a->ifa_name) && used + strlen(a->ifa_name) + 3 < sizeof names) {
      /* Each name once (an interface is listed per address family). */
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", a->ifa_name);
    }
  }
  freeifaddrs(all);
  if (have) return GT_OK;
  if (found)
    return gt_errorf(GT_EINVAL, "--comm-iface %s: the interface has no IPv4 address (communicators speak IPv4)", iface);
  return gt_errorf(GT_EINVAL, "--comm-iface %s: no such network interface on this node (it has: %s)", iface,
                   used ? names : "none");
}

/* Whether addr is one of this node's own, which workers can listen on:
 * it resolves to IPv4, is not the wildcard, and a socket binds to it. */
static gt_status check_local(const char *addr, const char *from) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
  int r = getaddrinfo(addr, "0", &hints, &ai);
  if (r != 0) return gt_errorf(GT_EINVAL, "%s '%s' is no IPv4 address: %s", from, addr, gai_strerror(r));
  struct sockaddr_in *sa = (struct sockaddr_in *)ai->ai_addr;
  int err = 0;
  if (sa->sin_addr.s_addr == htonl(INADDR_ANY)) {
    err = EDESTADDRREQ;
  } else {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(ai);
  if (err == EDESTADDRREQ)
    return gt_errorf(GT_EINVAL,
                     "%s '%s' is the wildcard address, which peers cannot connect to: give one of this "
                     "node's own addresses",
                     from, addr);
  if (err)
    return gt_errorf(GT_EINVAL,
                     "%s '%s' is not an address of this node (%s): workers listen on it, so give one of this "
                     "node's own addresses, or --comm-iface NAME",
                     from, addr, strerror(err));
  return GT_OK;
}

gt_status agent_comm_addr(agent_opts *o, const char *endpoints) {
  const char *env = getenv(GT_ENV_COMM_HOST);
  char *a = o->comm_addr, *from = o->comm_addr_from;
  size_t an = sizeof o->comm_addr, fn = sizeof o->comm_addr_from;
  if (o->comm_host) {
    snprintf(a, an, "%s", o->comm_host);
    snprintf(from, fn, "--comm-host");
  } else if (o->comm_iface) {
    GT_TRY(agent_iface_addr(o->comm_iface, a, an));
    snprintf(from, fn, "--comm-iface %s", o->comm_iface);
  } else if (env && *env) {
    if (strlen(env) >= an) return gt_errorf(GT_EINVAL, "GT_COMM_HOST '%.40s...' is too long", env);
    snprintf(a, an, "%s", env);
    snprintf(from, fn, "GT_COMM_HOST");
  } else if (endpoints) {
    GT_TRY(agent_route_addr(endpoints, a, an));
    snprintf(from, fn, "this node's route to etcd");
  } else {
    a[0] = 0; /* the route, once etcd is known */
    return GT_OK;
  }
  return check_local(a, from);
}
