/* Health records on etcd (see giant/engine/coord.h): one line of text per rank,
 * so that any etcd client shows them as they are. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/coord.h"
#include "resilience/rdzv/rdzv.h"
#include "resilience/coord/line.h"
#include "giant/engine/etcd.h"
#include "resilience/coord/records.h"

static const char *const state_names[] = {"ok", "slow", "stopped", "excluded"};
static const char *const kind_names[] = {"none", "compute", "link"};

const char *gt_health_state_name(gt_health_state s) {
  return (unsigned)s < sizeof state_names / sizeof *state_names ? state_names[s] : "?";
}

const char *gt_health_kind_name(gt_health_kind k) {
  return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

static int name_index(const char *const *names, int n, const char *v, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && !strncmp(names[i], v, len)) return i;
  return -1;
}

static bool valid_by(const char *by) { return by[0] == '\0' || gt_rdzv_valid_id(by); }

gt_status gt_health_format(const gt_health_record *r, char *line, size_t len) {
  if ((unsigned)r->state > GT_HEALTH_EXCLUDED || (unsigned)r->kind > GT_HEALTH_LINK)
    return gt_errorf(GT_EINVAL, "health record of rank %d: unknown state %d or kind %d", r->rank, (int)r->state,
                     (int)r->kind);
  if (!valid_by(r->by)) return gt_errorf(GT_EINVAL, "health record of rank %d: 'by' is not a node id", r->rank);
  int n = snprintf(line, len,
                   "state=%s kind=%s peer=%d ratio=%.4f observed_ms=%.3f predicted_ms=%.3f step=%" PRId64
                   " time=%.3f by=%s",
                   state_names[r->state], kind_names[r->kind], r->peer, r->ratio, r->observed_ms, r->predicted_ms,
                   r->step, r->time, r->by[0] ? r->by : "-");
  if (n < 0 || (size_t)n >= len)
    return gt_errorf(GT_EINVAL, "health record of rank %d does not fit in %zu bytes", r->rank, len);
  return GT_OK;
}

static gt_status parse(const char *line, size_t len, gt_health_record *r) {
  size_t n;
  const char *v = coord_field(line, len, "state", &n);
  int st = v ? name_index(state_names, 4, v, n) : -1;
  if (st < 0) return gt_errorf(GT_EFORMAT, "state is missing or not one of ok, slow, stopped, excluded");
  v = coord_field(line, len, "kind", &n);
  int kind = v ? name_index(kind_names, 3, v, n) : -1;
  if (kind < 0) return gt_errorf(GT_EFORMAT, "kind is missing or not one of none, compute, link");
  r->state = (gt_health_state)st;
  r->kind = (gt_health_kind)kind;
  double peer, step;
  GT_TRY(coord_number(line, len, "peer", &peer));
  GT_TRY(coord_number(line, len, "ratio", &r->ratio));
  GT_TRY(coord_number(line, len, "observed_ms", &r->observed_ms));
  GT_TRY(coord_number(line, len, "predicted_ms", &r->predicted_ms));
  GT_TRY(coord_number(line, len, "step", &step));
  GT_TRY(coord_number(line, len, "time", &r->time));
  if (peer < -1 || peer > 1 << 24 || peer != (int)peer) return gt_errorf(GT_EFORMAT, "peer=%g is not a rank", peer);
  if (step < 0 || step > 9e15 || step != (double)(int64_t)step)
    return gt_errorf(GT_EFORMAT, "step=%g is not a step", step);
  r->peer = (int)peer;
  r->step = (int64_t)step;
  return coord_node(line, len, "by", r->by, sizeof r->by);
}

gt_status gt_health_parse(const char *line, size_t len, int rank, gt_health_record *out) {
  gt_health_record r = {.rank = rank};
  if (len > GT_HEALTH_LINE_MAX || memchr(line, '\0', len))
    return gt_errorf(GT_EFORMAT, "health record of rank %d: not a line of text", rank);
  gt_status s = parse(line, len, &r);
  if (s != GT_OK) return gt_error_context(s, "health record of rank %d", rank);
  *out = r;
  return GT_OK;
}

static gt_status health_key(const char *job, int rank, char *key, size_t len) {
  if (!job || !gt_rdzv_valid_id(job)) return gt_errorf(GT_EINVAL, "'%s' is not a valid job id", job ? job : "");
  if (rank >= 0)
    snprintf(key, len, "/giant/%s/health/%d", job, rank);
  else
    snprintf(key, len, "/giant/%s/health/", job);
  return GT_OK;
}

gt_status gt_health_put(gt_etcd_client *c, const char *job_id, const gt_health_record *r) {
  if (r->rank < 0) return gt_errorf(GT_EINVAL, "a health record needs a rank >= 0, got %d", r->rank);
  char key[GT_RDZV_ID_MAX + 48], line[GT_HEALTH_LINE_MAX];
  GT_TRY(health_key(job_id, r->rank, key, sizeof key));
  GT_TRY(gt_health_format(r, line, sizeof line));
  return gt_etcd_put(c, key, line, strlen(line), 0, NULL, NULL);
}

static int by_rank(const void *a, const void *b) {
  const gt_health_record *x = a, *y = b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

gt_status gt_health_list(gt_etcd_client *c, const char *job_id, gt_health_record *out, int max, int *n) {
  *n = 0;
  char prefix[GT_RDZV_ID_MAX + 48];
  GT_TRY(health_key(job_id, -1, prefix, sizeof prefix));
  gt_etcd_kvs kvs;
  GT_TRY(gt_etcd_get(c, prefix, &(gt_etcd_get_opts){.prefix = 1}, &kvs));
  gt_status s = GT_OK;
  for (size_t i = 0; i < kvs.n && s == GT_OK && *n < max; i++) {
    const char *tail = kvs.kvs[i].key + strlen(prefix);
    char *end;
    errno = 0;
    long rank = strtol(tail, &end, 10);
    if (errno || end == tail || *end || rank < 0 || rank > 1 << 24) {
      s = gt_errorf(GT_EFORMAT, "key %s is not a rank's health record", kvs.kvs[i].key);
      break;
    }
    s = gt_health_parse((const char *)kvs.kvs[i].value, kvs.kvs[i].value_len, (int)rank, &out[*n]);
    if (s != GT_OK)
      s = gt_error_context(s, "key %s", kvs.kvs[i].key);
    else
      (*n)++;
  }
  gt_etcd_kvs_free(&kvs);
  if (s == GT_OK) qsort(out, (size_t)*n, sizeof *out, by_rank);
  return s;
}

void gt_health_print(const gt_health_record *r, int n, FILE *f) {
  fprintf(f, "%-6s %-8s %-8s %-5s %8s %12s %12s %8s  %s\n", "rank", "state", "kind", "peer", "ratio", "observed_ms",
          "predicted_ms", "step", "by");
  for (int i = 0; i < n; i++) {
    char peer[16] = "-";
    if (r[i].kind == GT_HEALTH_LINK) snprintf(peer, sizeof peer, "%d", r[i].peer);
    fprintf(f, "%-6d %-8s %-8s %-5s %8.2f %12.1f %12.1f %8" PRId64 "  %s\n", r[i].rank,
            gt_health_state_name(r[i].state), gt_health_kind_name(r[i].kind), peer, r[i].ratio, r[i].observed_ms,
            r[i].predicted_ms, r[i].step, r[i].by[0] ? r[i].by : "-");
  }
}
