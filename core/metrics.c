/* Step metrics: a human line and a JSON line. */
#include "giant/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gt_metrics {
  FILE *f;
};

gt_status gt_metrics_open(const char *path, gt_metrics **out) {
  *out = NULL;
  gt_metrics *m = calloc(1, sizeof *m);
  if (!m) return gt_errorf(GT_ENOMEM, "out of memory opening metrics");
  if (path) {
    m->f = fopen(path, "a");
    if (!m->f) {
      int e = errno;
      free(m);
      return gt_errorf(GT_EIO, "cannot open metrics file %s: %s", path, strerror(e));
    }
  }
  *out = m;
  return GT_OK;
}

void gt_metrics_close(gt_metrics *m) {
  if (!m) return;
  if (m->f) fclose(m->f);
  free(m);
}

/* Wall-clock seconds since the epoch: lines from several ranks and runs
 * line up in time. */
static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

gt_status gt_metrics_write(gt_metrics *m, const gt_step_stats *s) {
  if (!m || !m->f) return GT_OK;
  const gt_step_telemetry *tl = &s->telemetry;
  char eval[48] = ""; /* only on the steps evaluated */
  if (s->has_eval) snprintf(eval, sizeof eval, ",\"eval_loss\":%.6f", s->eval_loss);
  int n = fprintf(m->f,
                  "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"step_time_s\":%.6f,"
                  "\"tokens\":%lld,\"tokens_per_s\":%.1f,\"flops\":%.6e,\"mfu\":%.4f,\"micro_batches\":%d,"
                  "\"seq_len\":%d,\"rank\":%d,\"layers\":%d,\"rank_tokens\":%lld,\"seq_sq\":%.0f,"
                  "\"compute_s\":%.6f,\"data_s\":%.6f,\"dp_wait_s\":%.6f,\"pp_wait_s\":%.6f,"
                  "\"pp_wait_prev_s\":%.6f,\"pp_wait_next_s\":%.6f,\"tp_wait_s\":%.6f,\"first_row\":%llu,"
                  "\"rows\":%llu,\"mem_peak_bytes\":%zu,\"done\":%.6f,\"eta_s\":%.3f%s,\"unix_s\":%.3f}\n",
                  s->step, s->loss, s->lr, s->grad_norm, s->seconds, (long long)s->tokens, s->tokens_per_s, s->flops,
                  s->mfu, s->micro_batches, s->seq_len, tl->rank, tl->layers, (long long)tl->tokens, tl->seq_sq,
                  tl->compute_s, tl->data_s, tl->dp_wait_s, tl->pp_wait_s, tl->pp_wait_prev_s, tl->pp_wait_next_s,
                  tl->tp_wait_s, (unsigned long long)s->first_row, (unsigned long long)s->rows, s->mem_peak, s->done,
                  s->eta_s, eval, unix_now());
  if (n < 0 || fflush(m->f) != 0) return gt_errorf(GT_EIO, "writing the metrics file failed: %s", strerror(errno));
  return GT_OK;
}

/* "1h02m", "3m05s", "42s": as long as it needs, no longer. */
static void format_duration(double secs, char *out, size_t n) {
  long long t = (long long)(secs + 0.5);
  if (t >= 3600)
    snprintf(out, n, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    snprintf(out, n, "%lldm%02llds", t / 60, t % 60);
  else
    snprintf(out, n, "%llds", t);
}

void gt_metrics_print(FILE *f, const gt_step_stats *s) {
  char progress[96] = "", eval[32] = "";
  if (s->has_eval) snprintf(eval, sizeof eval, " | eval %.4f", s->eval_loss);
  if (s->done > 0) {
    char eta[32];
    format_duration(s->eta_s, eta, sizeof eta);
    snprintf(progress, sizeof progress, "%s | %.1f%% | ETA %s", eval, 100.0 * s->done, eta);
  } else {
    snprintf(progress, sizeof progress, "%s", eval);
  }
  fprintf(f, "step %5d | loss %.4f | lr %.2e | grad norm %.3f | %.1f ms | %.0f tok/s | MFU %.1f%%%s\n", s->step,
          s->loss, s->lr, s->grad_norm, s->seconds * 1e3, s->tokens_per_s, 100.0 * s->mfu, progress);
}
