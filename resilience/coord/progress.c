/* Progress records on etcd (giant/engine/progress.h): one line of text each,
 * written by the run library, read by giantrun --status. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/progress.h"
#include "resilience/coord/line.h"
#include "resilience/rdzv/rdzv.h"

static gt_status key_of(const char *job, const char *tail, int rank, char *key, size_t len) {
  if (!job || !gt_rdzv_valid_id(job)) return gt_errorf(GT_EINVAL, "'%s' is not a valid job id", job ? job : "");
  if (rank >= 0)
    snprintf(key, len, "/giant/%s/progress/%s%d", job, tail, rank);
  else
    snprintf(key, len, "/giant/%s/progress/%s", job, tail);
  return GT_OK;
}

static gt_status fits(int n, size_t len, const char *what) {
  if (n < 0 || (size_t)n >= len)
    return gt_errorf(GT_EINVAL, "the %s progress record does not fit in %zu bytes", what, len);
  return GT_OK;
}

gt_status gt_progress_job_format(const gt_progress_job *p, char *line, size_t len) {
  int n = snprintf(line, len,
                   "gen=%ld world=%d dp=%d tp=%d pp=%d step=%" PRId64 " steps=%" PRId64
                   " step_ms=%.3f tokens_per_s=%.1f mfu=%.4f loss=%.6g ckpt=%" PRId64 " eta_s=%.1f time=%.3f",
                   p->gen, p->world, p->dp, p->tp, p->pp, p->step, p->steps, p->step_ms, p->tokens_per_s, p->mfu,
                   p->loss, p->ckpt, p->eta_s, p->time);
  return fits(n, len, "job's");
}

#define BIG 9e15 /* the largest step or time a record holds */

static gt_status parse_job(const char *line, size_t len, gt_progress_job *p) {
  long long v;
  GT_TRY(coord_integer(line, len, "gen", 0, BIG, &v));
  p->gen = (long)v;
  int *ints[] = {&p->world, &p->dp, &p->tp, &p->pp};
  const char *names[] = {"world", "dp", "tp", "pp"};
  for (int i = 0; i < 4; i++) {
    GT_TRY(coord_integer(line, len, names[i], 1, 1 << 24, &v));
    *ints[i] = (int)v;
  }
  GT_TRY(coord_integer(line, len, "step", 0, BIG, &v));
  p->step = v;
  GT_TRY(coord_integer(line, len, "steps", 0, BIG, &v));
  p->steps = v;
  GT_TRY(coord_integer(line, len, "ckpt", -1, BIG, &v));
  p->ckpt = v;
  GT_TRY(coord_number(line, len, "step_ms", &p->step_ms));
  GT_TRY(coord_number(line, len, "tokens_per_s", &p->tokens_per_s));
  GT_TRY(coord_number(line, len, "mfu", &p->mfu));
  GT_TRY(coord_number(line, len, "loss", &p->loss));
  GT_TRY(coord_number(line, len, "eta_s", &p->eta_s));
  GT_TRY(coord_number(line, len, "time", &p->time));
  return GT_OK;
}

static bool is_line(const char *line, size_t len) { return len <= GT_PROGRESS_LINE_MAX && !memchr(line, '\0', len); }

gt_status gt_progress_job_parse(const char *line, size_t len, gt_progress_job *out) {
  gt_progress_job p = {0};
  if (!is_line(line, len)) return gt_errorf(GT_EFORMAT, "the job's progress record is not a line of text");
  gt_status s = parse_job(line, len, &p);
  if (s != GT_OK) return gt_error_context(s, "the job's progress record");
  *out = p;
  return GT_OK;
}

gt_status gt_progress_rank_format(const gt_progress_rank *p, char *line, size_t len) {
  int n = snprintf(line, len, "gen=%ld world=%d node=%s pid=%d step=%" PRId64 " step_ms=%.3f time=%.3f", p->gen,
                   p->world, p->node[0] ? p->node : "-", p->pid, p->step, p->step_ms, p->time);
  return fits(n, len, "rank's");
}

static gt_status parse_rank(const char *line, size_t len, gt_progress_rank *p) {
  long long v;
  GT_TRY(coord_integer(line, len, "gen", 0, BIG, &v));
  p->gen = (long)v;
  GT_TRY(coord_integer(line, len, "world", 1, 1 << 24, &v));
  p->world = (int)v;
  GT_TRY(coord_integer(line, len, "pid", 0, 1 << 30, &v));
  p->pid = (int)v;
  GT_TRY(coord_integer(line, len, "step", 0, BIG, &v));
  p->step = v;
  GT_TRY(coord_number(line, len, "step_ms", &p->step_ms));
  GT_TRY(coord_number(line, len, "time", &p->time));
  return coord_node(line, len, "node", p->node, sizeof p->node);
}

gt_status gt_progress_rank_parse(const char *line, size_t len, int rank, gt_progress_rank *out) {
  gt_progress_rank p = {.rank = rank};
  if (!is_line(line, len)) return gt_errorf(GT_EFORMAT, "rank %d's progress record is not a line of text", rank);
  gt_status s = parse_rank(line, len, &p);
  if (s != GT_OK) return gt_error_context(s, "rank %d's progress record", rank);
  *out = p;
  return GT_OK;
}

static gt_status put(gt_etcd_client *c, const char *key, const char *line) {
  return gt_etcd_put(c, key, line, strlen(line), 0, NULL, NULL);
}

gt_status gt_progress_put_job(gt_etcd_client *c, const char *job_id, const gt_progress_job *p) {
  char key[GT_RDZV_ID_MAX + 48], line[GT_PROGRESS_LINE_MAX];
  GT_TRY(key_of(job_id, "job", -1, key, sizeof key));
  GT_TRY(gt_progress_job_format(p, line, sizeof line));
  return put(c, key, line);
}

gt_status gt_progress_put_rank(gt_etcd_client *c, const char *job_id, const gt_progress_rank *p) {
  if (p->rank < 0) return gt_errorf(GT_EINVAL, "a progress record needs a rank >= 0, got %d", p->rank);
  char key[GT_RDZV_ID_MAX + 48], line[GT_PROGRESS_LINE_MAX];
  GT_TRY(key_of(job_id, "rank/", p->rank, key, sizeof key));
  GT_TRY(gt_progress_rank_format(p, line, sizeof line));
  return put(c, key, line);
}

gt_status gt_progress_get_job(gt_etcd_client *c, const char *job_id, gt_progress_job *out, int *found) {
  *found = 0;
  char key[GT_RDZV_ID_MAX + 48];
  GT_TRY(key_of(job_id, "job", -1, key, sizeof key));
  gt_etcd_kvs kvs;
  GT_TRY(gt_etcd_get(c, key, NULL, &kvs));
  gt_status s = GT_OK;
  if (kvs.n) {
    s = gt_progress_job_parse((const char *)kvs.kvs[0].value, kvs.kvs[0].value_len, out);
    *found = s == GT_OK;
  }
  gt_etcd_kvs_free(&kvs);
  return s;
}

static int by_rank(const void *a, const void *b) {
  const gt_progress_rank *x = a, *y = b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

gt_status gt_progress_list_ranks(gt_etcd_client *c, const char *job_id, gt_progress_rank *out, int max, int *n,
                                 int *bad) {
  *n = 0;
  *bad = 0;
  char prefix[GT_RDZV_ID_MAX + 48];
  GT_TRY(key_of(job_id, "rank/", -1, prefix, sizeof prefix));
  gt_etcd_kvs kvs;
  GT_TRY(gt_etcd_get(c, prefix, &(gt_etcd_get_opts){.prefix = 1}, &kvs));
  for (size_t i = 0; i < kvs.n && *n < max; i++) {
    const char *tail = kvs.kvs[i].key + strlen(prefix);
    char *end;
    errno = 0;
    long rank = strtol(tail, &end, 10);
    if (errno || end == tail || *end || rank < 0 || rank > 1 << 24 ||
        gt_progress_rank_parse((const char *)kvs.kvs[i].value, kvs.kvs[i].value_len, (int)rank, &out[*n]) != GT_OK) {
      (*bad)++;
      continue;
    }
    (*n)++;
  }
  gt_etcd_kvs_free(&kvs);
  qsort(out, (size_t)*n, sizeof *out, by_rank);
  return GT_OK;
}
