/* gt_store dispatch and the helpers built on any store. */
#include "giant/engine/store.h"

#include <stdio.h>
#include <stdlib.h>

gt_status gt_store_set(gt_store *s, const char *key, const void *val, size_t len) {
  return s->ops->set(s, key, val, len);
}

gt_status gt_store_get(gt_store *s, const char *key, void **val, size_t *len, int timeout_ms) {
  return s->ops->get(s, key, val, len, timeout_ms);
}

gt_status gt_store_wait(gt_store *s, const char *const *keys, int nkeys, int timeout_ms) {
  return s->ops->wait(s, keys, nkeys, timeout_ms);
}

gt_status gt_store_add(gt_store *s, const char *key, int64_t delta, int64_t *result) {
  return s->ops->add(s, key, delta, result);
}

gt_status gt_store_del(gt_store *s, const char *key) { return s->ops->del(s, key); }

void gt_store_destroy(gt_store *s) {
  if (s) s->ops->destroy(s);
}

/* Arrive by incrementing a counter; the last to arrive sets a release key
 * that everyone waits for. Names must be unique per use (add a sequence
 * number when a barrier repeats). */
gt_status gt_store_barrier(gt_store *s, const char *name, int rank, int n, int timeout_ms) {
  (void)rank;
  char count_key[256], done_key[256];
  snprintf(count_key, sizeof count_key, "barrier/%s/count", name);
  snprintf(done_key, sizeof done_key, "barrier/%s/done", name);
  int64_t arrived = 0;
  GT_TRY(gt_store_add(s, count_key, 1, &arrived));
  if (arrived == n) GT_TRY(gt_store_set(s, done_key, "1", 1));
  const char *keys[1] = {done_key};
  gt_status st = gt_store_wait(s, keys, 1, timeout_ms);
  if (st != GT_OK) return gt_error_context(st, "barrier '%s' (%d of %d ranks arrived)", name, (int)arrived, n);
  return GT_OK;
}
