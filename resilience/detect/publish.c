/* What world rank 0 tells about the monitor's verdicts: a log line each, a
 * JSON line per gathered step in the metrics file, and a health record
 * each on the job's etcd when it has one. The other ranks hold the same
 * verdicts and say nothing, so each is told once. */
#include <stdio.h>
#include <time.h>

#include "giant/log.h"
#include "resilience/detect/failslow.h"
#include "resilience/detect/monitor.h"
#ifdef GIANT_HAVE_ETCD
#include "giant/engine/coord.h"
#endif

static const char *kind_name(gt_failslow_kind k) { return k == GT_FAILSLOW_LINK ? "link" : "compute"; }

static void log_verdict(const gt_failslow_verdict *v) {
  if (v->kind == GT_FAILSLOW_LINK && v->peer < 0 && v->flagged)
    gt_warn("fail-slow: link of rank %d (to every other node) x%.2f from step %d (flagged at step %d)", v->rank,
            v->ratio, v->onset, v->step);
  else if (v->kind == GT_FAILSLOW_LINK && v->peer < 0)
    gt_info("fail-slow: link of rank %d recovered (step %d)", v->rank, v->step);
  else if (v->kind == GT_FAILSLOW_LINK && v->flagged)
    gt_warn("fail-slow: link %d-%d x%.2f from step %d (flagged at step %d)", v->rank, v->peer, v->ratio, v->onset,
            v->step);
  else if (v->kind == GT_FAILSLOW_LINK)
    gt_info("fail-slow: link %d-%d recovered (step %d)", v->rank, v->peer, v->step);
  else if (v->flagged)
    gt_warn("fail-slow: rank %d compute x%.2f from step %d (flagged at step %d)", v->rank, v->ratio, v->onset, v->step);
  else
    gt_info("fail-slow: rank %d recovered (step %d)", v->rank, v->step);
}

static void write_json(FILE *f, const gt_failslow_report *rep) {
  fprintf(f,
          "{\"failslow_step\":%d,\"ape\":%.5f,\"ape_raw\":%.5f,\"job_factor\":%.5f,\"gather_s\":%.7f,\"probed\":%s,"
          "\"probe_s\":%.6f,\"wait_s\":%.6f,\"wait_base_s\":%.6f,\"compute_s\":[",
          rep->step, rep->ape, rep->ape_raw, rep->job_factor, rep->gather_s, rep->probed ? "true" : "false",
          rep->probe_s, rep->wait_s, rep->wait_base_s);
  /* Every rank's compute, the evidence a verdict can be checked against. */
  for (int i = 0; i < rep->nranks; i++) fprintf(f, "%s%.7f", i ? "," : "", rep->telemetry[i].compute_s);
  fprintf(f, "],\"verdicts\":[");
  for (int i = 0; i < rep->nverdicts; i++) {
    const gt_failslow_verdict *v = &rep->verdicts[i];
    fprintf(f, "%s{\"rank\":%d,\"kind\":\"%s\",\"peer\":%d,\"state\":\"%s\",\"ratio\":%.4f,\"onset\":%d,\"step\":%d}",
            i ? "," : "", v->rank, kind_name(v->kind), v->peer, v->flagged ? "slow" : "ok", v->ratio, v->onset,
            v->step);
  }
  fprintf(f, "]}\n");
  fflush(f);
}

#ifdef GIANT_HAVE_ETCD
/* A failed write is logged, not fatal: training goes on without it. */
static void put_health(gt_failslow *fs, const gt_failslow_report *rep, const gt_failslow_verdict *v) {
  const gt_step_telemetry *t = &rep->telemetry[v->rank];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  /* The records name ranks as launched (gt_failslow_config.record_ranks). */
  const int *name = fs->record_rank;
  gt_health_record r = {
      .rank = name ? name[v->rank] : v->rank,
      .state = v->flagged ? GT_HEALTH_SLOW : GT_HEALTH_OK,
      .kind = v->flagged ? (v->kind == GT_FAILSLOW_LINK ? GT_HEALTH_LINK : GT_HEALTH_COMPUTE) : GT_HEALTH_NONE,
      .peer = v->flagged && v->kind == GT_FAILSLOW_LINK && v->peer >= 0 ? (name ? name[v->peer] : v->peer) : -1,
      .ratio = v->ratio,
      .observed_ms = t->compute_s * 1e3,
      .predicted_ms = rep->predicted[v->rank] * rep->job_factor * 1e3,
      .step = v->step,
      .time = (double)now.tv_sec + now.tv_nsec * 1e-9};
  snprintf(r.by, sizeof r.by, "rank-0");
  if (gt_health_put(fs->cfg.etcd, fs->cfg.job_id, &r) != GT_OK)
    gt_warn("fail-slow: could not record rank %d's health on etcd: %s", r.rank, gt_last_error());
}
#endif

void gt_failslow_publish(gt_failslow *fs, const gt_failslow_report *rep) {
  if (fs->rank != 0) return;
  for (int i = 0; i < rep->nverdicts; i++) {
    if (!fs->cfg.quiet) log_verdict(&rep->verdicts[i]);
#ifdef GIANT_HAVE_ETCD
    if (fs->cfg.etcd && fs->cfg.job_id) put_health(fs, rep, &rep->verdicts[i]);
#endif
  }
  if (fs->metrics) write_json(fs->metrics, rep);
}
