/* See train_result.h. */
#include "train_result.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localkit/ranks.h"
#include "core/model/model_engine.h"
#include "giant/engine/dist.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

enum { MAX_FLOATS = 400000 };

void train_rank_dist(const gt_plan_config *pc, const char *gen, gt_store **store, gt_plan *plan, gt_dist **dist) {
  train_rank_dist_be(pc, gen, NULL, store, plan, dist);
}

static void dist_on(gt_store *store, const gt_plan_config *pc, const char *gen, gt_backend *be, gt_plan *plan,
                    gt_dist **dist) {
  CHECK_OK(gt_plan_resolve(pc, plan));
  /* Shorter than the library's 60 s and 300 s, so a broken test fails
   * soon: ranks forked together form their groups within 0.1-0.3 s of each
   * other on busy cores, and an operation waits at most a small step of
   * the slowest rank (milliseconds): 20 s is > 60x. */
  gt_dist_config dc = {.plan = *plan,
                       .store = store,
                       .generation = gen,
                       .comm = {.backend = be,
                                .secret = HARNESS_SECRET,
                                .host = "127.0.0.1",
                                .init_timeout_ms = 20000,
                                .op_timeout_ms = 20000}};
  CHECK_OK(gt_dist_create(&dc, dist));
}

void train_rank_dist_be(const gt_plan_config *pc, const char *gen, gt_backend *be, gt_store **store, gt_plan *plan,
                        gt_dist **dist) {
  *store = NULL;
  *dist = NULL;
  *plan = (gt_plan){.layout = {1, 1, 1}, .world = 1};
  if (!pc->layout) return;
  *store = harness_store();
  dist_on(*store, pc, gen, be, plan, dist);
}

void train_rank_dist_on(gt_store *store, const gt_plan_config *pc, const char *gen, gt_plan *plan, gt_dist **dist) {
  dist_on(store, pc, gen, NULL, plan, dist);
}

void train_batch_for(int s, int k, int V, int T, int rows, int32_t *in, int32_t *tg) {
  for (int r = 0; r < rows; r++) {
    int stride = 1 + (r + k + s) % 5, start = (s * 13 + k * 5 + r * 7) % V;
    for (int t = 0; t < T; t++) {
      in[r * T + t] = (start + t * stride) % V;
      tg[r * T + t] = (start + (t + 1) * stride) % V;
    }
  }
}

train_result *train_result_new(const train_result *layout) {
  train_result *r = harness_shared(sizeof(train_result) + MAX_FLOATS * sizeof(float));
  if (layout) memcpy(r, layout, offsetof(train_result, params));
  return r;
}

void train_result_set_layout(train_result *r, const gt_model *m) {
  r->nparams = gt_model_buffer_floats(m);
  CHECK(r->nparams <= MAX_FLOATS);
  r->count = 0;
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *q = gt_model_param(m, i);
    if (q->tied_to >= 0) continue;
    CHECK(r->count < TR_MAX_PARAMS);
    snprintf(r->names[r->count], sizeof r->names[0], "%s", q->name);
    r->offsets[r->count++] = q->offset;
  }
}

static long offset_of(const train_result *r, const char *name) {
  for (int i = 0; i < r->count; i++)
    if (!strcmp(r->names[i], name)) return (long)r->offsets[i];
  return -1;
}

void train_result_write(train_result *r, const gt_model *m, const float *p, int tp_rank) {
  train_result_write_range(r, m, p, 0, gt_model_buffer_floats(m), tp_rank);
}

void train_result_write_range(train_result *r, const gt_model *m, const float *p, size_t lo, size_t hi, int tp_rank) {
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *q = gt_model_param(m, i);
    if (q->tied_to >= 0 || !q->local || q->mirror_of >= 0 || (q->split_dim < 0 && tp_rank != 0)) continue;
    long base = offset_of(r, q->name);
    CHECK(base >= 0);
    for (size_t j = 0; j < q->numel; j++)
      if (q->offset + j >= lo && q->offset + j < hi)
        r->params[(size_t)base + gt_param_global_index(q, j)] = p[q->offset + j];
  }
}

void train_result_write_trainer(train_result *p, train_result *m, train_result *v, gt_trainer *tr, int tp_rank) {
  gt_model *model = gt_trainer_model(tr);
  gt_optimizer *opt = gt_trainer_optimizer(tr);
  size_t n = gt_model_buffer_floats(model), lo, hi;
  float *buf = calloc(n ? n : 1, sizeof *buf);
  CHECK(buf);
  CHECK_OK(gt_model_get_params(model, buf, n));
  train_result_write(p, model, buf, tp_rank);
  gt_optimizer_range(opt, &lo, &hi);
  train_result *st[2] = {m, v};
  for (int k = 0; k < gt_optimizer_num_states(opt); k++) {
    CHECK_OK(gt_optimizer_read_state(opt, k, 0, hi - lo, buf + lo));
    train_result_write_range(st[k], model, buf, lo, hi, tp_rank);
  }
  free(buf);
}

static bool is_key_bias(const train_result *ref, size_t i, int C) {
  for (int k = 0; k < ref->count; k++) {
    size_t len = strlen(ref->names[k]);
    if (len > 6 && !strcmp(ref->names[k] + len - 6, ".qkv.b") && i >= ref->offsets[k] + (size_t)C &&
        i < ref->offsets[k] + 2 * (size_t)C)
      return true;
  }
  return false;
}

train_diff train_result_compare(const train_result *ref, const train_result *r, int steps, int C) {
  train_diff d = {.worst = "none"};
  for (int s = 0; s < steps; s++) {
    double x = fabs((double)r->losses[s] - ref->losses[s]) / fabs((double)ref->losses[s]);
    double y = ref->norms[s] > 0 ? fabs(r->norms[s] - ref->norms[s]) / ref->norms[s] : 0;
    d.loss = x > d.loss ? x : d.loss;
    d.norm = y > d.norm ? y : d.norm;
  }
  for (int k = 0; k < ref->count; k++) {
    size_t lo = ref->offsets[k], hi = k + 1 < ref->count ? ref->offsets[k + 1] : ref->nparams;
    double diff = 0, scale = 1e-30;
    for (size_t i = lo; i < hi; i++) {
      if (is_key_bias(ref, i, C)) continue;
      double e = fabs((double)r->params[i] - ref->params[i]);
      diff = e > diff ? e : diff;
      scale = fabs((double)ref->params[i]) > scale ? fabs((double)ref->params[i]) : scale;
    }
    if (diff / scale > d.param) {
      d.param = diff / scale;
      d.worst = ref->names[k];
    }
  }
  return d;
}
