/* The rendezvous handle: config checks, the etcd client and this node's
 * lease, consistent reads of a generation, and moving the job on. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "resilience/rdzv/internal.h"
#include "giant/log.h"
#include "resilience/members/members.h"
#include "giant/engine/etcd.h"
#include "giant/engine/store.h"
#include "resilience/rdzv/rdzv.h"

double rdzv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void rdzv_nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

int rdzv_cancelled(const gt_rdzv *r) { return r->cfg.cancel && *r->cfg.cancel; }

int gt_rdzv_valid_id(const char *s) {
  if (!s || !*s || strlen(s) > GT_RDZV_ID_MAX) return 0;
  for (const char *p = s; *p; p++) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return 0;
  }
  return 1;
}

void rdzv_key(const gt_rdzv *r, char *buf, size_t n, const char *fmt, ...) {
  size_t k = (size_t)snprintf(buf, n, "%s", r->root);
  if (k >= n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + k, n - k, fmt, ap);
  va_end(ap);
}

static char *dup_or_null(const char *s, int *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = 1;
  return d;
}

static void free_handle(gt_rdzv *r) {
  if (!r) return;
  free(r->endpoints);
  free(r->cacert);
  free(r->cert);
  free(r->key);
  free(r->job);
  free(r->node);
  if (r->password) memset(r->password, 0, strlen(r->password));
  free(r->user);
  free(r->password);
  free(r->members);
  free(r);
}

static gt_status check_config(const gt_rdzv_config *c) {
  if (!c->endpoints || !*c->endpoints)
    return gt_errorf(GT_EINVAL, "no etcd endpoint: give --rdzv-endpoint HOST:PORT (or --standalone)");
  if (!gt_rdzv_valid_id(c->job_id))
    return gt_errorf(GT_EINVAL, "bad job id '%s': use 1 to %d of [A-Za-z0-9._-]", c->job_id ? c->job_id : "(none)",
                     GT_RDZV_ID_MAX);
  if (!gt_rdzv_valid_id(c->node_id))
    return gt_errorf(GT_EINVAL, "bad node id '%s': use 1 to %d of [A-Za-z0-9._-]", c->node_id ? c->node_id : "(none)",
                     GT_RDZV_ID_MAX);
  if (c->min_nodes < 1 || c->max_nodes < c->min_nodes || c->max_nodes > GT_RDZV_MAX_NODES)
    return gt_errorf(GT_EINVAL, "bad node counts MIN=%d MAX=%d: need 1 <= MIN <= MAX <= %d", c->min_nodes, c->max_nodes,
                     GT_RDZV_MAX_NODES);
  if (c->nproc < 1 || c->nproc > 4096) return gt_errorf(GT_EINVAL, "bad workers per node %d: need 1..4096", c->nproc);
  if (c->max_restarts < 0) return gt_errorf(GT_EINVAL, "max restarts must be >= 0, got %d", c->max_restarts);
  if (c->restart_window_s < 0)
    return gt_errorf(GT_EINVAL, "restart window must be >= 0 seconds, got %d", c->restart_window_s);
  if (c->ttl_s < 0 || c->ttl_s > 3600) return gt_errorf(GT_EINVAL, "lease TTL %d s out of 1..3600", c->ttl_s);
  if ((c->cert == NULL) != (c->key == NULL))
    return gt_errorf(GT_EINVAL, "TLS: give both a client certificate and its key, or neither");
  return GT_OK;
}

static gt_status grant(gt_rdzv *r) {
  gt_status st = gt_etcd_lease_grant(r->cli, r->cfg.ttl_s, &r->lease);
  if (st != GT_OK)
    return gt_error_context(st, "cannot reach etcd at %s (check --rdzv-endpoint and the TLS files)", r->cfg.endpoints);
  st = gt_etcd_keepalive_start(r->cli, r->lease, NULL, NULL, &r->ka);
  if (st != GT_OK) {
    gt_etcd_lease_revoke(r->cli, r->lease);
    r->lease = 0;
    return gt_error_context(st, "keeping the lease of node %s alive", r->cfg.node_id);
  }
  return GT_OK;
}

gt_status rdzv_ensure_lease(gt_rdzv *r) {
  if (r->ka && !gt_etcd_keepalive_lost(r->ka)) return GT_OK;
  if (r->ka) gt_etcd_keepalive_stop(r->ka);
  r->ka = NULL;
  r->lease = 0;
  return grant(r);
}

gt_status gt_rdzv_open(const gt_rdzv_config *cfg, gt_rdzv **out) {
  *out = NULL;
  if (!cfg) return gt_errorf(GT_EINVAL, "gt_rdzv_open: NULL config");
  GT_TRY(check_config(cfg));
  gt_rdzv *r = calloc(1, sizeof *r);
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory");
  int oom = 0;
  r->cfg = *cfg;
  r->cfg.endpoints = r->endpoints = dup_or_null(cfg->endpoints, &oom);
  r->cfg.cacert = r->cacert = dup_or_null(cfg->cacert, &oom);
  r->cfg.cert = r->cert = dup_or_null(cfg->cert, &oom);
  r->cfg.key = r->key = dup_or_null(cfg->key, &oom);
  r->cfg.job_id = r->job = dup_or_null(cfg->job_id, &oom);
  r->cfg.node_id = r->node = dup_or_null(cfg->node_id, &oom);
  r->cfg.user = r->user = dup_or_null(cfg->user, &oom);
  r->cfg.password = r->password = dup_or_null(cfg->password, &oom);
  if (oom) {
    free_handle(r);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (r->cfg.ttl_s == 0) r->cfg.ttl_s = 10;
  if (r->cfg.settle_ms < 0) r->cfg.settle_ms = 5000;
  if (r->cfg.join_timeout_ms <= 0) r->cfg.join_timeout_ms = 600000;
  if (r->cfg.call_timeout_ms <= 0) r->cfg.call_timeout_ms = 5000;
  if (r->cfg.poll_ms <= 0) r->cfg.poll_ms = 100;
  snprintf(r->root, sizeof r->root, "/giant/%s/", r->job);
  r->gen = -1;
  gt_etcd_config ec = {.endpoints = r->endpoints,
                       .cacert = r->cacert,
                       .cert = r->cert,
                       .key = r->key,
                       .user = r->user,
                       .password = r->password,
                       .timeout_ms = r->cfg.call_timeout_ms};
  gt_status st = gt_etcd_connect(&ec, &r->cli);
  if (st != GT_OK) {
    free_handle(r);
    return gt_error_context(st, "connecting to etcd at %s", cfg->endpoints);
  }
  st = grant(r);
  if (st != GT_OK) {
    gt_etcd_close(r->cli);
    free_handle(r);
    return st;
  }
  *out = r;
  return GT_OK;
}

void gt_rdzv_close(gt_rdzv *r) {
  if (!r) return;
  if (r->watch) gt_etcd_watch_cancel(r->watch);
  gt_etcd_set_timeout(r->cli, 2000);
  if (r->ended) {
    /* The job is over: only its `done` record stays. */
    rdzv_purge(r);
  } else if (r->gen >= 0) {
    /* This member leaves, so its generation is over: its store goes now
     * rather than at the next round (which a stopped job may never have). */
    char k[256];
    rdzv_key(r, k, sizeof k, "gen%ld/", r->gen);
    gt_etcd_del(r->cli, k, 1, NULL);
  }
  /* The job lease is not revoked: other agents may still run the job. */
  if (r->job_ka) gt_etcd_keepalive_stop(r->job_ka);
  if (r->ka) gt_etcd_keepalive_stop(r->ka);
  /* Revoking deletes this node's keys now instead of after the TTL. */
  if (r->lease) gt_etcd_lease_revoke(r->cli, r->lease);
  gt_etcd_close(r->cli);
  free_handle(r);
}

const char *gt_rdzv_reason(const gt_rdzv *r) { return r ? r->reason : ""; }

/* ---- reads ---------------------------------------------------------------- */

static gt_status parse_current(const char *v, size_t len, long *gen, int *restarts) {
  char buf[64];
  if (len >= sizeof buf)
    return gt_errorf(GT_EFORMAT, "etcd key 'current' holds %zu bytes, expected '<gen> <restarts>'", len);
  memcpy(buf, v, len);
  buf[len] = 0;
  char *end;
  errno = 0;
  long g = strtol(buf, &end, 10);
  if (errno || end == buf || *end != ' ' || g < 0) goto bad;
  char *e2;
  long rs = strtol(end + 1, &e2, 10);
  if (errno || e2 == end + 1 || *e2 || rs < 0 || rs > 1000000) goto bad;
  *gen = g;
  *restarts = (int)rs;
  return GT_OK;
bad:
  return gt_errorf(
      GT_EFORMAT,
      "etcd key 'current' holds '%s', expected '<gen> <restarts>': another program wrote under this job id?", buf);
}

gt_status rdzv_snap_read(gt_rdzv *r, long gen, rdzv_snap *s) {
  memset(s, 0, sizeof *s);
  char kc[256], kd[256], kcl[256], kn[256], kb[256], kf[256], kw[256];
  rdzv_key(r, kc, sizeof kc, "current");
  rdzv_key(r, kd, sizeof kd, "done");
  rdzv_key(r, kcl, sizeof kcl, "gen%ld/closed", gen);
  rdzv_key(r, kn, sizeof kn, "gen%ld/nodes/", gen);
  rdzv_key(r, kb, sizeof kb, "gen%ld/barrier/", gen);
  rdzv_key(r, kf, sizeof kf, "gen%ld/finished/", gen);
  rdzv_key(r, kw, sizeof kw, "failures");
  gt_etcd_op ops[7] = {
      {.type = GT_ETCD_OP_GET, .key = kc},
      {.type = GT_ETCD_OP_GET, .key = kd},
      {.type = GT_ETCD_OP_GET, .key = kcl},
      {.type = GT_ETCD_OP_GET, .key = kn, .prefix = 1},
      {.type = GT_ETCD_OP_GET, .key = kb, .prefix = 1},
      {.type = GT_ETCD_OP_GET, .key = kf, .prefix = 1},
      {.type = GT_ETCD_OP_GET, .key = kw},
  };
  for (;;) {
    GT_TRY(gt_etcd_txn(r->cli, NULL, 0, ops, 7, NULL, 0, &s->res));
    if (s->res.n != 7) {
      rdzv_snap_free(s);
      return gt_errorf(GT_EFORMAT, "etcd answered %zu results to 7 reads", s->res.n);
    }
    /* An ended job keeps only `done`: it is not started again. */
    if (s->res.results[0].n > 0 || s->res.results[1].n > 0) break;
    /* A new job: generation 0, no restarts yet. */
    gt_etcd_txn_result_free(&s->res);
    int created;
    GT_TRY(gt_etcd_create(r->cli, kc, "0 0", 3, 0, &created));
  }
  if (s->res.results[1].n > 0) {
    const gt_etcd_kv *d = &s->res.results[1].kvs[0];
    snprintf(s->done_val, sizeof s->done_val, "%.*s", (int)d->value_len, (const char *)d->value);
    s->done = strncmp(s->done_val, "ok", 2) == 0 ? 1 : -1;
  }
  /* etcd's values end with a NUL one byte past their length. */
  s->failures = s->res.results[6].n > 0 ? (const char *)s->res.results[6].kvs[0].value : "";
  if (s->res.results[0].n == 0) {
    s->gen = -1; /* ended, and its keys purged */
    return GT_OK;
  }
  const gt_etcd_kv *cur = &s->res.results[0].kvs[0];
  gt_status st = parse_current((const char *)cur->value, cur->value_len, &s->gen, &s->restarts);
  if (st != GT_OK) {
    rdzv_snap_free(s);
    return st;
  }
  snprintf(s->current, sizeof s->current, "%.*s", (int)cur->value_len, (const char *)cur->value);
  return GT_OK;
}

void rdzv_snap_free(rdzv_snap *s) { gt_etcd_txn_result_free(&s->res); }
const gt_etcd_kvs *rdzv_snap_closed(const rdzv_snap *s) { return &s->res.results[2]; }
const gt_etcd_kvs *rdzv_snap_nodes(const rdzv_snap *s) { return &s->res.results[3]; }
const gt_etcd_kvs *rdzv_snap_barrier(const rdzv_snap *s) { return &s->res.results[4]; }
const gt_etcd_kvs *rdzv_snap_finished(const rdzv_snap *s) { return &s->res.results[5]; }

int rdzv_kvs_has(const gt_etcd_kvs *kvs, const char *prefix, const char *id) {
  size_t pl = strlen(prefix);
  for (size_t i = 0; i < kvs->n; i++)
    if (strncmp(kvs->kvs[i].key, prefix, pl) == 0 && strcmp(kvs->kvs[i].key + pl, id) == 0) return 1;
  return 0;
}

gt_status rdzv_parse_members(const char *text, size_t len, rdzv_member **out, int *n) {
  *out = NULL;
  *n = 0;
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  if (lines < 1 || lines > GT_RDZV_MAX_NODES)
    return gt_errorf(GT_EFORMAT,
                     "a closed round's member list names %d nodes; expected 1..%d (one \"<node> <nproc>\" line each)",
                     lines, GT_RDZV_MAX_NODES);
  rdzv_member *m = calloc((size_t)lines, sizeof *m);
  if (!m) return gt_errorf(GT_ENOMEM, "out of memory");
  size_t pos = 0;
  for (int k = 0; k < lines; k++) {
    const char *line = text + pos;
    const char *nl = memchr(line, '\n', len - pos);
    size_t ll = (size_t)(nl - line);
    char buf[GT_RDZV_ID_MAX + 32];
    if (ll >= sizeof buf) goto bad;
    memcpy(buf, line, ll);
    buf[ll] = 0;
    char *sp = strchr(buf, ' ');
    if (!sp) goto bad;
    *sp = 0;
    char *end;
    long np = strtol(sp + 1, &end, 10);
    if (*end || end == sp + 1 || np < 1 || np > 4096 || !gt_rdzv_valid_id(buf)) goto bad;
    memcpy(m[k].id, buf, strlen(buf) + 1); /* valid ids fit */
    m[k].nproc = (int)np;
    pos += ll + 1;
  }
  *out = m;
  *n = lines;
  return GT_OK;
bad:
  free(m);
  return gt_errorf(GT_EFORMAT, "a closed round's member list is malformed: another program wrote under this job id?");
}

/* ---- moving on ------------------------------------------------------------ */

/* Wall-clock seconds: failure times are compared across nodes. */
static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Counts the failures in list (unix times) within the restart window, plus
 * one now; *out (malloc'ed) gets the ones to keep: the last max_restarts + 1,
 * all a later count can need. Returns -1 when out of memory. */
static int failures_in_window(const gt_rdzv *r, const char *list, char **out) {
  double now = wall_now(), from = now - r->cfg.restart_window_s;
  int k = 1; /* now */
  for (const char *p = list;;) {
    char *end;
    double v = strtod(p, &end);
    if (end == p) break;
    k += v >= from;
    p = end;
  }
  int keep = k < r->cfg.max_restarts + 1 ? k : r->cfg.max_restarts + 1;
  size_t cap = (size_t)keep * 24 + 1, used = 0;
  if (!(*out = malloc(cap))) return -1;
  (*out)[0] = 0;
  int skip = k - keep;
  for (const char *p = list;;) {
    char *end;
    double v = strtod(p, &end);
    if (end == p) break;
    p = end;
    if (v < from || skip-- > 0) continue;
    used += (size_t)snprintf(*out + used, cap - used, "%.3f ", v);
  }
  snprintf(*out + used, cap - used, "%.3f", now);
  return k;
}

gt_status rdzv_advance(gt_rdzv *r, const rdzv_snap *s, int counts, const char *why) {
  char kc[256], kr[256], kw[256], next[64], done[400], *fails = NULL;
  rdzv_key(r, kc, sizeof kc, "current");
  rdzv_key(r, kr, sizeof kr, "gen%ld/reason", s->gen);
  rdzv_key(r, kw, sizeof kw, "failures");
  int restarts = s->restarts + (counts ? 1 : 0);
  /* With a window, only its failures count against --max-restarts. */
  int window = r->cfg.restart_window_s > 0;
  int counted = restarts;
  if (counts && window && (counted = failures_in_window(r, s->failures, &fails)) < 0)
    return gt_errorf(GT_ENOMEM, "out of memory");
  if (counts && counted > r->cfg.max_restarts) {
    free(fails);
    snprintf(done, sizeof done, "failed: %s (%d failure(s)%s, more than --max-restarts %d allows)", why, counted,
             window ? " within --restart-window" : "", r->cfg.max_restarts);
    int ended;
    GT_TRY(rdzv_end_job(r, s, done, &ended));
    if (ended) snprintf(r->reason, sizeof r->reason, "%s", why);
    return GT_OK;
  }
  gt_etcd_cmp cmp = {.key = kc,
                     .target = GT_ETCD_CMP_VALUE,
                     .op = GT_ETCD_EQUAL,
                     .value = s->current,
                     .value_len = strlen(s->current)};
  snprintf(next, sizeof next, "%ld %d", s->gen + 1, restarts);
  gt_etcd_op ops[3] = {
      {.type = GT_ETCD_OP_PUT, .key = kc, .value = next, .value_len = strlen(next)},
      {.type = GT_ETCD_OP_PUT, .key = kr, .value = why, .value_len = strlen(why)},
      {.type = GT_ETCD_OP_PUT, .key = kw, .value = fails, .value_len = fails ? strlen(fails) : 0},
  };
  gt_etcd_txn_result res;
  gt_status st = gt_etcd_txn(r->cli, &cmp, 1, ops, fails ? 3 : 2, NULL, 0, &res);
  free(fails);
  GT_TRY(st);
  if (res.succeeded) snprintf(r->reason, sizeof r->reason, "%s", why);
  gt_etcd_txn_result_free(&res);
  return GT_OK;
}

gt_status rdzv_end_job(gt_rdzv *r, const rdzv_snap *s, const char *done, int *ended) {
  char kc[256], kd[256];
  rdzv_key(r, kc, sizeof kc, "current");
  rdzv_key(r, kd, sizeof kd, "done");
  /* The first end wins; a failure only ends the generation it saw. */
  gt_etcd_cmp cmps[2] = {
      {.key = kd, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL, .number = 0},
      {.key = kc,
       .target = GT_ETCD_CMP_VALUE,
       .op = GT_ETCD_EQUAL,
       .value = s ? s->current : "",
       .value_len = s ? strlen(s->current) : 0},
  };
  gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = kd, .value = done, .value_len = strlen(done)};
  gt_etcd_txn_result res;
  GT_TRY(gt_etcd_txn(r->cli, cmps, s ? 2 : 1, &put, 1, NULL, 0, &res));
  *ended = res.succeeded;
  gt_etcd_txn_result_free(&res);
  if (*ended) r->ended = 1;
  return GT_OK;
}

void rdzv_purge(gt_rdzv *r) {
  gt_etcd_get_opts o = {.prefix = 1, .keys_only = 1};
  gt_etcd_kvs kvs;
  if (gt_etcd_get(r->cli, r->root, &o, &kvs) != GT_OK) return;
  char kd[256], gen[256] = "";
  rdzv_key(r, kd, sizeof kd, "done");
  size_t rl = strlen(r->root);
  for (size_t i = 0; i < kvs.n; i++) {
    const char *k = kvs.kvs[i].key;
    if (strlen(k) <= rl || !strcmp(k, kd)) continue;
    /* Health records and the leader's mitigation outlive the job: what was
     * found slow, and what was done about it, is worth reading after it
     * ended (giant-etcd health JOB). */
    if (!strncmp(k + rl, "health/", 7) || !strncmp(k + rl, "mitigation/", 11)) continue;
    /* So does the job's last progress (giantrun --status shows where it
     * ended); the ranks' records go, one by one. */
    if (!strcmp(k + rl, "progress/job")) continue;
    if (!strncmp(k + rl, "progress/", 9)) {
      gt_etcd_del(r->cli, k, 0, NULL);
      continue;
    }
    if (gen[0] && !strncmp(k, gen, strlen(gen))) continue; /* deleted with its generation */
    const char *slash = strchr(k + rl, '/');
    if (slash && (size_t)(slash - k) + 1 < sizeof gen) {
      snprintf(gen, sizeof gen, "%.*s", (int)(slash - k + 1), k);
      gt_etcd_del(r->cli, gen, 1, NULL);
    } else {
      gt_etcd_del(r->cli, k, 0, NULL);
    }
  }
  gt_etcd_kvs_free(&kvs);
}

gt_status gt_rdzv_member_lost(gt_rdzv *r, int rank) { return gt_rdzv_members_lost(r, rank, 1); }

gt_status gt_rdzv_members_lost(gt_rdzv *r, int first, int count) {
  if (!r->members || r->nmembers == 0) return gt_errorf(GT_ESTATE, "no round is running on this node");
  int world = 0;
  for (int i = 0; i < r->nmembers; i++) world += r->members[i].nproc;
  if (count < 1 || first < 0 || first + count > world || count > GT_MEMBERS_MAX)
    return gt_errorf(GT_EINVAL, "ranks %d..%d are not in gen%ld's %d ranks", first, first + count - 1, r->gen, world);
  char prefix[GT_RDZV_ID_MAX + 64];
  snprintf(prefix, sizeof prefix, "%sgen%ld/store/", r->root, r->gen);
  gt_store *s = NULL;
  GT_TRY(gt_etcd_store_create(r->cli, prefix, &s));
  int *ranks = malloc((size_t)count * sizeof *ranks), epoch = 0;
  gt_status st = ranks ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
  for (int k = 0; ranks && k < count; k++) ranks[k] = first + k;
  /* A request to join that a lost rank made before it was lost is void:
   * taken, it would add a rank that is not there. It goes before the epoch
   * without the rank, after which a worker restarted in its place asks
   * anew (gpt_reshape_join waits for that epoch). */
  for (int k = 0; st == GT_OK && k < count; k++) {
    char key[64];
    snprintf(key, sizeof key, "reshape/join/%d", first + k);
    gt_store_del(s, key);
  }
  if (st == GT_OK) st = gt_members_remove_set(s, world, ranks, count, &epoch);
  free(ranks);
  gt_store_destroy(s);
  if (st == GT_OK)
    gt_info("giantrun: gen%ld membership epoch %d is without ranks %d..%d", r->gen, epoch, first, first + count - 1);
  return st;
}
