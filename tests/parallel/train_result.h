/* What a training run leaves for comparison: its losses and gradient norms,
 * and its final parameters in the single-process layout, written by forked
 * ranks into memory shared with the test. */
#ifndef GIANT_TEST_TRAIN_RESULT_H
#define GIANT_TEST_TRAIN_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/engine/dist.h"
#include "giant/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"

#define TR_MAX_STEPS 32
#define TR_MAX_PARAMS 128

typedef struct train_result {
  float losses[TR_MAX_STEPS];
  double norms[TR_MAX_STEPS];
  size_t nparams;                /* floats of the single-process buffer */
  char names[TR_MAX_PARAMS][96]; /* the single-process parameter layout */
  size_t offsets[TR_MAX_PARAMS];
  int count;
  float params[];
} train_result;

/* In a forked rank: the plan pc resolves to (pc->world and pc->rank set),
 * and, with pc->layout, a client of the parent's store and the parallel
 * state built on it under the key namespace gen. Without a layout: one
 * process, no store, no dist. Failures end the rank. */
void train_rank_dist(const gt_plan_config *pc, const char *gen, gt_store **store, gt_plan *plan, gt_dist **dist);
/* The same with the communicators on backend be (NULL: host memory; a CUDA
 * backend: NCCL on its device). */
void train_rank_dist_be(const gt_plan_config *pc, const char *gen, gt_backend *be, gt_store **store, gt_plan *plan,
                        gt_dist **dist);
/* The same on a store the rank has (a layout built again in-process). */
void train_rank_dist_on(gt_store *store, const gt_plan_config *pc, const char *gen, gt_plan *plan, gt_dist **dist);

/* Micro-batch k of step s, `rows` rows of T tokens below V: rows of
 * arithmetic sequences with per-row strides, learnable, so the loss falls
 * and the gradients are far from zero. */
void train_batch_for(int s, int k, int V, int T, int rows, int32_t *in, int32_t *tg);

/* A result in shared memory; with `layout` given, its layout table copied. */
train_result *train_result_new(const train_result *layout);
/* One process: record the model's layout as the one results are written in. */
void train_result_set_layout(train_result *r, const gt_model *m);
/* Write the parameters this rank holds (p, its flat buffer) into the
 * single-process layout: split parameters by their global index, whole ones
 * by tensor-parallel rank 0 only, mirrors of tied parameters not at all. */
void train_result_write(train_result *r, const gt_model *m, const float *p, int tp_rank);
/* The same for floats [lo, hi) of the flat buffer only (a ZeRO-1 shard of
 * optimizer state, at p[lo..hi)). */
void train_result_write_range(train_result *r, const gt_model *m, const float *p, size_t lo, size_t hi, int tp_rank);

/* A trainer's parameters into p and its optimizer's two states (AdamW's
 * moments: the part this rank holds, all of it without ZeRO-1) into m and
 * v, read wherever they live. */
void train_result_write_trainer(train_result *p, train_result *m, train_result *v, gt_trainer *tr, int tp_rank);

typedef struct train_diff {
  double loss, param, norm; /* largest relative differences */
  const char *worst;        /* the parameter tensor with the largest */
} train_diff;

/* Losses and norms relative to the reference; each parameter tensor's
 * largest difference over its largest magnitude (so entries near zero are
 * judged by the scale of their tensor). The key bias of attention (the
 * middle C of each qkv.b) is left out: its gradient is exactly zero
 * (softmax ignores a shift of every score by q.b), and Adam turns rounding
 * noise in it into full-size steps, differently for every summation order. */
train_diff train_result_compare(const train_result *ref, const train_result *r, int steps, int C);

#endif
