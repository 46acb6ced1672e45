/* The fail-slow monitor: one all-gather of the step's telemetry, then the
 * same predictor and detector on every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/grid.h"
#include "giant/log.h"
#include "resilience/detect/monitor.h"
#include "giant/engine/comm.h"
#include "giant/engine/detector.h"
#include "giant/engine/device.h"
#include "giant/engine/dist.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/predictor.h"
#include "resilience/detect/failslow.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gt_failslow_median(double *scratch, const double *v, int n) {
  if (n <= 0) return 0;
  memcpy(scratch, v, (size_t)n * sizeof *v);
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
  return n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2;
}

/* Rank 0's prior, broadcast: every rank's predictor must start alike for
 * their verdicts to agree, and ranks may hold different layers or have
 * measured different peaks. */
static gt_status shared_prior(gt_failslow *fs, const gt_model *m, const gt_plan *plan, gt_predictor_prior *out) {
  float v[3] = {0, 0, 0};
  if (fs->rank == 0) {
    int pp = plan->layout.pp > 0 ? plan->layout.pp : 1;
    int layers = (gt_model_num_layers(m) + pp - 1) / pp;
    GT_TRY(gt_predictor_prior_from_model(m, layers > 0 ? layers : 1, gt_backend_peak_flops(gt_model_backend(m)), out));
    v[0] = (float)out->a;
    v[1] = (float)out->b;
    v[2] = (float)out->c;
  }
  GT_TRY(gt_comm_broadcast(fs->world, v, 3, GT_F32, 0));
  *out = (gt_predictor_prior){v[0], v[1], v[2]};
  return GT_OK;
}

gt_status gt_failslow_create(gt_dist *dist, const gt_model *m, const gt_failslow_config *cfg, gt_failslow **out) {
  if (!out) return gt_errorf(GT_EINVAL, "gt_failslow_create: NULL result");
  *out = NULL;
  if (!dist || !m || !cfg) return gt_errorf(GT_EINVAL, "gt_failslow_create: NULL dist, model or config");
  const gt_failslow_config *c = cfg;
  if (c->theta < 0 || c->k < 0 || c->warmup < 0 || c->window < 0 || c->every < 0 || c->probe_rounds < 0 ||
      c->probe_bytes < 0 || c->probe_bytes > (64 << 20))
    return gt_errorf(GT_EINVAL,
                     "fail-slow: theta, k, warmup, window, every and probe rounds must be >= 0, probe "
                     "bytes in 0..64 MiB (0: default)");
  gt_comm *world = gt_grid_world(gt_dist_grid(dist));
  if (gt_comm_size(world) < 2)
    return gt_errorf(GT_EINVAL,
                     "fail-slow detection needs 2 or more ranks to tell one rank from the job (this job has %d)",
                     gt_comm_size(world));
  gt_failslow *fs = calloc(1, sizeof *fs);
  if (!fs) return gt_errorf(GT_ENOMEM, "out of memory creating the fail-slow monitor");
  fs->cfg = *cfg;
  gt_failslow_config *k = &fs->cfg;
  /* The compute verdicts' theta is left to the detector (0: its default
   * for the job's size); the link's is 0.25 by default. */
  double compute_theta = k->theta;
  if (k->theta == 0) k->theta = 0.25;
  if (k->k == 0) k->k = 5;
  if (k->warmup == 0) k->warmup = 10;
  if (k->window == 0) k->window = 50;
  if (k->every == 0) k->every = 1;
  if (k->probe_rounds == 0) k->probe_rounds = 3;
  if (k->probe_bytes == 0) k->probe_bytes = 16 * 1024;
  fs->world = world;
  fs->rank = gt_comm_rank(world);
  fs->n = gt_comm_size(world);
  size_t n = (size_t)fs->n;
  fs->tel = calloc(n, sizeof *fs->tel);
  fs->predicted = calloc(n, sizeof(double));
  fs->e = calloc(n, sizeof(double));
  fs->scratch = calloc(n, sizeof(double));
  fs->events = calloc(n, sizeof *fs->events);
  fs->verdicts = calloc(n + 2, sizeof *fs->verdicts);
  bool names_ok = true;
  if (cfg->record_ranks && (names_ok = (fs->record_rank = malloc(n * sizeof *fs->record_rank)) != NULL))
    memcpy(fs->record_rank, cfg->record_ranks, n * sizeof *fs->record_rank);
  fs->cfg.record_ranks = NULL; /* the caller's; fs->record_rank is ours */
  gt_status s = fs->tel && fs->predicted && fs->e && fs->scratch && fs->events && fs->verdicts && names_ok
                    ? GT_OK
                    : gt_errorf(GT_ENOMEM, "out of memory creating the fail-slow monitor for %d ranks", fs->n);
  gt_predictor_prior prior = {0};
  if (s == GT_OK) s = shared_prior(fs, m, gt_dist_plan(dist), &prior);
  /* Peers are the ranks of one pipeline stage: they do the same work. */
  int *stage = s == GT_OK ? calloc(n, sizeof *stage) : NULL;
  if (s == GT_OK && !stage) s = gt_errorf(GT_ENOMEM, "out of memory creating the fail-slow monitor");
  for (int r = 0; s == GT_OK && r < fs->n; r++) {
    gt_grid_coords c;
    s = gt_grid_coords_of(&gt_dist_plan(dist)->layout, r, &c);
    if (s == GT_OK) stage[r] = c.pp;
  }
  if (s == GT_OK) {
    gt_predictor_config pc = {.nranks = fs->n, .prior = prior, .groups = stage};
    s = gt_predictor_create(&pc, &fs->pred);
  }
  free(stage);
  if (s == GT_OK) {
    gt_detector_config dc = {.nranks = fs->n,
                             .theta = compute_theta,
                             .k = k->k,
                             .warmup = k->warmup,
                             .window = k->window,
                             .relative_fits = true};
    s = gt_detector_create(&dc, fs->pred, &fs->det);
  }
  if (s == GT_OK) s = gt_failslow_link_init(fs);
  if (s == GT_OK && fs->rank == 0 && k->metrics_path) {
    fs->metrics = fopen(k->metrics_path, "a");
    if (!fs->metrics) s = gt_errorf(GT_EIO, "fail-slow: cannot append to the metrics file %s", k->metrics_path);
  }
  if (s != GT_OK) {
    gt_failslow_destroy(fs);
    return gt_error_context(s, "starting fail-slow detection");
  }
  *out = fs;
  return GT_OK;
}

void gt_failslow_destroy(gt_failslow *fs) {
  if (!fs) return;
  if (fs->metrics) fclose(fs->metrics);
  gt_failslow_link_free(fs);
  gt_detector_destroy(fs->det);
  gt_predictor_destroy(fs->pred);
  free(fs->tel);
  free(fs->predicted);
  free(fs->e);
  free(fs->scratch);
  free(fs->events);
  free(fs->verdicts);
  free(fs->record_rank);
  free(fs);
}

bool gt_failslow_flagged(const gt_failslow *fs, int rank, gt_failslow_kind kind, int peer) {
  if (!fs) return false;
  if (kind == GT_FAILSLOW_COMPUTE) return gt_detector_flagged(fs->det, rank);
  const link_watch *l = &fs->link;
  if (peer < 0) return rank >= 0 && rank < fs->n && l->flagged[rank] != 0; /* every link of rank */
  return l->flagged_a >= 0 &&
         ((l->flagged_a == rank && l->flagged_b == peer) || (l->flagged_a == peer && l->flagged_b == rank));
}

/* How far off the predictor was this step. The fits learn each rank's
 * speed relative to the job (relative_fits), so a prediction in seconds is
 * a fit times the job's level: ape takes this step's level (the median
 * rank's ratio; the error left is what tells ranks apart), ape_raw the
 * level of the steps before (a forecast made before the step is seen). */
static void accuracy(gt_failslow *fs, gt_failslow_report *rep) {
  for (int r = 0; r < fs->n; r++) {
    fs->predicted[r] = gt_predictor_own(fs->pred, &fs->tel[r]);
    fs->e[r] = log(fmax(fs->tel[r].compute_s, 1e-9) / fmax(fs->predicted[r], 1e-9));
  }
  double job = gt_failslow_median(fs->scratch, fs->e, fs->n), ape = 0, raw = 0;
  if (fs->level <= 0) fs->level = exp(job);
  int m = 0;
  for (int r = 0; r < fs->n; r++) {
    if (gt_detector_flagged(fs->det, r)) continue;
    ape += fabs(1 - exp(job - fs->e[r]));
    raw += fabs(1 - fs->level * fmax(fs->predicted[r], 1e-9) / fmax(fs->tel[r].compute_s, 1e-9));
    m++;
  }
  rep->job_factor = exp(job);
  rep->ape = m ? ape / m : 0;
  rep->ape_raw = m ? raw / m : 0;
  fs->level = 0.8 * fs->level + 0.2 * exp(job); /* a memory of about five steps */
}

gt_status gt_failslow_step(gt_failslow *fs, const gt_step_stats *stats, gt_failslow_report *out) {
  if (!fs || !stats || !out) return gt_errorf(GT_EINVAL, "gt_failslow_step: NULL monitor, stats or report");
  *out = (gt_failslow_report){.step = stats->step, .nranks = fs->n};
  if (stats->step % fs->cfg.every != 0) return GT_OK;
  /* The record is fixed-size plain data; it travels as 4-byte words. */
  _Static_assert(sizeof(gt_step_telemetry) % sizeof(float) == 0, "telemetry travels as 4-byte words");
  gt_step_telemetry mine = stats->telemetry;
  mine.rank = fs->rank;
  double t0 = gt_now();
  gt_status s = gt_comm_allgather(fs->world, &mine, fs->tel, sizeof mine / sizeof(float), GT_F32);
  if (s != GT_OK) return gt_error_context(s, "fail-slow: gathering the step's telemetry");
  out->gather_s = gt_now() - t0;
  out->gathered = true;
  out->telemetry = fs->tel;
  out->predicted = fs->predicted;
  accuracy(fs, out);
  /* The same inputs on every rank, and the same code: the same verdicts. */
  int nev = 0;
  GT_TRY(gt_detector_step(fs->det, fs->gathered, fs->tel, fs->events, &nev));
  fs->nverdicts = 0;
  for (int i = 0; i < nev; i++) {
    const gt_detector_event *ev = &fs->events[i];
    /* The detector counts gathered steps; verdicts speak of training steps. */
    int every = fs->cfg.every, base = stats->step - fs->gathered * every;
    fs->verdicts[fs->nverdicts++] = (gt_failslow_verdict){.rank = ev->rank,
                                                          .kind = GT_FAILSLOW_COMPUTE,
                                                          .peer = -1,
                                                          .flagged = ev->flagged,
                                                          .ratio = ev->ratio,
                                                          .onset = base + ev->onset * every,
                                                          .step = stats->step};
  }
  out->verdicts = fs->verdicts;
  out->nverdicts = fs->nverdicts;
  s = gt_failslow_link_step(fs, stats->step, out);
  fs->gathered++;
  if (s != GT_OK) return gt_error_context(s, "fail-slow: probing the links");
  out->nverdicts = fs->nverdicts;
  gt_failslow_publish(fs, out);
  return GT_OK;
}
