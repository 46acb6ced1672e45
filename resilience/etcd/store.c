/* gt_store on etcd: keys under a prefix; get and wait block on a watch
 * started at the revision of the read that found the key absent, so no
 * write between the read and the watch is missed; add is a
 * compare-and-swap loop on a decimal integer. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"
#include "giant/engine/store.h"

typedef struct etcd_store {
  gt_store base;
  gt_etcd_client *c;
  char *prefix;
} etcd_store;

static gt_status full_key(etcd_store *s, const char *key, char **out) {
  if (!key || !*key) return gt_errorf(GT_EINVAL, "store key is empty");
  size_t a = strlen(s->prefix), b = strlen(key);
  *out = malloc(a + b + 1);
  if (!*out) return gt_errorf(GT_ENOMEM, "out of memory");
  memcpy(*out, s->prefix, a);
  memcpy(*out + a, key, b + 1);
  return GT_OK;
}

static gt_status st_set(gt_store *gs, const char *key, const void *val, size_t len) {
  etcd_store *s = gs->impl;
  char *k;
  GT_TRY(full_key(s, key, &k));
  gt_status st = gt_etcd_put(s->c, k, val, len, 0, NULL, NULL);
  free(k);
  return st;
}

/* Waits until k exists; its value goes to val and len when val is given. */
/* The key's value if it is there: *found says. */
static gt_status get_now(etcd_store *s, const char *k, void **val, size_t *len, bool *found) {
  gt_etcd_kvs r;
  GT_TRY(gt_etcd_get(s->c, k, NULL, &r));
  *found = r.n > 0;
  if (*found && val) {
    *val = r.kvs[0].value;
    *len = r.kvs[0].value_len;
    r.kvs[0].value = NULL;
  }
  gt_etcd_kvs_free(&r);
  return GT_OK;
}

static gt_status wait_key(etcd_store *s, const char *k, void **val, size_t *len, double deadline) {
  bool found;
  GT_TRY(get_now(s, k, val, len, &found));
  if (found) return GT_OK;
  /* Watch from now, then look again: a watch from a past revision would
   * be one etcd catches up only in its periodic sync of lagging watchers
   * (every 100 ms) whenever other keys changed in between, as they do
   * while a whole job forms its groups. */
  gt_etcd_watch_opts o = {0};
  gt_etcd_watch *w;
  GT_TRY(gt_etcd_watch_start(s->c, k, &o, NULL, NULL, &w));
  gt_status st = get_now(s, k, val, len, &found);
  if (st != GT_OK || found) {
    gt_etcd_watch_cancel(w);
    return st;
  }
  for (;;) {
    double left = deadline - gt_now();
    if (left <= 0) {
      st = gt_errorf(GT_ETIMEDOUT, "store key '%s' did not appear in time", k);
      break;
    }
    gt_etcd_event ev;
    st = gt_etcd_watch_next(w, &ev, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
    if (st == GT_ETIMEDOUT) continue;
    if (st != GT_OK) break;
    if (ev.type == GT_ETCD_EVENT_PUT) {
      if (val) {
        *val = ev.kv.value;
        *len = ev.kv.value_len;
        ev.kv.value = NULL;
      }
      gt_etcd_event_free(&ev);
      break;
    }
    gt_etcd_event_free(&ev);
    if (ev.type != GT_ETCD_EVENT_DELETE) {
      st = gt_etcd_watch_status(w);
      if (st == GT_OK) st = gt_errorf(GT_EBACKEND, "the watch on store key '%s' ended", k);
      break;
    }
  }
  gt_etcd_watch_cancel(w);
  return st;
}

static double deadline_of(int timeout_ms) { return gt_now() + (timeout_ms < 0 ? 1e9 : timeout_ms / 1000.0); }

static gt_status st_get(gt_store *gs, const char *key, void **val, size_t *len, int timeout_ms) {
  etcd_store *s = gs->impl;
  if (!val || !len) return gt_errorf(GT_EINVAL, "store get '%s': NULL value or length", key ? key : "");
  char *k;
  GT_TRY(full_key(s, key, &k));
  gt_status st = wait_key(s, k, val, len, deadline_of(timeout_ms));
  free(k);
  return st;
}

static gt_status st_wait(gt_store *gs, const char *const *keys, int nkeys, int timeout_ms) {
  etcd_store *s = gs->impl;
  if (nkeys < 0 || (nkeys > 0 && !keys)) return gt_errorf(GT_EINVAL, "store wait: bad key list");
  double deadline = deadline_of(timeout_ms);
  for (int i = 0; i < nkeys; i++) {
    char *k;
    GT_TRY(full_key(s, keys[i], &k));
    gt_status st = wait_key(s, k, NULL, NULL, deadline);
    free(k);
    GT_TRY(st);
  }
  return GT_OK;
}

static gt_status st_add(gt_store *gs, const char *key, int64_t delta, int64_t *result) {
  etcd_store *s = gs->impl;
  char *k;
  GT_TRY(full_key(s, key, &k));
  gt_status st;
  /* Bounded: each failed round means another writer succeeded. */
  for (int round = 0; round < 100000; round++) {
    void *val = NULL;
    size_t len = 0;
    int64_t mod = 0, cur = 0;
    st = gt_etcd_get_value(s->c, k, &val, &len, &mod);
    if (st == GT_ENOTFOUND) {
      st = GT_OK;
    } else if (st == GT_OK) {
      char *end;
      errno = 0;
      long long v = strtoll(val, &end, 10);
      if (len == 0 || errno || *end)
        st = gt_errorf(GT_EFORMAT, "store key '%s' holds '%.40s', not an integer", k, (char *)val);
      cur = v;
      free(val);
    }
    if (st != GT_OK) break;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%" PRId64, cur + delta);
    gt_etcd_cmp cmp = {.key = k,
                       .op = GT_ETCD_EQUAL,
                       .target = mod ? GT_ETCD_CMP_MOD_REVISION : GT_ETCD_CMP_CREATE_REVISION,
                       .number = mod};
    gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = k, .value = buf, .value_len = (size_t)n};
    gt_etcd_txn_result r;
    st = gt_etcd_txn(s->c, &cmp, 1, &put, 1, NULL, 0, &r);
    if (st != GT_OK) break;
    int won = r.succeeded;
    gt_etcd_txn_result_free(&r);
    if (won) {
      if (result) *result = cur + delta;
      break;
    }
    st = gt_errorf(GT_EBACKEND, "store add on '%s' kept losing races", k);
  }
  free(k);
  return st;
}

static gt_status st_del(gt_store *gs, const char *key) {
  etcd_store *s = gs->impl;
  char *k;
  GT_TRY(full_key(s, key, &k));
  gt_status st = gt_etcd_del(s->c, k, 0, NULL);
  free(k);
  return st;
}

static void st_destroy(gt_store *gs) {
  etcd_store *s = gs->impl;
  free(s->prefix);
  free(s);
}

static const gt_store_ops etcd_store_ops = {st_set, st_get, st_wait, st_add, st_del, st_destroy};

gt_status gt_etcd_store_create(gt_etcd_client *c, const char *prefix, gt_store **out) {
  if (!c || !prefix || !out) return gt_errorf(GT_EINVAL, "etcd store: NULL client, prefix or handle");
  etcd_store *s = calloc(1, sizeof *s);
  if (!s || !(s->prefix = strdup(prefix))) {
    free(s);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  s->c = c;
  s->base.ops = &etcd_store_ops;
  s->base.impl = s;
  *out = &s->base;
  return GT_OK;
}
