/* Joining a round: register under the current generation, close the round
 * when enough nodes are in (one transaction wins), pass the barrier. */
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/rdzv/internal.h"
#include "giant/engine/etcd.h"
#include "resilience/rdzv/rdzv.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Keeps the job lease (which holds the secret) alive from this agent too. */
static gt_status keep_job_lease(gt_rdzv *r, int64_t lease) {
  if (lease == 0) return GT_OK;
  if (r->job_ka && r->job_lease == lease && !gt_etcd_keepalive_lost(r->job_ka)) return GT_OK;
  if (r->job_ka) gt_etcd_keepalive_stop(r->job_ka);
  r->job_ka = NULL;
  r->job_lease = lease;
  return gt_etcd_keepalive_start(r->cli, lease, NULL, NULL, &r->job_ka);
}

/* Makes the job secret when there is none, on a lease of its own: the
 * secret lasts while any agent of the job keeps that lease alive, and goes
 * a TTL after the last one died. */
static gt_status ensure_secret(gt_rdzv *r) {
  char k[256];
  rdzv_key(r, k, sizeof k, "secret");
  gt_etcd_kvs kvs;
  GT_TRY(gt_etcd_get(r->cli, k, NULL, &kvs));
  size_t have = kvs.n;
  gt_etcd_kvs_free(&kvs);
  if (have) return GT_OK;
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    return gt_errorf(GT_EBACKEND, "OpenSSL RAND_bytes failed to make the job secret");
  char hex[65];
  for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  int64_t lease;
  GT_TRY(gt_etcd_lease_grant(r->cli, r->cfg.ttl_s, &lease));
  int created = 0;
  gt_status st = gt_etcd_create(r->cli, k, hex, 64, lease, &created);
  if (st == GT_OK && created) return keep_job_lease(r, lease);
  gt_etcd_lease_revoke(r->cli, lease);
  return st;
}

/* 1 when the closed round's member list names id. */
static int closed_lists(const gt_etcd_kv *closed, const char *id) {
  rdzv_member *m;
  int n, in = 0;
  if (rdzv_parse_members((const char *)closed->value, closed->value_len, &m, &n) != GT_OK) return 0;
  for (int i = 0; i < n; i++) in |= !strcmp(m[i].id, id);
  free(m);
  return in;
}

/* Whether another node the closed round lists is still registered in it
 * (its agent alive): a round to rejoin, rather than one that died with
 * all its agents (a relaunch). */
static int others_alive(const gt_rdzv *r, const gt_etcd_kv *closed, const gt_etcd_kvs *nodes, const char *prefix) {
  rdzv_member *m;
  int n, alive = 0;
  if (rdzv_parse_members((const char *)closed->value, closed->value_len, &m, &n) != GT_OK) return 0;
  for (int i = 0; i < n; i++) alive |= strcmp(m[i].id, r->cfg.node_id) && rdzv_kvs_has(nodes, prefix, m[i].id);
  free(m);
  return alive;
}

/* Publishes the members (registered nodes, sorted, at most MAX) of round
 * s->gen, if the round is still current and open. */
static gt_status close_round(gt_rdzv *r, const rdzv_snap *s) {
  const gt_etcd_kvs *nodes = rdzv_snap_nodes(s);
  char prefix[256];
  rdzv_key(r, prefix, sizeof prefix, "gen%ld/nodes/", s->gen);
  size_t pl = strlen(prefix);
  char **ids = calloc(nodes->n ? nodes->n : 1, sizeof *ids);
  if (!ids) return gt_errorf(GT_ENOMEM, "out of memory");
  size_t n = 0;
  for (size_t i = 0; i < nodes->n; i++)
    if (strlen(nodes->kvs[i].key) > pl && gt_rdzv_valid_id(nodes->kvs[i].key + pl)) ids[n++] = nodes->kvs[i].key + pl;
  qsort(ids, n, sizeof *ids, cmp_str);
  if (n > (size_t)r->cfg.max_nodes) n = (size_t)r->cfg.max_nodes;
  size_t cap = n * (GT_RDZV_ID_MAX + 16) + 1;
  char *text = malloc(cap);
  if (!text) {
    free(ids);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    const char *id = ids[i];
    int np = 0;
    for (size_t j = 0; j < nodes->n; j++)
      if (strcmp(nodes->kvs[j].key + pl, id) == 0) np = atoi((const char *)nodes->kvs[j].value);
    if (np < 1) np = 1;
    used += (size_t)snprintf(text + used, cap - used, "%s %d\n", id, np);
  }
  free(ids);
  gt_status st = ensure_secret(r);
  if (st == GT_OK) {
    char kc[256], kcl[256];
    rdzv_key(r, kc, sizeof kc, "current");
    rdzv_key(r, kcl, sizeof kcl, "gen%ld/closed", s->gen);
    gt_etcd_cmp cmps[2] = {
        {.key = kc,
         .target = GT_ETCD_CMP_VALUE,
         .op = GT_ETCD_EQUAL,
         .value = s->current,
         .value_len = strlen(s->current)},
        {.key = kcl, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL, .number = 0},
    };
    /* The previous generation's keys (its workers' store, its members) go
     * with the round that replaces it: every member of this round stopped
     * its workers before registering. */
    char kold[256];
    rdzv_key(r, kold, sizeof kold, "gen%ld/", s->gen - 1);
    gt_etcd_op ops[2] = {
        {.type = GT_ETCD_OP_PUT, .key = kcl, .value = text, .value_len = used},
        {.type = GT_ETCD_OP_DEL, .key = kold, .prefix = 1},
    };
    st = gt_etcd_txn(r->cli, cmps, 2, ops, s->gen > 0 ? 2 : 1, NULL, 0, NULL);
  }
  free(text);
  return st;
}

/* Registers this node for round gen. *busy is set when another lease holds
 * the node id: an agent with the same --node-id, or this node's previous
 * agent whose lease has not lapsed yet. */
static gt_status register_node(gt_rdzv *r, long gen, int *busy) {
  char k[256], v[16];
  rdzv_key(r, k, sizeof k, "gen%ld/nodes/%s", gen, r->cfg.node_id);
  snprintf(v, sizeof v, "%d", r->cfg.nproc);
  gt_etcd_cmp cmp = {.key = k, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL, .number = 0};
  gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = k, .value = v, .value_len = strlen(v), .lease = r->lease};
  gt_etcd_op get = {.type = GT_ETCD_OP_GET, .key = k};
  gt_etcd_txn_result res;
  GT_TRY(gt_etcd_txn(r->cli, &cmp, 1, &put, 1, &get, 1, &res));
  *busy = 0;
  if (!res.succeeded && res.n == 1 && res.results[0].n == 1) {
    if (res.results[0].kvs[0].lease != r->lease) *busy = 1;
  }
  gt_etcd_txn_result_free(&res);
  return GT_OK;
}

static gt_status fill_round(gt_rdzv *r, const rdzv_snap *s, gt_rdzv_round *out) {
  memset(out, 0, sizeof *out);
  out->generation = s->gen;
  out->restarts = s->restarts;
  out->nnodes = r->nmembers;
  out->nproc = r->cfg.nproc;
  out->node_rank = -1;
  for (int i = 0; i < r->nmembers; i++) {
    if (strcmp(r->members[i].id, r->cfg.node_id) == 0) {
      out->node_rank = i;
      out->rank_base = out->world_size;
    }
    out->world_size += r->members[i].nproc;
  }
  snprintf(out->store_prefix, sizeof out->store_prefix, "%sgen%ld/store/", r->root, s->gen);
  char k[256];
  rdzv_key(r, k, sizeof k, "secret");
  gt_etcd_kvs kvs;
  gt_status st = gt_etcd_get(r->cli, k, NULL, &kvs);
  if (st != GT_OK) return gt_error_context(st, "reading the job secret");
  size_t len = kvs.n ? kvs.kvs[0].value_len : 0;
  if (len < 16 || len >= sizeof out->secret) {
    gt_etcd_kvs_free(&kvs);
    return gt_errorf(GT_EFORMAT, "the job secret in etcd has %zu bytes; expected 16..%zu", len, sizeof out->secret - 1);
  }
  memcpy(out->secret, kvs.kvs[0].value, len);
  out->secret[len] = 0;
  int64_t lease = kvs.kvs[0].lease;
  gt_etcd_kvs_free(&kvs);
  return keep_job_lease(r, lease);
}

typedef enum { STEP_WAIT, STEP_AGAIN, STEP_JOINED, STEP_REJOINED, STEP_ENDED } step;

/* cfg.reshape: this node is a member of the running round s->gen, which
 * went on without it. It registers again and takes its ranks out of the
 * newest membership epoch (at once, should the others not have seen it
 * go yet; a no-op when they did); its workers then ask to join. While
 * another lease still holds its node key (the previous agent's, not yet
 * lapsed), it waits. */
static gt_status rejoin_step(gt_rdzv *r, const rdzv_snap *s, double *busy_since, step *out) {
  *out = STEP_WAIT;
  if (rdzv_snap_finished(s)->n > 0) return GT_OK; /* the round is ending: nothing to join */
  int busy = 0;
  GT_TRY(register_node(r, s->gen, &busy));
  if (busy) {
    if (*busy_since == 0) *busy_since = rdzv_now();
    return GT_OK;
  }
  const gt_etcd_kv *closed = &rdzv_snap_closed(s)->kvs[0];
  free(r->members);
  r->members = NULL;
  GT_TRY(rdzv_parse_members((const char *)closed->value, closed->value_len, &r->members, &r->nmembers));
  int base = 0, nproc = 0;
  for (int i = 0; i < r->nmembers; i++) {
    if (!strcmp(r->members[i].id, r->cfg.node_id)) {
      nproc = r->members[i].nproc;
      break;
    }
    base += r->members[i].nproc;
  }
  r->gen = s->gen; /* the round whose membership changes */
  GT_TRY(gt_rdzv_members_lost(r, base, nproc));
  gt_info("rendezvous: node %s rejoins the running gen%ld: its ranks %d..%d ask to join", r->cfg.node_id, s->gen, base,
          base + nproc - 1);
  *out = STEP_REJOINED;
  return GT_OK;
}

/* One pass of the barrier of round s->gen, which lists this node. */
static gt_status barrier_step(gt_rdzv *r, const rdzv_snap *s, double started, step *out) {
  char np[256], bp[256];
  rdzv_key(r, np, sizeof np, "gen%ld/nodes/", s->gen);
  rdzv_key(r, bp, sizeof bp, "gen%ld/barrier/", s->gen);
  int all = 1;
  for (int i = 0; i < r->nmembers; i++) {
    const char *id = r->members[i].id;
    if (!rdzv_kvs_has(rdzv_snap_nodes(s), np, id)) {
      char why[300];
      snprintf(why, sizeof why, "node %s left during the rendezvous of gen%ld", id, s->gen);
      GT_TRY(rdzv_advance(r, s, 0, why));
      *out = STEP_AGAIN;
      return GT_OK;
    }
    if (!rdzv_kvs_has(rdzv_snap_barrier(s), bp, id)) all = 0;
  }
  if (all) {
    *out = STEP_JOINED;
    return GT_OK;
  }
  /* A member that registered but never reaches the barrier (stopped, not
   * dead) would hold everyone: give it two lease periods. */
  if (rdzv_now() - started > 2.0 * r->cfg.ttl_s + 5) {
    char why[300];
    snprintf(why, sizeof why, "a member of gen%ld did not reach the barrier in time", s->gen);
    GT_TRY(rdzv_advance(r, s, 0, why));
    *out = STEP_AGAIN;
    return GT_OK;
  }
  *out = STEP_WAIT;
  return GT_OK;
}

gt_status gt_rdzv_join(gt_rdzv *r, gt_rdzv_round *round, gt_rdzv_event *ev) {
  *ev = GT_RDZV_RUNNING;
  memset(round, 0, sizeof *round);
  double deadline = rdzv_now() + r->cfg.join_timeout_ms / 1000.0;
  long gen = r->gen >= 0 ? r->gen : 0;
  long registered = -1, barrier_put = -1, rejoined = -1;
  double min_seen = 0, barrier_started = 0, busy_since = 0;
  char nodes_prefix[256];
  free(r->members);
  r->members = NULL;
  r->nmembers = 0;
  r->gen = -1;
  char etcd_error[400] = "";
  for (;;) {
    if (rdzv_cancelled(r)) return gt_errorf(GT_ECANCELED, "rendezvous cancelled");
    if (rdzv_now() > deadline) {
      if (etcd_error[0])
        return gt_errorf(GT_ETIMEDOUT, "rendezvous of job %s did not complete in %d s; etcd failed: %s", r->cfg.job_id,
                         r->cfg.join_timeout_ms / 1000, etcd_error);
      return gt_errorf(GT_ETIMEDOUT,
                       "rendezvous of job %s did not complete in %d s (need %d node(s)): start the other agents, or "
                       "raise --rdzv-timeout",
                       r->cfg.job_id, r->cfg.join_timeout_ms / 1000, r->cfg.min_nodes);
    }
    rdzv_snap s;
    gt_status st = rdzv_ensure_lease(r);
    if (st == GT_OK) st = rdzv_snap_read(r, gen, &s);
    if (st != GT_OK) {
      /* etcd may be failing over or restarting: retry until the deadline. */
      if (st != GT_ECONN && st != GT_ETIMEDOUT) return st;
      snprintf(etcd_error, sizeof etcd_error, "%s", gt_last_error());
      gt_warn("rendezvous: %s; retrying", etcd_error);
      rdzv_nap_ms(5 * r->cfg.poll_ms);
      continue;
    }
    step next = STEP_WAIT;
    if (s.done) {
      r->ended = 1;
      snprintf(r->reason, sizeof r->reason, "%s", s.done_val);
      *ev = s.done > 0 ? GT_RDZV_DONE : GT_RDZV_FAILED;
      next = STEP_ENDED;
    } else if (s.gen != gen) {
      gen = s.gen;
      r->gen = -1;
      min_seen = 0;
      free(r->members);
      r->members = NULL;
      r->nmembers = 0;
      next = STEP_AGAIN;
    } else {
      rdzv_key(r, nodes_prefix, sizeof nodes_prefix, "gen%ld/nodes/", gen);
      const gt_etcd_kvs *closed = rdzv_snap_closed(&s);
      if (rejoined == gen) {
        next = STEP_REJOINED; /* done; only the round's details are left to read */
      } else if (registered != gen && closed->n > 0 && closed_lists(&closed->kvs[0], r->cfg.node_id) &&
                 r->cfg.reshape && others_alive(r, &closed->kvs[0], rdzv_snap_nodes(&s), nodes_prefix)) {
        /* A member of the running round that it went on without: it
         * rejoins that round rather than start a new one. */
        st = rejoin_step(r, &s, &busy_since, &next);
        if (st == GT_OK && next == STEP_WAIT && busy_since > 0 && rdzv_now() - busy_since > r->cfg.ttl_s + 2.0)
          st = gt_errorf(GT_EEXIST,
                         "node id '%s' is held by another agent of job %s: give every agent its own "
                         "--node-id",
                         r->cfg.node_id, r->cfg.job_id);
        if (st == GT_OK && next == STEP_REJOINED) rejoined = registered = gen;
      } else if (registered != gen && closed->n > 0 && closed_lists(&closed->kvs[0], r->cfg.node_id)) {
        /* A round that lists this node, which this agent never joined: it
         * was this node's previous agent's, which died (a relaunch). Its
         * workers and their store died with it, so the job starts a new
         * generation rather than rejoin a dead one. Not a failure. */
        char why[300];
        snprintf(why, sizeof why, "node %s was started again; gen%ld belonged to its previous agent", r->cfg.node_id,
                 gen);
        gt_info("rendezvous: %s", why);
        st = rdzv_advance(r, &s, 0, why);
        next = STEP_AGAIN;
      } else if (registered != gen || !rdzv_kvs_has(rdzv_snap_nodes(&s), nodes_prefix, r->cfg.node_id)) {
        int busy = 0;
        st = register_node(r, gen, &busy);
        if (st == GT_OK && busy) {
          if (busy_since == 0) busy_since = rdzv_now();
          if (rdzv_now() - busy_since > r->cfg.ttl_s + 2.0)
            st = gt_errorf(GT_EEXIST,
                           "node id '%s' is held by another agent of job %s: give every agent its own --node-id",
                           r->cfg.node_id, r->cfg.job_id);
          next = STEP_WAIT;
        } else {
          busy_since = 0;
          registered = gen;
          next = STEP_AGAIN;
        }
      } else if (closed->n > 0) {
        if (!r->members) {
          st = rdzv_parse_members((const char *)closed->kvs[0].value, closed->kvs[0].value_len, &r->members,
                                  &r->nmembers);
          barrier_started = rdzv_now();
        }
        int in = 0;
        for (int i = 0; st == GT_OK && i < r->nmembers; i++) in |= !strcmp(r->members[i].id, r->cfg.node_id);
        if (st == GT_OK && in) {
          if (barrier_put != gen) {
            char k[256];
            rdzv_key(r, k, sizeof k, "gen%ld/barrier/%s", gen, r->cfg.node_id);
            st = gt_etcd_put(r->cli, k, "1", 1, r->lease, NULL, NULL);
            barrier_put = gen;
            next = STEP_AGAIN;
          } else {
            st = barrier_step(r, &s, barrier_started, &next);
          }
        }
        /* Not a member: the round closed before this node came; it waits
         * for the next generation, polling less often meanwhile. */
        if (st == GT_OK && !in) rdzv_nap_ms(4 * r->cfg.poll_ms);
      } else {
        int count = (int)rdzv_snap_nodes(&s)->n;
        if (count >= r->cfg.min_nodes) {
          if (min_seen == 0) min_seen = rdzv_now();
          if (count >= r->cfg.max_nodes || (rdzv_now() - min_seen) * 1000 >= r->cfg.settle_ms) {
            st = close_round(r, &s);
            next = STEP_AGAIN;
          }
        } else {
          min_seen = 0;
        }
      }
    }
    if (st == GT_OK && (next == STEP_JOINED || next == STEP_REJOINED)) {
      st = fill_round(r, &s, round);
      round->rejoin = next == STEP_REJOINED;
      if (st == GT_OK) {
        r->gen = s.gen;
        r->restarts = s.restarts;
      }
    }
    rdzv_snap_free(&s);
    if (st == GT_ECONN || st == GT_ETIMEDOUT) {
      snprintf(etcd_error, sizeof etcd_error, "%s", gt_last_error());
      gt_warn("rendezvous: %s; retrying", etcd_error);
      rdzv_nap_ms(5 * r->cfg.poll_ms);
      continue;
    }
    GT_TRY(st);
    etcd_error[0] = 0;
    if (next == STEP_JOINED || next == STEP_REJOINED || next == STEP_ENDED) return GT_OK;
    if (next == STEP_WAIT) rdzv_nap_ms(r->cfg.poll_ms);
  }
}
