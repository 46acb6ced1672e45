/* Mitigation records on etcd (see giant/engine/coord.h): the workers' report of
 * replica speeds and the leader's decision, one line of text each, and the
 * decision's write guarded by the leader's term. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "giant/engine/coord.h"
#include "resilience/rdzv/rdzv.h"
#include "resilience/coord/line.h"
#include "giant/engine/etcd.h"
#include "resilience/coord/records.h"
#include "resilience/mitigate/rebalance.h"

#define MAX_STEP 9e15

/* Appends "key=a,b,c" to line at *at; GT_EINVAL when it does not fit. */
static gt_status put_list(char *line, size_t len, size_t *at, const char *key, int n, const int *ints,
                          const double *reals) {
  int w = snprintf(line + *at, len - *at, " %s=", key);
  for (int i = 0; w >= 0 && (size_t)w < len - *at && i < n; i++) {
    *at += (size_t)w;
    w = ints ? snprintf(line + *at, len - *at, "%s%d", i ? "," : "", ints[i])
             : snprintf(line + *at, len - *at, "%s%.6g", i ? "," : "", reals[i]);
  }
  if (w < 0 || (size_t)w >= len - *at) return gt_errorf(GT_EINVAL, "mitigation record does not fit in %zu bytes", len);
  *at += (size_t)w;
  return GT_OK;
}

static gt_status check_dp(int dp) {
  if (dp < 1 || dp > GT_MITIGATION_MAX_DP)
    return gt_errorf(GT_EINVAL, "mitigation record: dp=%d is outside 1..%d", dp, GT_MITIGATION_MAX_DP);
  return GT_OK;
}

/* Whole numbers of a list into ints, each in [lo, hi]. */
static gt_status get_ints(const char *line, size_t len, const char *key, int n, int lo, int hi, int *out) {
  double v[GT_MITIGATION_MAX_DP];
  GT_TRY(coord_numbers(line, len, key, n, v));
  for (int i = 0; i < n; i++) {
    if (v[i] < lo || v[i] > hi || v[i] != (int)v[i])
      return gt_errorf(GT_EFORMAT, "%s: entry %d (%g) is not a whole number in %d..%d", key, i, v[i], lo, hi);
    out[i] = (int)v[i];
  }
  return GT_OK;
}

gt_status gt_mitigation_report_format(const gt_mitigation_report *r, char *line, size_t len) {
  GT_TRY(check_dp(r->dp));
  int w = snprintf(line, len, "step=%" PRId64 " epoch=%" PRId64 " dp=%d cap=%d urgent=%d transition_s=%.6g", r->step,
                   r->epoch, r->dp, r->cap, r->urgent ? 1 : 0, r->transition_s);
  if (w < 0 || (size_t)w >= len) return gt_errorf(GT_EINVAL, "mitigation report does not fit in %zu bytes", len);
  size_t at = (size_t)w;
  GT_TRY(put_list(line, len, &at, "shares", r->dp, r->shares, NULL));
  GT_TRY(put_list(line, len, &at, "micro", r->dp, r->micro, NULL));
  GT_TRY(put_list(line, len, &at, "speeds", r->dp, NULL, r->speed));
  if (r->pp < 2) return GT_OK;
  if (r->pp > GT_REBALANCE_MAX_STAGES || r->layers < r->pp || r->layers > GT_MITIGATION_MAX_LAYERS)
    return gt_errorf(GT_EINVAL, "mitigation report: pp=%d with %d layers is outside 2..%d stages, %d layers", r->pp,
                     r->layers, GT_REBALANCE_MAX_STAGES, GT_MITIGATION_MAX_LAYERS);
  int w2 = snprintf(line + at, len - at, " pp=%d layers=%d", r->pp, r->layers);
  if (w2 < 0 || (size_t)w2 >= len - at) return gt_errorf(GT_EINVAL, "mitigation report does not fit in %zu bytes", len);
  at += (size_t)w2;
  GT_TRY(put_list(line, len, &at, "cut", r->pp + 1, r->cut, NULL));
  GT_TRY(put_list(line, len, &at, "stage_s", r->pp, NULL, r->stage_s));
  return put_list(line, len, &at, "flops", r->layers, NULL, r->layer_flops);
}

/* A pipeline cut of `layers` layers into pp stages: cut[0] = 0 < cut[1] <
 * ... < cut[pp] = layers. */
static gt_status get_cut(const char *line, size_t len, int pp, int layers, int *cut) {
  GT_TRY(get_ints(line, len, "cut", pp + 1, 0, layers, cut));
  for (int s = 0; s < pp; s++)
    if (cut[s + 1] <= cut[s]) return gt_errorf(GT_EFORMAT, "cut: stage %d holds no layer", s);
  if (cut[0] != 0 || cut[pp] != layers) return gt_errorf(GT_EFORMAT, "cut: must run from 0 to %d", layers);
  return GT_OK;
}

static gt_status parse_report(const char *line, size_t len, void *out) {
  gt_mitigation_report *r = out;
  long long step, epoch, dp, cap, urgent;
  GT_TRY(coord_integer(line, len, "step", 0, MAX_STEP, &step));
  GT_TRY(coord_integer(line, len, "epoch", 0, MAX_STEP, &epoch));
  GT_TRY(coord_integer(line, len, "dp", 1, GT_MITIGATION_MAX_DP, &dp));
  GT_TRY(coord_integer(line, len, "cap", 1, 1 << 24, &cap));
  GT_TRY(coord_integer(line, len, "urgent", 0, 1, &urgent));
  GT_TRY(coord_number(line, len, "transition_s", &r->transition_s));
  if (!(r->transition_s >= 0)) return gt_errorf(GT_EFORMAT, "transition_s=%g is negative", r->transition_s);
  r->step = step;
  r->epoch = epoch;
  r->dp = (int)dp;
  r->cap = (int)cap;
  r->urgent = (int)urgent;
  GT_TRY(get_ints(line, len, "shares", r->dp, 1, r->cap, r->shares));
  GT_TRY(get_ints(line, len, "micro", r->dp, 1, 1 << 24, r->micro));
  GT_TRY(coord_numbers(line, len, "speeds", r->dp, r->speed));
  for (int i = 0; i < r->dp; i++)
    if (!(r->speed[i] > 0) || r->speed[i] > 1e300)
      return gt_errorf(GT_EFORMAT, "speeds: entry %d (%g) is not a positive number", i, r->speed[i]);
  size_t n;
  if (!coord_field(line, len, "pp", &n)) return GT_OK; /* no pipeline */
  long long pp, layers;
  GT_TRY(coord_integer(line, len, "pp", 2, GT_REBALANCE_MAX_STAGES, &pp));
  GT_TRY(coord_integer(line, len, "layers", (double)pp, GT_MITIGATION_MAX_LAYERS, &layers));
  r->pp = (int)pp;
  r->layers = (int)layers;
  GT_TRY(get_cut(line, len, r->pp, r->layers, r->cut));
  GT_TRY(coord_numbers(line, len, "stage_s", r->pp, r->stage_s));
  GT_TRY(coord_numbers(line, len, "flops", r->layers, r->layer_flops));
  for (int s = 0; s < r->pp; s++)
    if (!(r->stage_s[s] > 0) || r->stage_s[s] > 1e300)
      return gt_errorf(GT_EFORMAT, "stage_s: entry %d (%g) is not a positive time", s, r->stage_s[s]);
  for (int i = 0; i < r->layers; i++)
    if (!(r->layer_flops[i] >= 0) || r->layer_flops[i] > 1e300)
      return gt_errorf(GT_EFORMAT, "flops: entry %d (%g) is not a FLOP count", i, r->layer_flops[i]);
  return GT_OK;
}

gt_status gt_mitigation_report_parse(const char *line, size_t len, gt_mitigation_report *out) {
  return coord_parse_line(line, len, GT_MITIGATION_LINE_MAX, "mitigation report", parse_report, out, sizeof *out);
}

gt_status gt_mitigation_format(const gt_mitigation *m, char *line, size_t len) {
  GT_TRY(check_dp(m->dp));
  if (m->by[0] && !gt_rdzv_valid_id(m->by)) return gt_errorf(GT_EINVAL, "mitigation record: 'by' is not a node id");
  int w = snprintf(line, len, "epoch=%" PRId64 " term=%" PRId64 " step=%" PRId64 " dp=%d", m->epoch, m->term, m->step,
                   m->dp);
  if (w < 0 || (size_t)w >= len) return gt_errorf(GT_EINVAL, "mitigation record does not fit in %zu bytes", len);
  size_t at = (size_t)w;
  GT_TRY(put_list(line, len, &at, "shares", m->dp, m->shares, NULL));
  w = snprintf(line + at, len - at, " step_now_s=%.6g step_new_s=%.6g gain_s=%.6g by=%s", m->step_now_s, m->step_new_s,
               m->gain_s, m->by[0] ? m->by : "-");
  if (w < 0 || (size_t)w >= len - at) return gt_errorf(GT_EINVAL, "mitigation record does not fit in %zu bytes", len);
  at += (size_t)w;
  if (m->pp < 2) return GT_OK;
  if (m->pp > GT_REBALANCE_MAX_STAGES) return gt_errorf(GT_EINVAL, "mitigation record: pp=%d is too many", m->pp);
  w = snprintf(line + at, len - at, " pp=%d", m->pp);
  if (w < 0 || (size_t)w >= len - at) return gt_errorf(GT_EINVAL, "mitigation record does not fit in %zu bytes", len);
  at += (size_t)w;
  return put_list(line, len, &at, "cut", m->pp + 1, m->cut, NULL);
}

static gt_status parse_decision(const char *line, size_t len, void *out) {
  gt_mitigation *m = out;
  long long epoch, term, step, dp;
  GT_TRY(coord_integer(line, len, "epoch", 1, MAX_STEP, &epoch));
  GT_TRY(coord_integer(line, len, "term", 1, MAX_STEP, &term));
  GT_TRY(coord_integer(line, len, "step", 0, MAX_STEP, &step));
  GT_TRY(coord_integer(line, len, "dp", 1, GT_MITIGATION_MAX_DP, &dp));
  m->epoch = epoch;
  m->term = term;
  m->step = step;
  m->dp = (int)dp;
  GT_TRY(get_ints(line, len, "shares", m->dp, 1, 1 << 24, m->shares));
  GT_TRY(coord_number(line, len, "step_now_s", &m->step_now_s));
  GT_TRY(coord_number(line, len, "step_new_s", &m->step_new_s));
  GT_TRY(coord_number(line, len, "gain_s", &m->gain_s));
  GT_TRY(coord_node(line, len, "by", m->by, sizeof m->by));
  size_t n;
  if (!coord_field(line, len, "pp", &n)) return GT_OK; /* rows only */
  long long pp;
  GT_TRY(coord_integer(line, len, "pp", 2, GT_REBALANCE_MAX_STAGES, &pp));
  m->pp = (int)pp;
  double last[GT_REBALANCE_MAX_STAGES + 1];
  GT_TRY(coord_numbers(line, len, "cut", m->pp + 1, last));
  if (!(last[m->pp] >= m->pp && last[m->pp] <= GT_MITIGATION_MAX_LAYERS))
    return gt_errorf(GT_EFORMAT, "cut: its end (%g) is not a layer count", last[m->pp]);
  return get_cut(line, len, m->pp, (int)last[m->pp], m->cut);
}

gt_status gt_mitigation_parse(const char *line, size_t len, gt_mitigation *out) {
  return coord_parse_line(line, len, GT_MITIGATION_LINE_MAX, "mitigation record", parse_decision, out, sizeof *out);
}

static gt_status job_key(const char *job, const char *tail, char *key, size_t len) {
  if (!job || !gt_rdzv_valid_id(job)) return gt_errorf(GT_EINVAL, "'%s' is not a valid job id", job ? job : "");
  snprintf(key, len, "/giant/%s/%s", job, tail);
  return GT_OK;
}

/* The record at /giant/<job>/<tail> parsed into out (size bytes); *found
 * 0 when there is none. */
static gt_status get_record(gt_etcd_client *c, const char *job_id, const char *tail, const char *what,
                            gt_status (*parse)(const char *, size_t, void *), void *out, size_t size, int *found) {
  char key[GT_RDZV_ID_MAX + 48];
  GT_TRY(job_key(job_id, tail, key, sizeof key));
  gt_etcd_kvs r;
  GT_TRY(gt_etcd_get(c, key, NULL, &r));
  *found = r.n == 1;
  gt_status s = GT_OK;
  if (*found)
    s = coord_parse_line((const char *)r.kvs[0].value, r.kvs[0].value_len, GT_MITIGATION_LINE_MAX, what, parse, out,
                         size);
  gt_etcd_kvs_free(&r);
  return s == GT_OK ? s : gt_error_context(s, "key %s", key);
}

gt_status gt_mitigation_report_put(gt_etcd_client *c, const char *job_id, const gt_mitigation_report *r) {
  char key[GT_RDZV_ID_MAX + 48], line[GT_MITIGATION_LINE_MAX];
  GT_TRY(job_key(job_id, "mitigation/report", key, sizeof key));
  GT_TRY(gt_mitigation_report_format(r, line, sizeof line));
  return gt_etcd_put(c, key, line, strlen(line), 0, NULL, NULL);
}

gt_status gt_mitigation_report_get(gt_etcd_client *c, const char *job_id, gt_mitigation_report *r, int *found) {
  return get_record(c, job_id, "mitigation/report", "mitigation report", parse_report, r, sizeof *r, found);
}

gt_status gt_mitigation_put(gt_etcd_client *c, const char *job_id, int64_t term, const gt_mitigation *m) {
  char key[GT_RDZV_ID_MAX + 48], leader[GT_RDZV_ID_MAX + 48], line[GT_MITIGATION_LINE_MAX];
  GT_TRY(job_key(job_id, "mitigation/decision", key, sizeof key));
  GT_TRY(job_key(job_id, "leader", leader, sizeof leader));
  if (term < 1) return gt_errorf(GT_EINVAL, "a mitigation needs the deciding leader's term (>= 1), got %" PRId64, term);
  GT_TRY(gt_mitigation_format(m, line, sizeof line));
  gt_etcd_cmp held = {.key = leader, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL, .number = term};
  gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = key, .value = line, .value_len = strlen(line)};
  gt_etcd_txn_result res;
  GT_TRY(gt_etcd_txn(c, &held, 1, &put, 1, NULL, 0, &res));
  int ok = res.succeeded;
  gt_etcd_txn_result_free(&res);
  if (!ok)
    return gt_errorf(GT_ESTATE,
                     "job %s: mitigation epoch %" PRId64 " refused: term %" PRId64
                     " no longer leads (its lease ended and another leader was elected); the leader now decides",
                     job_id, m->epoch, term);
  return GT_OK;
}

gt_status gt_mitigation_get(gt_etcd_client *c, const char *job_id, gt_mitigation *m, int *found) {
  return get_record(c, job_id, "mitigation/decision", "mitigation record", parse_decision, m, sizeof *m, found);
}

void gt_mitigation_print(const gt_mitigation *m, FILE *f) {
  fprintf(f, "mitigation: epoch %" PRId64 " (term %" PRId64 ", by %s) at step %" PRId64 ": rows ", m->epoch, m->term,
          m->by[0] ? m->by : "-", m->step);
  for (int i = 0; i < m->dp && i < GT_MITIGATION_MAX_DP; i++) fprintf(f, "%s%d", i ? "," : "", m->shares[i]);
  fprintf(f, "; predicted %.4f s -> %.4f s a step, gain %.2f s", m->step_now_s, m->step_new_s, m->gain_s);
  if (m->pp > 1) {
    fprintf(f, "; pipeline cut");
    for (int s = 0; s <= m->pp && s <= GT_REBALANCE_MAX_STAGES; s++) fprintf(f, "%s%d", s ? "," : " ", m->cut[s]);
  }
  fprintf(f, "\n");
}
