/* The iteration-time predictor: per-rank recursive least squares with
 * forgetting over (tokens, seq_sq * layers, 1), seeded from the cost
 * model. */
#include "giant/engine/predictor.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NF 3          /* features */
#define CLIP_AFTER 10 /* updates before errors are clipped */

typedef struct rank_fit {
  double theta[NF]; /* coefficients, in scaled units (below) */
  double P[NF][NF]; /* their covariance, up to the noise variance */
  int updates;
  int layers; /* of the workload it last learnt from */
} rank_fit;

struct gt_predictor {
  gt_predictor_config cfg;
  /* The fit works in units of a step: feature i is raw_i * coef_i / unit,
   * with coef the prior's (1 for a term the prior calls free) and unit the
   * first step's measured seconds, so a coefficient of 1 is the prior and
   * every feature is about 1 whatever the model size or device. That keeps
   * the covariance, and the prior's weight against the data, the same on
   * a 5 ms CPU step and a 5 s GPU step. */
  double coef[NF];
  double unit;
  bool unit_set;
  double trace0; /* the prior's covariance trace, which forgetting never exceeds */
  rank_fit *fit;
  int *groups; /* NULL: peers by layers held */
};

static void features(const gt_predictor *p, const gt_step_telemetry *w, double x[NF]) {
  double raw[NF] = {(double)w->tokens, w->seq_sq * w->layers, 1.0};
  for (int i = 0; i < NF; i++) x[i] = raw[i] * p->coef[i] / p->unit;
}

static double dot(const double *a, const double *b) {
  double s = 0;
  for (int i = 0; i < NF; i++) s += a[i] * b[i];
  return s;
}

gt_status gt_predictor_create(const gt_predictor_config *cfg, gt_predictor **out) {
  *out = NULL;
  const gt_predictor_prior *pr = &cfg->prior;
  if (cfg->nranks < 1) return gt_errorf(GT_EINVAL, "predictor: nranks must be >= 1, got %d", cfg->nranks);
  if (!(pr->a >= 0 && pr->b >= 0 && pr->c >= 0) || pr->a + pr->b + pr->c <= 0)
    return gt_errorf(GT_EINVAL,
                     "predictor: the prior (a %g, b %g, c %g) must be >= 0 and not all 0; take it "
                     "from gt_predictor_prior_from_model",
                     pr->a, pr->b, pr->c);
  if (cfg->prior_trust != 0 && !(cfg->prior_trust > 1))
    return gt_errorf(GT_EINVAL, "predictor: prior_trust is a factor > 1, got %g", cfg->prior_trust);
  if (cfg->clip < 0) return gt_errorf(GT_EINVAL, "predictor: clip must be >= 0, got %g", cfg->clip);
  if (cfg->forget < 0 || cfg->forget > 1)
    return gt_errorf(GT_EINVAL, "predictor: forget must be in (0, 1], got %g", cfg->forget);
  gt_predictor *p = calloc(1, sizeof *p);
  if (p) p->fit = calloc((size_t)cfg->nranks, sizeof *p->fit);
  if (p && cfg->groups && (p->groups = malloc((size_t)cfg->nranks * sizeof *p->groups)))
    memcpy(p->groups, cfg->groups, (size_t)cfg->nranks * sizeof *p->groups);
  if (!p || !p->fit || (cfg->groups && !p->groups)) {
    gt_predictor_destroy(p);
    return gt_errorf(GT_ENOMEM, "out of memory creating a predictor for %d ranks", cfg->nranks);
  }
  p->cfg = *cfg;
  p->cfg.groups = NULL; /* p->groups is the copy */
  if (p->cfg.forget == 0) p->cfg.forget = 0.98;
  if (p->cfg.prior_trust == 0) p->cfg.prior_trust = 3;
  if (p->cfg.clip == 0) p->cfg.clip = 0.5;
  double coef[NF] = {pr->a, pr->b, pr->c};
  for (int i = 0; i < NF; i++) p->coef[i] = coef[i] > 0 ? coef[i] : 1.0;
  p->unit = 1; /* until the first step: the prior in seconds */
  double var = (p->cfg.prior_trust - 1) * (p->cfg.prior_trust - 1);
  p->trace0 = NF * var;
  for (int r = 0; r < cfg->nranks; r++) {
    rank_fit *f = &p->fit[r];
    for (int i = 0; i < NF; i++) {
      f->theta[i] = coef[i] > 0 ? 1.0 : 0.0;
      f->P[i][i] = var;
    }
  }
  *out = p;
  return GT_OK;
}

void gt_predictor_destroy(gt_predictor *p) {
  if (!p) return;
  free(p->fit);
  free(p->groups);
  free(p);
}

gt_status gt_predictor_prior_from_model(const gt_model *m, int layers, double peak_flops, gt_predictor_prior *out) {
  if (!(peak_flops > 0)) return gt_errorf(GT_EINVAL, "predictor: the peak FLOP/s must be > 0, got %g", peak_flops);
  if (layers < 1) return gt_errorf(GT_EINVAL, "predictor: layers must be >= 1, got %d", layers);
  /* F(T) = alpha*T + beta*T^2 for one row: two lengths give both. */
  double f1 = gt_model_flops(m, 1, 1), f2 = gt_model_flops(m, 1, 2);
  double beta = (f2 - 2 * f1) / 2, alpha = f1 - beta;
  if (!(alpha > 0) || beta < 0)
    return gt_errorf(GT_EINVAL,
                     "predictor: the model's FLOP counts (%g at T=1, %g at T=2) are not a*T + b*T^2; "
                     "build the model first",
                     f1, f2);
  *out = (gt_predictor_prior){.a = 3 * alpha / peak_flops, .b = 3 * beta / (peak_flops * layers), .c = 0};
  return GT_OK;
}

static double predict(const gt_predictor *p, int fit, const gt_step_telemetry *w) {
  double x[NF];
  features(p, w, x);
  return p->unit * dot(p->fit[fit].theta, x);
}

static bool rank_ok(const gt_predictor *p, int rank) { return rank >= 0 && rank < p->cfg.nranks; }

double gt_predictor_own(const gt_predictor *p, const gt_step_telemetry *w) {
  return rank_ok(p, w->rank) ? predict(p, w->rank, w) : NAN;
}

double gt_predictor_with(const gt_predictor *p, int fit, const gt_step_telemetry *w) {
  return rank_ok(p, fit) && p->fit[fit].updates > 0 ? predict(p, fit, w) : NAN;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gt_predictor_peers(const gt_predictor *p, const gt_step_telemetry *w) {
  if (!rank_ok(p, w->rank) || p->cfg.nranks < 2) return NAN;
  double v[p->cfg.nranks];
  int n = 0;
  /* Peers doing the same kind of work (the same pipeline stage) when there
   * are any: a stage's fit also carries the costs the features do not name
   * (the LM head of the last stage). */
  for (int r = 0; r < p->cfg.nranks; r++)
    if (r != w->rank && p->fit[r].updates > 0 && gt_predictor_same_group(p, r, w->rank) &&
        (p->groups || p->fit[r].layers == w->layers))
      v[n++] = predict(p, r, w);
  if (n == 0)
    for (int r = 0; r < p->cfg.nranks; r++)
      if (r != w->rank) v[n++] = predict(p, r, w);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

gt_status gt_predictor_update(gt_predictor *p, const gt_step_telemetry *w) {
  if (!rank_ok(p, w->rank))
    return gt_errorf(GT_EINVAL, "predictor: rank %d is outside the job's %d ranks", w->rank, p->cfg.nranks);
  if (!(w->compute_s >= 0) || !isfinite(w->compute_s))
    return gt_errorf(GT_EINVAL, "predictor: rank %d's compute time %g is not a time", w->rank, w->compute_s);
  rank_fit *f = &p->fit[w->rank];
  if (!p->unit_set && w->compute_s > 0) { /* before any fit has moved: predictions are unchanged by it */
    p->unit = w->compute_s;
    p->unit_set = true;
  }
  double x[NF], Px[NF], lambda = p->cfg.forget, y = w->compute_s / p->unit;
  features(p, w, x);
  for (int i = 0; i < NF; i++) Px[i] = dot(f->P[i], x);
  double pred = dot(f->theta, x), denom = lambda + dot(x, Px), err = y - pred;
  /* Contention makes a step slower, never faster, and in bursts: once the
   * fit has left the prior behind, a step more than clip times off moves
   * it as if it were only that far, so a burst does not drag the
   * coefficients (a Huber-style update). */
  double bound = p->cfg.clip * fabs(pred);
  if (f->updates >= CLIP_AFTER && err > bound) err = bound;
  if (f->updates >= CLIP_AFTER && err < -bound) err = -bound;
  for (int i = 0; i < NF; i++) f->theta[i] += Px[i] / denom * err;
  /* Forgetting inflates P in the directions the workload does not move in
   * (a fixed sequence length leaves tokens and seq_sq in lockstep); past
   * the prior's own spread it would only wind up, so it stops there. */
  double trace = 0;
  for (int i = 0; i < NF; i++) trace += f->P[i][i] - Px[i] * Px[i] / denom;
  if (trace / lambda > p->trace0) lambda = 1;
  for (int i = 0; i < NF; i++)
    for (int j = 0; j < NF; j++) f->P[i][j] = (f->P[i][j] - Px[i] * Px[j] / denom) / lambda;
  f->updates++;
  f->layers = w->layers;
  return GT_OK;
}

int gt_predictor_updates(const gt_predictor *p, int rank) { return rank_ok(p, rank) ? p->fit[rank].updates : 0; }

bool gt_predictor_same_group(const gt_predictor *p, int a, int b) {
  return rank_ok(p, a) && rank_ok(p, b) && (!p->groups || p->groups[a] == p->groups[b]);
}
