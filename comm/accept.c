/* Taking the higher ranks of a group in (gt_comm_accept_peers).
 *
 * Anyone who can reach the listening port may connect, so each connection
 * proves the job's secret on a thread of its own while the accept loop
 * goes on: a stranger that says nothing costs one of MAX_PENDING slots
 * until its handshake times out (AUTH_S) or a newer connection needs the
 * slot, never the group's formation. A real rank proves the secret in
 * milliseconds, so evicting the oldest handshake when the slots are full
 * evicts a stranger. A finished handshake rings the loop's bell (an
 * eventfd), so the group forms as soon as its last peer has proved itself
 * rather than at the loop's next turn. A connection whose handshake fails,
 * or that claims a rank that is not an expected peer (lower, out of range,
 * or already here), is refused with a warning and closed. A peer that proves the secret but
 * protects its frames otherwise (GT_EINVAL from the handshake) is a rank
 * of the job started with other settings: that fails the group at once,
 * as it fails on the peer's side. */
#include <openssl/crypto.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "giant/log.h"
#include "comm/comm_internal.h"
#include "comm/wire.h"
#include "giant/engine/comm.h"

#define MAX_PENDING 64
#define AUTH_S 5.0
#define POLL_S 1.0 /* the longest the loop sleeps before it looks at the deadline again */

typedef struct pending {
  int fd;
  char peer[64];
  pthread_t thread;
  bool done, evicted;
  gt_status st;
  uint32_t id;
  gt_wire_session sess; /* the keys of an accepted peer's frames */
  char why[256];
  const char *secret, *ctx;
  gt_wire_mode mode;
  double started, deadline;
  pthread_mutex_t *mu;
  int bell; /* rung when the handshake ends */
} pending;

static void *handshake_main(void *arg) {
  pending *p = arg;
  uint32_t id = 0;
  gt_status st = gt_wire_auth_server(p->fd, p->secret, p->ctx, p->mode, &id, p->deadline, &p->sess);
  pthread_mutex_lock(p->mu);
  p->st = st;
  p->id = id;
  p->done = true;
  if (st != GT_OK) snprintf(p->why, sizeof p->why, "%s", gt_last_error());
  pthread_mutex_unlock(p->mu);
  uint64_t one = 1;
  if (write(p->bell, &one, sizeof one) < 0) { /* a full counter still wakes the loop */
  }
  OPENSSL_thread_stop(); /* this thread's OpenSSL state, as in the store's */
  return NULL;
}

/* Joins a finished handshake: the fd becomes rank id's, or is closed.
 * Returns GT_EINVAL for a peer of other settings, which ends the group. */
static gt_status settle(gt_comm *c, pending *p, int *need) {
  pthread_join(p->thread, NULL);
  gt_status a = p->st;
  gt_status fatal = GT_OK;
  if (a == GT_EINVAL) fatal = gt_errorf(GT_EINVAL, "rank %u at %s: %s", p->id, p->peer, p->why);
  if (a == GT_OK && ((int)p->id <= c->rank || (int)p->id >= c->size || c->fds[p->id] >= 0)) {
    a = GT_EAUTH;
    snprintf(p->why, sizeof p->why, "it claims rank %u, which is not an expected peer", p->id);
  }
  if (a != GT_OK) {
    if (!p->evicted && fatal == GT_OK)
      gt_warn("group '%s': refused a connection from %s: %s", c->prefix, p->peer, p->why);
    if (p->st == GT_OK) gt_wire_session_close(&p->sess);
    close(p->fd);
  } else {
    c->fds[p->id] = p->fd;
    c->sess[p->id] = p->sess;
    (*need)--;
  }
  free(p);
  return fatal;
}

/* Settles every finished handshake among slot[0..*n), keeping the rest;
 * the first GT_EINVAL of settle, if any. */
static gt_status collect(gt_comm *c, pending **slot, int *n, pthread_mutex_t *mu, int *need) {
  gt_status st = GT_OK;
  for (int i = 0; i < *n;) {
    pthread_mutex_lock(mu);
    bool done = slot[i]->done;
    pthread_mutex_unlock(mu);
    if (!done) {
      i++;
      continue;
    }
    gt_status f = settle(c, slot[i], need);
    if (st == GT_OK) st = f;
    slot[i] = slot[--*n];
  }
  return st;
}

gt_status gt_comm_accept_peers(gt_comm *c, int lfd, const char *ctx, gt_wire_mode mode, double deadline) {
  int need = c->size - 1 - c->rank;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pending *slot[MAX_PENDING];
  int n = 0;
  uint64_t evicted = 0;
  gt_status st = GT_OK;
  int bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (bell < 0) return gt_errorf(GT_EIO, "eventfd: %s", strerror(errno));
  while (need > 0) {
    if ((st = collect(c, slot, &n, &mu, &need)) != GT_OK) break; /* finished handshakes first */
    if (need == 0) break;
    double now = gt_now();
    if (now >= deadline) {
      st = gt_errorf(GT_ETIMEDOUT, "waiting for %d higher rank(s) to connect: timed out", need);
      break;
    }
    /* A new connection, or a handshake's end. */
    struct pollfd pf[2] = {{.fd = lfd, .events = POLLIN}, {.fd = bell, .events = POLLIN}};
    double wait = deadline - now < POLL_S ? deadline - now : POLL_S;
    int k = poll(pf, 2, (int)(wait * 1000) + 1);
    if (k < 0 && errno != EINTR) {
      st = gt_errorf(GT_EIO, "waiting for %d higher rank(s) to connect: poll: %s", need, strerror(errno));
      break;
    }
    if (k > 0 && pf[1].revents) {
      uint64_t rings;
      if (read(bell, &rings, sizeof rings) < 0) { /* drained already */
      }
    }
    if (k <= 0 || !pf[0].revents) continue;
    int fd;
    char peer[64];
    gt_status a = gt_wire_accept(lfd, gt_now(), NULL, &fd, peer, sizeof peer);
    if (a == GT_ETIMEDOUT) continue; /* the connection left before it was taken */
    if (a != GT_OK) {
      st = gt_error_context(a, "waiting for %d higher rank(s) to connect", need);
      break;
    }
    if (n == MAX_PENDING) {
      /* The oldest handshake, most likely a stranger's, makes room; its
       * thread fails at once and is settled with the others. */
      pending *oldest = NULL;
      for (int i = 0; i < n; i++)
        if (!slot[i]->evicted && (!oldest || slot[i]->started < oldest->started)) oldest = slot[i];
      if (oldest) {
        shutdown(oldest->fd, SHUT_RDWR);
        oldest->evicted = true;
        evicted++;
      }
      /* Every slot taken by an evicted handshake still leaving: wait. */
      for (st = collect(c, slot, &n, &mu, &need); st == GT_OK && n == MAX_PENDING;
           st = collect(c, slot, &n, &mu, &need))
        usleep(1000);
      if (st != GT_OK) {
        close(fd);
        break;
      }
    }
    pending *p = calloc(1, sizeof *p);
    if (!p) {
      close(fd);
      st = gt_errorf(GT_ENOMEM, "out of memory taking peers in");
      break;
    }
    double t0 = gt_now();
    *p = (pending){.fd = fd,
                   .secret = c->secret,
                   .ctx = ctx,
                   .mode = mode,
                   .mu = &mu,
                   .bell = bell,
                   .started = t0,
                   .deadline = t0 + AUTH_S < deadline ? t0 + AUTH_S : deadline};
    snprintf(p->peer, sizeof p->peer, "%s", peer);
    if (pthread_create(&p->thread, NULL, handshake_main, p) != 0) {
      close(fd);
      free(p);
      st = gt_errorf(GT_EIO, "cannot start a thread to take a peer in");
      break;
    }
    slot[n++] = p;
  }
  /* Whatever is still proving itself is not needed: cut it short. */
  for (int i = 0; i < n; i++) {
    shutdown(slot[i]->fd, SHUT_RDWR);
    slot[i]->evicted = true;
  }
  for (int i = 0; i < n; i++) {
    pthread_join(slot[i]->thread, NULL);
    if (slot[i]->st == GT_OK) gt_wire_session_close(&slot[i]->sess);
    close(slot[i]->fd);
    free(slot[i]);
  }
  if (evicted)
    gt_warn("group '%s': cut %llu handshake(s) short to make room for others", c->prefix, (unsigned long long)evicted);
  close(bell);
  pthread_mutex_destroy(&mu);
  return st;
}
