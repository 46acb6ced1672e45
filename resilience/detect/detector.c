/* Fail-slow detection on predicted compute times: a job-wide correction,
 * k consecutive steps over theta, and a CUSUM that confirms the shift. */
#include "giant/engine/detector.h"
#include "giant/engine/predictor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rank_state {
  int over;     /* consecutive steps above log(1 + theta) */
  int since;    /* steps since flagged */
  double cusum; /* in sigmas */
  bool flagged;
} rank_state;

struct gt_detector {
  gt_detector_config cfg;
  gt_predictor *pred;
  rank_state *rs;
  double *e, *sorted; /* this step's log ratios, and a scratch copy */
  double *peer;       /* scratch: the residuals of a rank's peers */
  double *asked;      /* scratch: a rank's excesses over its peers that were asked */
  double *noise;      /* ring of |z| from clean steps, window * nranks */
  double *recent;     /* per rank, a ring of its last 2k residuals */
  double *vs_peers;   /* per rank, a ring of its excess over its peers, the last k steps (NAN: not asked) */
  int nnoise, noise_at, steps;
};

gt_status gt_detector_create(const gt_detector_config *cfg, gt_predictor *pred, gt_detector **out) {
  *out = NULL;
  if (cfg->nranks < 1 || !pred)
    return gt_errorf(GT_EINVAL, "detector: wants nranks >= 1 (got %d) and a predictor", cfg->nranks);
  if (cfg->theta < 0 || cfg->k < 0 || cfg->warmup < 0 || cfg->window < 0 || cfg->cusum_drift < 0 ||
      cfg->cusum_limit < 0 || cfg->sigma_min < 0)
    return gt_errorf(GT_EINVAL, "detector: theta, k, warmup, window and the CUSUM's knobs must be >= 0 (0: default)");
  gt_detector *d = calloc(1, sizeof *d);
  if (!d) return gt_errorf(GT_ENOMEM, "out of memory creating a detector");
  d->cfg = *cfg;
  gt_detector_config *c = &d->cfg;
  /* Two ranks have no majority to say which of them moved: a burst of load
   * on one core, which a third rank would outvote, reads as a slowdown
   * (x1.3 for a dozen steps, on two shared cores). Their bar is higher;
   * x1.5 still clears it. */
  if (c->theta == 0) c->theta = c->nranks == 2 ? 0.4 : 0.25;
  if (c->k == 0) c->k = 5;
  if (c->warmup == 0) c->warmup = 10;
  if (c->window == 0) c->window = 50;
  if (c->cusum_drift == 0) c->cusum_drift = 0.5;
  if (c->cusum_limit == 0) c->cusum_limit = 8;
  if (c->sigma_min == 0) c->sigma_min = 0.02;
  size_t n = (size_t)c->nranks;
  d->pred = pred;
  d->rs = calloc(n, sizeof *d->rs);
  d->e = calloc(n, sizeof *d->e);
  d->peer = calloc(n, sizeof *d->peer);
  /* The medians' scratch: of the noise ring, or of a rank's last 2k. */
  size_t nsorted = n * (size_t)c->window > 2 * (size_t)c->k ? n * (size_t)c->window : 2 * (size_t)c->k;
  d->sorted = calloc(nsorted, sizeof *d->sorted);
  d->asked = calloc((size_t)c->k, sizeof *d->asked);
  d->noise = calloc(n * (size_t)c->window, sizeof *d->noise);
  d->recent = calloc(n * 2 * (size_t)c->k, sizeof *d->recent);
  d->vs_peers = malloc(n * (size_t)c->k * sizeof *d->vs_peers);
  if (!d->rs || !d->e || !d->peer || !d->sorted || !d->asked || !d->noise || !d->recent || !d->vs_peers) {
    gt_detector_destroy(d);
    return gt_errorf(GT_ENOMEM, "out of memory creating a detector for %d ranks", c->nranks);
  }
  for (size_t i = 0; i < n * (size_t)c->k; i++) d->vs_peers[i] = NAN;
  *out = d;
  return GT_OK;
}

void gt_detector_destroy(gt_detector *d) {
  if (!d) return;
  free(d->rs);
  free(d->e);
  free(d->peer);
  free(d->sorted);
  free(d->asked);
  free(d->noise);
  free(d->recent);
  free(d->vs_peers);
  free(d);
}

bool gt_detector_flagged(const gt_detector *d, int rank) {
  return rank >= 0 && rank < d->cfg.nranks && d->rs[rank].flagged;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *scratch, const double *v, int n) {
  memcpy(scratch, v, (size_t)n * sizeof *v);
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
  return n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2;
}

/* The spread of clean residuals: the median absolute residual, scaled to a
 * normal's standard deviation, so that rare large bursts do not widen it. */
static double sigma(gt_detector *d) {
  double s = d->nnoise ? 1.4826 * median(d->sorted, d->noise, d->nnoise) : 0;
  return s > d->cfg.sigma_min ? s : d->cfg.sigma_min;
}

static void add_noise(gt_detector *d, double z) {
  int cap = d->cfg.window * d->cfg.nranks;
  d->noise[d->noise_at] = fabs(z);
  d->noise_at = (d->noise_at + 1) % cap;
  if (d->nnoise < cap) d->nnoise++;
}

/* How much rank r, slow against its own history (z), is slow against its
 * peers too, this step (log): the lesser of how far its residual stands
 * out from theirs and how much longer it took than its workload under
 * their fits predicts. Against its own history alone, a rank whose
 * conditions changed with its peers' (a stage whose speed answered a
 * job-wide slowdown differently from the other stages, whose ranks set the
 * job's level) or whose own fit was learnt in a quieter spell (its stage
 * peer slowed, freeing shared cores) would look slow, and with two ranks a
 * stage that happened. A rank with no peer (a pipeline stage of its own)
 * has its own history only. */
static double excess_over_peers(gt_detector *d, const gt_step_telemetry *tel, int r, double z, double job) {
  int n = 0;
  for (int o = 0; o < d->cfg.nranks; o++)
    if (o != r && gt_predictor_same_group(d->pred, o, r)) d->peer[n++] = d->e[o] - job;
  if (n == 0) return INFINITY;
  double fit = log(fmax(tel[r].compute_s, 1e-9) / fmax(gt_predictor_peers(d->pred, &tel[r]), 1e-9)) - job;
  return fmin(z - median(d->sorted, d->peer, n), fit);
}

/* The peers' verdict on rank r: the median of its excess over its peers in
 * the steps of the last k where it was asked (this one included), or NAN
 * when it was asked in half of them or fewer. The window is the one the
 * evidence against its own history needs: beside a CPU hog, a rank whose
 * own fit had learnt a quick spell built that evidence while no slower
 * than its peers, then met two steps over them (its peers sped up, the
 * hog elsewhere) and, judged on the last three, was flagged x1.50 while
 * its compute was x0.91 of its usual. A rank truly slow is slow against
 * its peers on most steps of its run. */
static double peers_verdict(gt_detector *d, int r) {
  int k = d->cfg.k, n = 0;
  const double *v = d->vs_peers + (size_t)r * k;
  for (int i = 0; i < k; i++)
    if (!isnan(v[i])) d->asked[n++] = v[i];
  return 2 * n > k ? median(d->sorted, d->asked, n) : NAN;
}

/* A flagged rank against its peers this step: the median over its peers q
 * of how much slower it was than q's fit predicts for its work, less how
 * much slower q itself was than its own fit predicts. With the same work
 * that is the ratio of their compute times; it needs no fit to be right
 * about this step's conditions. A peer's fit learnt while the flagged rank
 * was slow can be off for tens of steps after (beside a CPU hog, a stage
 * peer ran faster while the flagged rank slept out its fault): against
 * that fit alone a recovered rank still looked slow, and stayed flagged 41
 * steps after its fault ended. A rank with no healthy peer that has
 * learnt is judged against the peers' fits, corrected by the job's level. */
static double against_peers_now(gt_detector *d, const gt_step_telemetry *tel, int r, double job) {
  int n = 0;
  for (int q = 0; q < d->cfg.nranks; q++) {
    /* A flagged peer's fit follows its slow speed: not a yardstick. */
    if (q == r || d->rs[q].flagged || !gt_predictor_same_group(d->pred, q, r) || gt_predictor_updates(d->pred, q) == 0)
      continue;
    double mine = gt_predictor_with(d->pred, q, &tel[r]), theirs = gt_predictor_with(d->pred, q, &tel[q]);
    if (!(mine > 0) || !(theirs > 0)) continue;
    d->peer[n++] = log(fmax(tel[r].compute_s, 1e-9) / mine) - log(fmax(tel[q].compute_s, 1e-9) / theirs);
  }
  if (n > 0) return median(d->sorted, d->peer, n);
  return log(fmax(tel[r].compute_s, 1e-9) / fmax(gt_predictor_peers(d->pred, &tel[r]), 1e-9)) - job;
}

/* Flags or clears rank r on its job-corrected residual z; true when a
 * verdict was written to *ev. `peers`: whether it is slow against its
 * peers as well (peers_verdict), which a flag needs. */
static bool judge(gt_detector *d, int r, int step, double z, double z_peers, bool peers, double sig,
                  gt_detector_event *ev) {
  const gt_detector_config *c = &d->cfg;
  rank_state *s = &d->rs[r];
  double *recent = d->recent + (size_t)r * 2 * c->k;
  int w = 2 * c->k;
  recent[d->steps % w] = s->flagged ? z_peers : z;
  /* The evidence counts the median of the last three residuals, not this
   * one: under a loaded machine (sanitizers, two cores for four ranks) a
   * rank slowed by 1.5x has single steps under even 1.125x, which would
   * start its evidence over (a flag 13 steps late was seen), and a healthy
   * rank has single spikes. A step back under theta but still over half
   * of it holds the count rather than ending the run. */
  double three[3] = {z, recent[(d->steps + w - 1) % w], recent[(d->steps + w - 2) % w]};
  double zm = s->flagged ? z : median(d->sorted, three, 3);
  if (zm > log1p(c->theta))
    s->over++;
  else if (!(s->over > 0 && zm > log1p(c->theta / 2)))
    s->over = 0;
  s->cusum = fmax(0, s->cusum + z / sig - c->cusum_drift);
  if (!s->flagged && s->over >= c->k && s->cusum > c->cusum_limit && peers) {
    s->flagged = true;
    s->since = 0;
    *ev = (gt_detector_event){.rank = r, .step = step, .onset = step - s->over + 1, .flagged = true, .ratio = exp(zm)};
    return true;
  }
  /* Cleared when the median of its last 2k residuals against its peers
   * (against_peers_now) is back under theta/2: a rank that is still slow,
   * only less than the noise at times, stays flagged, and a recovered one
   * clears about k steps after. Its own fit is learning its slow speed meanwhile, so it
   * cannot say when the rank is back. */
  if (s->flagged && ++s->since >= 2 * c->k) {
    double m = median(d->sorted, recent, 2 * c->k);
    if (m < log1p(c->theta / 2)) {
      *s = (rank_state){0};
      *ev = (gt_detector_event){.rank = r, .step = step, .onset = step, .flagged = false, .ratio = exp(m)};
      return true;
    }
  }
  return false;
}

gt_status gt_detector_step(gt_detector *d, int step, const gt_step_telemetry *tel, gt_detector_event *events,
                           int *nevents) {
  const gt_detector_config *c = &d->cfg;
  int n = c->nranks;
  *nevents = 0;
  for (int r = 0; r < n; r++) {
    if (tel[r].rank != r)
      return gt_errorf(GT_EINVAL, "detector: telemetry entry %d is rank %d's; pass them in rank order", r, tel[r].rank);
    double pred = gt_predictor_own(d->pred, &tel[r]);
    d->e[r] = log(fmax(tel[r].compute_s, 1e-9) / fmax(pred, 1e-9));
  }
  double job = median(d->sorted, d->e, n), sig = sigma(d);
  bool judging = d->steps >= c->warmup;
  for (int r = 0; r < n; r++) {
    rank_state *s = &d->rs[r];
    /* What the job shares is the median over the ranks; with two, the
     * median is their mean, which would halve a slow rank's excess (x1.5
     * would read x1.22, under theta): a rank is judged against the other
     * rank instead, which sees what a machine-wide slowdown does as well. */
    double base = n == 2 ? d->e[1 - r] : job;
    double z = d->e[r] - base, z_peers = 0;
    if (s->flagged) z_peers = against_peers_now(d, tel, r, base);
    /* The excess over peers is asked only of a rank building evidence, or
     * about to (this step over half of theta): it costs a pass over the
     * ranks. Every step writes its slot, so the ring holds the last k. */
    bool ask = judging && !s->flagged && (s->over > 0 || z > log1p(c->theta / 2));
    d->vs_peers[(size_t)r * c->k + d->steps % c->k] = ask ? excess_over_peers(d, tel, r, z, base) : NAN;
    bool peers = !judging || s->flagged || s->over + 1 < c->k || (ask && peers_verdict(d, r) > log1p(c->theta));
    if (judging && judge(d, r, step, z, z_peers, peers, sig, &events[*nevents])) (*nevents)++;
    /* A rank building evidence (above theta this step, or its CUSUM half
     * way to the limit) does not teach the predictor its slow speed
     * (it would explain the shift away before it is confirmed), and the
     * first step, whose one-time costs (allocations, first touches, the
     * peers' start) no later step has, teaches nothing. Once flagged, the
     * rank's own fit follows its slow speed, which the job's next
     * decisions need; the noise is only ever taken from healthy ranks. */
    if (d->steps == 0 || (!s->flagged && (s->over > 0 || s->cusum > c->cusum_limit / 2))) continue;
    if (!s->flagged && d->steps >= c->warmup / 2) add_noise(d, z);
    gt_step_telemetry seen = tel[r];
    /* With two ranks the job-wide factor is half each rank's own residual:
     * fits learning relative to it follow each other's noise and drift
     * (a clean pair of ranks was flagged x1.8e7 at step 83). They learn
     * plain times; the verdict takes out what the two share all the same. */
    if (c->relative_fits && n >= 3) seen.compute_s /= exp(job);
    GT_TRY(gt_predictor_update(d->pred, &seen));
  }
  d->steps++;
  return GT_OK;
}
