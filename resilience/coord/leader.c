/* Leader election on etcd (see giant/engine/coord.h).
 *
 * One thread per campaigner does everything that talks to etcd: it holds a
 * lease (granting a new one when the old is lost), tries to create the
 * leader key on it, and otherwise waits for the key to go, on a watch, to
 * try again. Creating the key is a transaction that succeeds only when the
 * key is absent, so at most one campaigner holds it; the key lives on its
 * holder's lease, so it outlives its holder by at most a TTL.
 *
 * Leading is a promise that ends when the lease might have: a leader whose
 * keepalive has not been renewed for a TTL stops calling itself leader at
 * once (the keepalive's loss callback), before etcd can have given the key
 * to anyone else.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/engine/coord.h"
#include "giant/log.h"
#include "resilience/rdzv/rdzv.h"
#include "giant/engine/etcd.h"

struct gt_leader {
  gt_etcd_client *cli;
  char key[GT_RDZV_ID_MAX + 32]; /* /giant/<job>/leader */
  char node[GT_RDZV_ID_MAX + 1];
  int ttl_s;
  int64_t lease;
  gt_etcd_keepalive *ka;
  atomic_bool lost; /* the lease's keepalive gave up */
  atomic_bool leading;
  _Atomic int64_t term; /* the create revision of the key this node holds */
  atomic_bool stop;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t changed; /* leading became true, or the thread ended */
};

static void on_lease_lost(void *arg, int64_t id) {
  gt_leader *l = arg;
  (void)id;
  /* First stop leading, then let the campaign thread take a new lease. */
  atomic_store(&l->leading, false);
  atomic_store(&l->lost, true);
}

static gt_status new_lease(gt_leader *l) {
  if (l->ka) gt_etcd_keepalive_stop(l->ka);
  l->ka = NULL;
  /* Lost until a new one is granted: a failed grant (etcd without a
   * quorum) is tried again, never a campaign on the old lease. */
  GT_TRY(gt_etcd_lease_grant(l->cli, l->ttl_s, &l->lease));
  atomic_store(&l->lost, false);
  return gt_etcd_keepalive_start(l->cli, l->lease, on_lease_lost, l, &l->ka);
}

static void set_leading(gt_leader *l, bool on) {
  pthread_mutex_lock(&l->mu);
  atomic_store(&l->leading, on);
  pthread_cond_broadcast(&l->changed);
  pthread_mutex_unlock(&l->mu);
}

/* One try at the key, then a read of who holds it: this node leads when
 * the key is on its lease (holding it already, after a reconnect, counts),
 * and its term is the key's create revision. */
static gt_status campaign(gt_leader *l) {
  int created = 0;
  GT_TRY(gt_etcd_create(l->cli, l->key, l->node, strlen(l->node), l->lease, &created));
  gt_etcd_kvs r;
  GT_TRY(gt_etcd_get(l->cli, l->key, NULL, &r));
  bool mine = r.n == 1 && r.kvs[0].lease == l->lease;
  if (mine) atomic_store(&l->term, r.kvs[0].create_revision);
  gt_etcd_kvs_free(&r);
  if (mine && !atomic_load(&l->leading) && !atomic_load(&l->lost)) {
    gt_info("%s leads %s (term %lld)", l->node, l->key, (long long)atomic_load(&l->term));
    set_leading(l, true);
  }
  return GT_OK;
}

static void *campaign_thread(void *arg) {
  gt_leader *l = arg;
  gt_etcd_watch *w = NULL;
  double backoff = 0.1;
  bool need = true; /* a try at the key is due: at the start, on a new lease, when it was deleted */
  while (!atomic_load(&l->stop)) {
    gt_status s = GT_OK;
    if (atomic_load(&l->lost)) {
      if (atomic_load(&l->leading)) set_leading(l, false);
      s = new_lease(l);
      need = true;
    }
    /* Watch first, then try: a delete between the two is not missed. */
    if (s == GT_OK && !w) {
      s = gt_etcd_watch_start(l->cli, l->key, NULL, NULL, NULL, &w);
      need = true;
    }
    if (s == GT_OK && need) {
      s = campaign(l);
      need = s != GT_OK;
    }
    if (s == GT_OK) {
      /* A bounded wait, so that stop and a lost lease are seen promptly. */
      gt_etcd_event ev;
      gt_status ws = gt_etcd_watch_next(w, &ev, 200);
      if (ws == GT_OK) {
        if (ev.type == GT_ETCD_EVENT_DELETE) need = true;
        if (ev.type == GT_ETCD_EVENT_COMPACTED || ev.type == GT_ETCD_EVENT_ERROR) {
          gt_etcd_watch_cancel(w); /* the watch ended: start another */
          w = NULL;
        }
        gt_etcd_event_free(&ev);
      } else if (ws != GT_ETIMEDOUT) {
        s = ws;
      }
    }
    if (s != GT_OK && !atomic_load(&l->stop)) {
      gt_warn("leader campaign of %s: %s; trying again in %.1f s", l->node, gt_last_error(), backoff);
      if (w) gt_etcd_watch_cancel(w);
      w = NULL;
      for (double t0 = gt_now(); gt_now() - t0 < backoff && !atomic_load(&l->stop);)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000L}, NULL);
      backoff = backoff * 2 < 2 ? backoff * 2 : 2;
    } else {
      backoff = 0.1;
    }
  }
  if (w) gt_etcd_watch_cancel(w);
  set_leading(l, false);
  return NULL;
}

gt_status gt_leader_open(const gt_leader_config *cfg, gt_leader **out) {
  *out = NULL;
  if (!cfg || !cfg->job_id || !gt_rdzv_valid_id(cfg->job_id))
    return gt_errorf(GT_EINVAL, "leader: job id '%s' is not a valid id ([A-Za-z0-9._-], at most %d characters)",
                     cfg && cfg->job_id ? cfg->job_id : "", GT_RDZV_ID_MAX);
  if (!cfg->node_id || !gt_rdzv_valid_id(cfg->node_id))
    return gt_errorf(GT_EINVAL, "leader: node id '%s' is not a valid id", cfg->node_id ? cfg->node_id : "");
  if (cfg->ttl_s < 0 || cfg->ttl_s > 3600)
    return gt_errorf(GT_EINVAL, "leader: ttl %d s is outside 0..3600 (0 means 10)", cfg->ttl_s);
  gt_leader *l = calloc(1, sizeof *l);
  if (!l) return gt_errorf(GT_ENOMEM, "out of memory");
  snprintf(l->key, sizeof l->key, "/giant/%s/leader", cfg->job_id);
  snprintf(l->node, sizeof l->node, "%s", cfg->node_id);
  l->ttl_s = cfg->ttl_s ? cfg->ttl_s : 10;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->changed, NULL);
  gt_status s = gt_etcd_connect(&cfg->etcd, &l->cli);
  if (s == GT_OK) s = new_lease(l);
  if (s == GT_OK && pthread_create(&l->thread, NULL, campaign_thread, l) != 0)
    s = gt_errorf(GT_EIO, "leader: cannot start the campaign thread");
  if (s != GT_OK) {
    if (l->ka) gt_etcd_keepalive_stop(l->ka);
    gt_etcd_close(l->cli);
    pthread_cond_destroy(&l->changed);
    pthread_mutex_destroy(&l->mu);
    free(l);
    return gt_error_context(s, "leader election for job %s", cfg->job_id);
  }
  *out = l;
  return GT_OK;
}

bool gt_leader_is_leader(gt_leader *l) { return atomic_load(&l->leading) && !atomic_load(&l->lost); }

int64_t gt_leader_term(gt_leader *l) { return gt_leader_is_leader(l) ? atomic_load(&l->term) : 0; }

gt_status gt_leader_wait(gt_leader *l, int timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&l->mu);
  int rc = 0;
  while (!gt_leader_is_leader(l) && rc == 0) rc = pthread_cond_timedwait(&l->changed, &l->mu, &until);
  bool leading = gt_leader_is_leader(l);
  pthread_mutex_unlock(&l->mu);
  return leading ? GT_OK
                 : gt_errorf(GT_ETIMEDOUT, "%s did not become leader of %s within %d ms", l->node, l->key, timeout_ms);
}

gt_status gt_leader_current(gt_leader *l, char *node, size_t node_len, int64_t *term) {
  gt_etcd_kvs r;
  GT_TRY(gt_etcd_get(l->cli, l->key, NULL, &r));
  if (node && node_len) snprintf(node, node_len, "%s", r.n ? (const char *)r.kvs[0].value : "");
  if (term) *term = r.n ? r.kvs[0].create_revision : 0;
  gt_etcd_kvs_free(&r);
  return GT_OK;
}

void gt_leader_close(gt_leader *l) {
  if (!l) return;
  atomic_store(&l->stop, true);
  pthread_join(l->thread, NULL);
  if (l->ka) gt_etcd_keepalive_stop(l->ka);
  /* Resign at once: revoking the lease deletes the key, and the others'
   * watches see it now rather than a TTL from now. */
  if (gt_etcd_lease_revoke(l->cli, l->lease) != GT_OK)
    gt_warn("leader %s: could not revoke its lease (%s); the key goes when it expires", l->node, gt_last_error());
  gt_etcd_close(l->cli);
  pthread_cond_destroy(&l->changed);
  pthread_mutex_destroy(&l->mu);
  free(l);
}
