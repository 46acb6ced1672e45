/* Leases: grant, revoke, time-to-live, and a keepalive thread that renews a
 * lease on a LeaseKeepAlive stream and notices when it is lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

gt_status gt_etcd_lease_grant(gt_etcd_client *c, int64_t ttl_s, int64_t *id) {
  if (!c || !id) return gt_errorf(GT_EINVAL, "etcd lease grant: NULL client or id");
  if (ttl_s <= 0)
    return gt_errorf(GT_EINVAL, "etcd lease grant: TTL must be positive seconds, got %lld", (long long)ttl_s);
  Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
  req.ttl = ttl_s;
  ProtobufCMessage *m = NULL;
  GT_TRY(
      et_unary(c, ET_LEASE_GRANT, &req.base, &etcdserverpb__lease_grant_response__descriptor, &m, "etcd lease grant"));
  Etcdserverpb__LeaseGrantResponse *r = (Etcdserverpb__LeaseGrantResponse *)m;
  gt_status st = GT_OK;
  if (r->error && *r->error)
    st = gt_errorf(GT_EBACKEND, "etcd lease grant: %s", r->error);
  else
    *id = r->id;
  protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

gt_status gt_etcd_lease_revoke(gt_etcd_client *c, int64_t id) {
  if (!c) return gt_errorf(GT_EINVAL, "etcd lease revoke: NULL client");
  Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
  req.id = id;
  ProtobufCMessage *m = NULL;
  char what[64];
  snprintf(what, sizeof what, "etcd lease revoke %llx", (unsigned long long)id);
  GT_TRY(et_unary(c, ET_LEASE_REVOKE, &req.base, &etcdserverpb__lease_revoke_response__descriptor, &m, what));
  protobuf_c_message_free_unpacked(m, NULL);
  return GT_OK;
}

gt_status gt_etcd_lease_ttl(gt_etcd_client *c, int64_t id, int64_t *ttl_s, int64_t *granted_s) {
  if (!c) return gt_errorf(GT_EINVAL, "etcd lease ttl: NULL client");
  Etcdserverpb__LeaseTimeToLiveRequest req = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
  req.id = id;
  ProtobufCMessage *m = NULL;
  char what[64];
  snprintf(what, sizeof what, "etcd lease ttl %llx", (unsigned long long)id);
  GT_TRY(et_unary(c, ET_LEASE_TTL, &req.base, &etcdserverpb__lease_time_to_live_response__descriptor, &m, what));
  Etcdserverpb__LeaseTimeToLiveResponse *r = (Etcdserverpb__LeaseTimeToLiveResponse *)m;
  /* etcd answers an unknown lease with TTL -1 rather than an error. */
  int64_t ttl = r->ttl, granted = r->grantedttl;
  protobuf_c_message_free_unpacked(m, NULL);
  if (ttl < 0)
    return gt_errorf(GT_ENOTFOUND, "etcd lease %llx does not exist (expired or revoked)", (unsigned long long)id);
  if (ttl_s) *ttl_s = ttl;
  if (granted_s) *granted_s = granted;
  return GT_OK;
}

/* ---- keepalive ---- */

struct gt_etcd_keepalive {
  gt_etcd_client *c;
  int64_t id;
  gt_etcd_lease_lost_cb on_lost;
  void *arg;
  atomic_int stop, lost;
  _Atomic int64_t ttl;
  pthread_t thread;
};

static void declare_lost(gt_etcd_keepalive *ka, const char *why) {
  if (atomic_exchange(&ka->lost, 1)) return;
  gt_warn("etcd lease %llx lost: %s", (unsigned long long)ka->id, why);
  if (ka->on_lost) ka->on_lost(ka->arg, ka->id);
}

/* Runs one stream until it ends, the lease is lost or stop is asked.
 * *expires is when the lease runs out unless renewed (gt_now clock). */
static void run_stream(gt_etcd_keepalive *ka, double *expires) {
  et_stream s;
  if (et_stream_open(&s, ka->c, ET_LEASE_KEEPALIVE) != GT_OK) return;
  Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
  req.id = ka->id;
  double next_send = 0;
  while (!atomic_load(&ka->stop) && !atomic_load(&ka->lost)) {
    double now = gt_now();
    if (now >= *expires) {
      declare_lost(ka, "not renewed within its TTL (etcd unreachable)");
      break;
    }
    if (now >= next_send && !s.writing && !s.ended) {
      if (et_stream_write(&s, &req.base) != GT_OK) break;
      int64_t ttl = atomic_load(&ka->ttl);
      double period = ttl > 0 ? (double)ttl / 3.0 : 0.5;
      next_send = now + (period > 0.1 ? period : 0.1);
    }
    double wake = next_send < *expires ? next_send : *expires;
    if (wake > now + 0.1) wake = now + 0.1; /* notice stop promptly */
    ProtobufCMessage *m = NULL;
    et_ev ev = et_stream_poll(&s, wake, &etcdserverpb__lease_keep_alive_response__descriptor, &m);
    if (ev == ET_EV_END) {
      unsigned gen;
      free(et_token(ka->c, &gen));
      if (ka->c->user && et_is_auth_error(s.code, NULL)) et_reauth(ka->c, gen);
      break;
    }
    if (ev != ET_EV_READ || !m) continue;
    Etcdserverpb__LeaseKeepAliveResponse *r = (Etcdserverpb__LeaseKeepAliveResponse *)m;
    int64_t ttl = r->ttl;
    protobuf_c_message_free_unpacked(m, NULL);
    if (ttl <= 0) {
      declare_lost(ka, "etcd says it expired or was revoked");
      break;
    }
    atomic_store(&ka->ttl, ttl);
    *expires = gt_now() + (double)ttl;
  }
  et_stream_close(&s);
}

static void *keepalive_main(void *arg) {
  gt_etcd_keepalive *ka = arg;
  /* The lease lives at least until its TTL measured from now. */
  double expires = gt_now() + (double)atomic_load(&ka->ttl);
  double backoff = 0.05;
  while (!atomic_load(&ka->stop) && !atomic_load(&ka->lost)) {
    double t0 = gt_now();
    run_stream(ka, &expires);
    if (atomic_load(&ka->stop) || atomic_load(&ka->lost)) break;
    /* The stream broke (or never opened): the TTL runs on meanwhile, and
     * the lease is lost the moment it ends, not at the next attempt. */
    if (gt_now() >= expires) {
      declare_lost(ka, "not renewed within its TTL (etcd unreachable)");
      break;
    }
    /* Try the next endpoint after a short pause. */
    int ep = atomic_load(&ka->c->cur);
    atomic_compare_exchange_strong(&ka->c->cur, &ep, (ep + 1) % ka->c->nep);
    if (gt_now() - t0 > 1.0) backoff = 0.05;
    double until = gt_now() + backoff;
    if (until > expires) until = expires;
    while (gt_now() < until && !atomic_load(&ka->stop)) et_sleep(0.01);
    backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
  }
  return NULL;
}

gt_status gt_etcd_keepalive_start(gt_etcd_client *c, int64_t id, gt_etcd_lease_lost_cb on_lost, void *arg,
                                  gt_etcd_keepalive **out) {
  if (!c || !out) return gt_errorf(GT_EINVAL, "etcd keepalive: NULL client or handle");
  *out = NULL;
  int64_t ttl = 0;
  GT_TRY(gt_etcd_lease_ttl(c, id, &ttl, NULL));
  gt_etcd_keepalive *ka = calloc(1, sizeof *ka);
  if (!ka) return gt_errorf(GT_ENOMEM, "out of memory");
  ka->c = c;
  ka->id = id;
  ka->on_lost = on_lost;
  ka->arg = arg;
  atomic_init(&ka->stop, 0);
  atomic_init(&ka->lost, 0);
  atomic_init(&ka->ttl, ttl > 0 ? ttl : 1);
  if (pthread_create(&ka->thread, NULL, keepalive_main, ka) != 0) {
    free(ka);
    return gt_errorf(GT_EIO, "cannot start the etcd keepalive thread");
  }
  *out = ka;
  return GT_OK;
}

int gt_etcd_keepalive_lost(gt_etcd_keepalive *ka) { return ka ? atomic_load(&ka->lost) : 1; }

int64_t gt_etcd_keepalive_ttl(gt_etcd_keepalive *ka) { return ka ? atomic_load(&ka->ttl) : 0; }

void gt_etcd_keepalive_stop(gt_etcd_keepalive *ka) {
  if (!ka) return;
  atomic_store(&ka->stop, 1);
  pthread_join(ka->thread, NULL);
  free(ka);
}
