/* Membership epochs in the generation's store (resilience/members/members.h). */
#include "resilience/members/members.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "giant/engine/store.h"

/* How long a claim's loser waits for the winner to write the epoch. */
#define MEMBERS_WRITE_MS 30000

int gt_members_index(const int *ranks, int n, int rank) {
  for (int i = 0; i < n; i++)
    if (ranks[i] == rank) return i;
  return -1;
}

static gt_status parse(const char *text, size_t len, int world, int epoch, int *ranks, int *n) {
  *n = 0;
  char buf[8 * GT_MEMBERS_MAX];
  if (len >= sizeof buf) return gt_errorf(GT_EFORMAT, "membership epoch %d is too long (%zu bytes)", epoch, len);
  memcpy(buf, text, len);
  buf[len] = 0;
  char *p = buf;
  while (*p) {
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p || r < 0 || r >= world || *n >= GT_MEMBERS_MAX || (*n && r <= ranks[*n - 1]) || (*end && *end != ' '))
      return gt_errorf(GT_EFORMAT, "membership epoch %d is malformed: '%.60s'", epoch, buf);
    ranks[(*n)++] = (int)r;
    p = *end ? end + 1 : end;
  }
  return GT_OK;
}

gt_status gt_members_get(gt_store *s, int world, int epoch, int *ranks, int *n, int timeout_ms) {
  if (world < 1 || world > GT_MEMBERS_MAX)
    return gt_errorf(GT_EINVAL, "world size %d outside 1..%d", world, GT_MEMBERS_MAX);
  if (epoch == 0) {
    for (int i = 0; i < world; i++) ranks[i] = i;
    *n = world;
    return GT_OK;
  }
  char key[64];
  snprintf(key, sizeof key, "reshape/members/%d", epoch);
  void *val = NULL;
  size_t len = 0;
  GT_TRY(gt_store_get(s, key, &val, &len, timeout_ms));
  gt_status st = parse(val, len, world, epoch, ranks, n);
  free(val);
  return st;
}

gt_status gt_members_latest(gt_store *s, int world, int *epoch, int *ranks, int *n) {
  GT_TRY(gt_members_get(s, world, 0, ranks, n, 0));
  for (int e = 1;; e++) {
    char key[64];
    snprintf(key, sizeof key, "reshape/claim/%d", e);
    int64_t claims = 0;
    GT_TRY(gt_store_add(s, key, 0, &claims));
    if (claims == 0) {
      *epoch = e - 1;
      return GT_OK;
    }
    /* Claimed: its writer is at most MEMBERS_WRITE_MS away from writing it. */
    GT_TRY(gt_members_get(s, world, e, ranks, n, MEMBERS_WRITE_MS));
  }
}

/* Publishes the next epoch with `set` (n ranks) taken out or put in,
 * unless the newest already has them so. */
static gt_status change(gt_store *s, int world, const int *set, int nset, bool add, int *epoch) {
  for (int k = 0; k < nset; k++)
    if (set[k] < 0 || set[k] >= world)
      return gt_errorf(GT_EINVAL, "rank %d is not one of the generation's %d", set[k], world);
  int *ranks = malloc(2 * GT_MEMBERS_MAX * sizeof *ranks), n = 0;
  if (!ranks) return gt_errorf(GT_ENOMEM, "out of memory");
  int *next = ranks + GT_MEMBERS_MAX;
  gt_status st = GT_OK;
  for (int tries = 0; st == GT_OK && tries < GT_MEMBERS_MAX; tries++) {
    int e = 0;
    st = gt_members_latest(s, world, &e, ranks, &n);
    if (st != GT_OK) break;
    /* The new list, ascending: every rank of the generation that is in
     * the newest epoch, or in the set, as `add` says. */
    int m = 0, changed = 0;
    for (int r = 0; r < world; r++) {
      bool in = gt_members_index(ranks, n, r) >= 0, named = gt_members_index(set, nset, r) >= 0;
      bool keep = named ? add : in;
      changed += keep != in;
      if (keep) next[m++] = r;
    }
    if (!changed) { /* someone did it already */
      *epoch = e;
      break;
    }
    char key[64];
    snprintf(key, sizeof key, "reshape/claim/%d", e + 1);
    int64_t claims = 0;
    st = gt_store_add(s, key, 1, &claims);
    if (st != GT_OK || claims != 1) continue; /* another change won epoch e + 1: read it and try again */
    char text[8 * GT_MEMBERS_MAX];
    size_t len = 0;
    for (int i = 0; i < m; i++) len += (size_t)snprintf(text + len, sizeof text - len, "%s%d", i ? " " : "", next[i]);
    snprintf(key, sizeof key, "reshape/members/%d", e + 1);
    st = gt_store_set(s, key, text, len);
    if (st == GT_OK) {
      gt_info("membership epoch %d: %d rank(s) %s (rank %d%s), %d rank(s)", e + 1, changed, add ? "added" : "removed",
              set[0], nset > 1 ? " and others" : "", m);
      *epoch = e + 1;
    }
    break;
  }
  free(ranks);
  return st;
}

gt_status gt_members_remove(gt_store *s, int world, int rank, int *epoch) {
  return change(s, world, &rank, 1, false, epoch);
}
gt_status gt_members_remove_set(gt_store *s, int world, const int *ranks, int n, int *epoch) {
  if (n < 1) return gt_errorf(GT_EINVAL, "gt_members_remove_set: no ranks given");
  return change(s, world, ranks, n, false, epoch);
}
gt_status gt_members_add(gt_store *s, int world, int rank, int *epoch) {
  return change(s, world, &rank, 1, true, epoch);
}
gt_status gt_members_add_set(gt_store *s, int world, const int *ranks, int n, int *epoch) {
  if (n < 1) return gt_errorf(GT_EINVAL, "gt_members_add_set: no ranks given");
  return change(s, world, ranks, n, true, epoch);
}

gt_status gt_members_request_join(gt_store *s, int rank) {
  char key[64];
  snprintf(key, sizeof key, "reshape/join/%d", rank);
  GT_TRY(gt_store_set(s, key, "1", 1));
  int64_t n = 0;
  return gt_store_add(s, "reshape/joins", 1, &n);
}

gt_status gt_members_finish(gt_store *s) { return gt_store_set(s, "reshape/finished", "1", 1); }

gt_status gt_members_finished(gt_store *s, bool *finished) {
  *finished = false;
  void *v = NULL;
  size_t len = 0;
  gt_status st = gt_store_get(s, "reshape/finished", &v, &len, 0);
  if (st == GT_ETIMEDOUT || st == GT_ENOTFOUND) return GT_OK;
  GT_TRY(st);
  free(v);
  *finished = true;
  return GT_OK;
}

gt_status gt_members_join_requests(gt_store *s, int64_t *total) {
  *total = 0;
  return gt_store_add(s, "reshape/joins", 0, total);
}

gt_status gt_members_joins(gt_store *s, int world, const int *members, int n, int64_t *seen, int *ranks, int *count) {
  *count = 0;
  int64_t total = 0;
  GT_TRY(gt_members_join_requests(s, &total));
  if (total == *seen) return GT_OK;
  for (int r = 0; r < world; r++) {
    if (gt_members_index(members, n, r) >= 0) continue;
    char key[64];
    snprintf(key, sizeof key, "reshape/join/%d", r);
    void *v = NULL;
    size_t len = 0;
    gt_status st = gt_store_get(s, key, &v, &len, 0);
    if (st == GT_ETIMEDOUT || st == GT_ENOTFOUND) continue;
    GT_TRY(st);
    free(v);
    gt_store_del(s, key);
    ranks[(*count)++] = r;
  }
  *seen = total;
  return GT_OK;
}
