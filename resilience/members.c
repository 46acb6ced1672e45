/* Membership epochs in the generation's store (giant/members.h). */
#include "giant/members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"

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
  if (world < 1 || world > GT_MEMBERS_MAX) return gt_errorf(GT_EINVAL, "world size %d outside 1..%d", world, GT_MEMBERS_MAX);
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

gt_status gt_members_remove(gt_store *s, int world, int rank, int *epoch) {
  int *ranks = malloc(GT_MEMBERS_MAX * sizeof *ranks), n = 0;
  if (!ranks) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status st = GT_OK;
  for (int tries = 0; st == GT_OK && tries < GT_MEMBERS_MAX; tries++) {
    int e = 0;
    st = gt_members_latest(s, world, &e, ranks, &n);
    if (st != GT_OK) break;
    int at = gt_members_index(ranks, n, rank);
    if (at < 0) { /* someone removed it already */
      *epoch = e;
      break;
    }
    char key[64];
    snprintf(key, sizeof key, "reshape/claim/%d", e + 1);
    int64_t claims = 0;
    st = gt_store_add(s, key, 1, &claims);
    if (st != GT_OK || claims != 1) continue; /* another removal won epoch e + 1: read it and try again */
    char text[8 * GT_MEMBERS_MAX];
    size_t len = 0;
    for (int i = 0; i < n; i++)
      if (i != at) len += (size_t)snprintf(text + len, sizeof text - len, "%s%d", len ? " " : "", ranks[i]);
    snprintf(key, sizeof key, "reshape/members/%d", e + 1);
    st = gt_store_set(s, key, text, len);
    if (st == GT_OK) {
      gt_info("membership epoch %d: rank %d removed, %d rank(s) left", e + 1, rank, n - 1);
      *epoch = e + 1;
    }
    break;
  }
  free(ranks);
  return st;
}
