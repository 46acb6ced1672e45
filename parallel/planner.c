/* The planner's inputs and its two cuts: layers into pipeline stages, and a
 * batch into data-parallel shares. */
#include <math.h>
#include <stdlib.h>

#include "core/arena.h"
#include "giant/layers.h"
#include "parallel/planner.h"

/* The bytes the arena sets aside for a request, as the model's estimate
 * counts them. */
static double block_bytes(double bytes) { return (double)gt_arena_block_size((size_t)bytes); }

gt_status gt_planner_layers_from_model(const gt_model *m, int B, int T, gt_planner_layer **out, int *n) {
  *out = NULL;
  *n = 0;
  if (!m || B < 1 || T < 1) return gt_errorf(GT_EINVAL, "planner layers need a model and B, T >= 1 (got %d, %d)", B, T);
  int L = gt_model_num_layers(m);
  if (L < 1) return gt_errorf(GT_EINVAL, "the model has no layers to plan");
  gt_planner_layer *ls = calloc((size_t)L, sizeof *ls);
  if (!ls) return gt_errorf(GT_ENOMEM, "out of host memory for %d planner layers", L);
  double tokens = (double)B * T;
  for (int i = 0; i < L; i++) {
    const gt_layer *ly = gt_model_layer(m, i);
    gt_planner_layer *x = &ls[i];
    x->flops = ly->type->flops ? ly->type->flops(ly, B, T) : 0;
    x->out_bytes = tokens * ly->out_dim * sizeof(float);
    /* The output stays alive too: it is the next layer's saved input. Each
     * is one request of the arena (gt_acts_create). */
    size_t saved = ly->type->acts_floats ? ly->type->acts_floats(ly, B, T) : 0;
    size_t attn = ly->type->attn_floats ? ly->type->attn_floats(ly, B, T) : 0;
    x->act_bytes = (saved ? block_bytes((double)saved * sizeof(float)) : 0) + block_bytes(x->out_bytes);
    x->attn_bytes = (double)(attn < saved ? attn : saved) * sizeof(float);
    for (int k = 0; k < ly->nparams; k++) {
      const gt_param *p = gt_layer_param_info(ly, k);
      if (!p) continue;
      double bytes = (double)p->numel * sizeof(float);
      if (p->tied_to < 0) x->param_bytes += bytes;
      x->window_bytes += bytes;
      if (p->matmul_only) x->matmul_bytes += bytes;
    }
    /* Megatron's block: one all-reduce after attention, one after the MLP. */
    if (ly->type == &gt_block_layer) {
      x->tp_allreduces = 2;
      x->tp_allreduce_bytes = tokens * ly->in_dim * sizeof(float);
    }
  }
  *out = ls;
  *n = L;
  return GT_OK;
}

gt_status gt_planner_model_extras(const gt_model *m, int B, int T, gt_planner_extras *out) {
  *out = (gt_planner_extras){0};
  if (!m || B < 1 || T < 1) return gt_errorf(GT_EINVAL, "planner extras need a model and B, T >= 1 (got %d, %d)", B, T);
  double BT = (double)B * T;
  size_t widest = 1, scratch = 0;
  for (int i = 0; i < gt_model_num_layers(m); i++) {
    const gt_layer *ly = gt_model_layer(m, i);
    if ((size_t)ly->in_dim > widest) widest = (size_t)ly->in_dim;
    if ((size_t)ly->out_dim > widest) widest = (size_t)ly->out_dim;
    size_t sc = ly->type->scratch_floats ? ly->type->scratch_floats(ly, B, T) : 0;
    if (sc > scratch) scratch = sc;
  }
  int np = gt_model_num_params(m);
  out->act_bytes = 2 * block_bytes(BT * (double)widest * sizeof(float)) + 2 * block_bytes(BT * sizeof(int32_t));
  out->scratch_bytes = block_bytes((double)(scratch ? scratch : 1) * sizeof(float));
  out->norm_bytes = block_bytes((double)(np ? np : 1) * sizeof(double));
  out->comm_bytes = block_bytes(64 * sizeof(float));
  return GT_OK;
}

static bool finite_nonneg(double x) { return x >= 0 && isfinite(x); }

/* Strictly better by more than rounding: equal cuts keep the earlier one. */
static bool better(double a, double b) { return a < b && (isinf(b) || b - a > 1e-12 * fabs(b)); }

typedef struct cut_ctx {
  const gt_planner_stages *st;
  const double *F, *P, *A; /* prefix sums of flops, params, activations */
  double state_factor;
  bool overflow; /* minimise the largest memory overflow instead of time */
} cut_ctx;

static double stage_mem(const cut_ctx *c, int s, int i, int j) {
  double inflight = c->st->in_flight ? c->st->in_flight[s] : 1;
  double state = c->st->offloaded ? 0 : c->state_factor * (c->P[j] - c->P[i]);
  return state + inflight * (c->A[j] - c->A[i]);
}

static double stage_cost(const cut_ctx *c, int s, int i, int j) {
  double budget = c->st->mem_bytes ? c->st->mem_bytes[s] : INFINITY;
  double over = stage_mem(c, s, i, j) - budget;
  if (c->overflow) return over;
  if (over > 0) return INFINITY;
  return (c->F[j] - c->F[i]) / (c->st->speed ? c->st->speed[s] : 1);
}

/* best[s*(L+1) + j]: the smallest largest cost of s+1 stages over layers
 * [0, j); arg holds where the last of them starts. */
static double run_cuts(const cut_ctx *c, int L, double *best, int *arg, int *first) {
  int n = c->st->n;
  for (int j = 1; j <= L; j++) best[j] = stage_cost(c, 0, 0, j);
  for (int s = 1; s < n; s++)
    for (int j = s + 1; j <= L - (n - 1 - s); j++) {
      double b = INFINITY;
      int a = s;
      for (int i = s; i < j; i++) {
        double prev = best[(size_t)(s - 1) * (L + 1) + i], cost = stage_cost(c, s, i, j);
        double v = prev > cost ? prev : cost;
        if (i == s || better(v, b)) {
          b = v;
          a = i;
        }
      }
      best[(size_t)s * (L + 1) + j] = b;
      arg[(size_t)s * (L + 1) + j] = a;
    }
  first[n] = L;
  for (int s = n - 1; s > 0; s--) first[s] = arg[(size_t)s * (L + 1) + first[s + 1]];
  first[0] = 0;
  return best[(size_t)(n - 1) * (L + 1) + L];
}

gt_status gt_planner_partition(const gt_planner_layer *layers, int L, const gt_planner_stages *st, int *first) {
  if (!layers || !st || !first || L < 1 || st->n < 1)
    return gt_errorf(GT_EINVAL, "partition needs layers, stages and an output (got %d layers, %d stages)", L,
                     st ? st->n : 0);
  int n = st->n;
  if (n > L)
    return gt_errorf(GT_EINVAL, "cannot cut %d layers into %d non-empty pipeline stages: use at most %d stages", L, n,
                     L);
  for (int s = 0; s < n; s++) {
    if (st->speed && !(st->speed[s] > 0 && isfinite(st->speed[s])))
      return gt_errorf(GT_EINVAL, "stage %d has speed %g: speeds must be positive", s, st->speed[s]);
    if (st->mem_bytes && (isnan(st->mem_bytes[s]) || st->mem_bytes[s] < 0))
      return gt_errorf(GT_EINVAL, "stage %d has memory budget %g: budgets must be >= 0", s, st->mem_bytes[s]);
    if (st->in_flight && !finite_nonneg(st->in_flight[s]))
      return gt_errorf(GT_EINVAL, "stage %d holds %g micro-batches: must be >= 0", s, st->in_flight[s]);
  }
  if (st->state_factor < 0 || !isfinite(st->state_factor))
    return gt_errorf(GT_EINVAL, "state factor %g must be >= 0", st->state_factor);
  for (int i = 0; i < L; i++)
    if (!finite_nonneg(layers[i].flops) || !finite_nonneg(layers[i].param_bytes) || !finite_nonneg(layers[i].act_bytes))
      return gt_errorf(GT_EINVAL, "layer %d has a negative or non-finite cost (flops %g, params %g, activations %g)", i,
                       layers[i].flops, layers[i].param_bytes, layers[i].act_bytes);

  size_t cells = (size_t)n * (L + 1);
  double *F = calloc((size_t)3 * (L + 1), sizeof *F), *best = malloc(cells * sizeof *best);
  int *arg = calloc(cells, sizeof *arg);
  if (!F || !best || !arg) {
    free(F);
    free(best);
    free(arg);
    return gt_errorf(GT_ENOMEM, "out of host memory partitioning %d layers", L);
  }
  double *P = F + (L + 1), *A = P + (L + 1);
  for (int i = 0; i < L; i++) {
    F[i + 1] = F[i] + layers[i].flops;
    P[i + 1] = P[i] + layers[i].param_bytes;
    A[i + 1] = A[i] + layers[i].act_bytes;
  }
  cut_ctx c = {.st = st, .F = F, .P = P, .A = A, .state_factor = st->state_factor > 0 ? st->state_factor : 4};
  gt_status status = GT_OK;
  if (!isfinite(run_cuts(&c, L, best, arg, first))) {
    c.overflow = true;
    double over = run_cuts(&c, L, best, arg, first);
    int worst = 0;
    for (int s = 1; s < n; s++)
      if (stage_cost(&c, s, first[s], first[s + 1]) > stage_cost(&c, worst, first[worst], first[worst + 1])) worst = s;
    status =
        gt_errorf(GT_ENOMEM,
                  "%d layers do not fit in %d pipeline stages: the closest cut still needs %.1f MiB more on "
                  "stage %d (layers %d-%d, %.1f MiB of a %.1f MiB budget); add memory, stages or tensor "
                  "parallelism",
                  L, n, over / (1 << 20), worst, first[worst], first[worst + 1] - 1,
                  stage_mem(&c, worst, first[worst], first[worst + 1]) / (1 << 20), st->mem_bytes[worst] / (1 << 20));
  }
  free(F);
  free(best);
  free(arg);
  return status;
}

gt_status gt_planner_batch_split(int rows, int n, const double *speed, int *share) {
  if (n < 1 || !share) return gt_errorf(GT_EINVAL, "batch split needs at least one replica (got %d)", n);
  if (rows < n)
    return gt_errorf(GT_EINVAL,
                     "cannot split %d rows over %d replicas with at least one each: use a batch of >= %d rows", rows, n,
                     n);
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double s = speed ? speed[i] : 1;
    if (!(s > 0 && isfinite(s))) return gt_errorf(GT_EINVAL, "replica %d has speed %g: speeds must be positive", i, s);
    sum += s;
  }
  int given = 0;
  for (int i = 0; i < n; i++) {
    share[i] = (int)floor(rows * (speed ? speed[i] : 1) / sum);
    given += share[i];
  }
  /* Largest remainder; `given` can only fall short (floor), never exceed. */
  while (given < rows) {
    int pick = 0;
    double most = -1;
    for (int i = 0; i < n; i++) {
      double rem = rows * (speed ? speed[i] : 1) / sum - share[i];
      if (rem > most + 1e-12) {
        most = rem;
        pick = i;
      }
    }
    share[pick]++;
    given++;
  }
  /* Every replica needs a row; a very slow one takes it from the largest. */
  for (int i = 0; i < n; i++)
    if (share[i] == 0) {
      int big = 0;
      for (int k = 1; k < n; k++)
        if (share[k] > share[big]) big = k;
      share[big]--;
      share[i] = 1;
    }
  return GT_OK;
}
