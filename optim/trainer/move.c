/* Moving a trainer's state into another trainer of the same model whose
 * layers are cut into pipeline stages differently (a re-cut by measured
 * speed). Every rank walks the parameters in the same global order: a
 * parameter whose layer stays on its stage is copied on the rank, one
 * whose layer moves goes from the rank of the old stage to the rank of the
 * new one at the same data- and tensor-parallel coordinates, through the
 * pipeline communicator, with its optimizer state. The common order pairs
 * every send with its receive, so the transfers cannot deadlock. */
#include <stdlib.h>
#include <string.h>

#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/layer.h"
#include "giant/engine/trainer.h"
#include "core/model/model_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "optim/optimizer_engine.h"
#include "optim/trainer/trainer_engine.h"

static int stage_of(const gt_model *m, const gt_param *p) { return gt_model_layer(m, p->layer)->stage; }

/* Whether the two models hold the same parameters, and the move is one
 * this function makes: no ZeRO-1 (its shards are ranges of a stage's flat
 * buffer, which a re-cut redraws), and no tied parameter whose copy would
 * change stage. */
static gt_status check(gt_trainer *from, gt_trainer *to) {
  gt_model *a = gt_trainer_model(from), *b = gt_trainer_model(to);
  if (gt_trainer_dist(from) != gt_trainer_dist(to))
    return gt_errorf(GT_EINVAL, "moving training state: both trainers must use the same gt_dist");
  if (gt_model_num_params(a) != gt_model_num_params(b))
    return gt_errorf(GT_EINVAL, "moving training state: the models have %d and %d parameters", gt_model_num_params(a),
                     gt_model_num_params(b));
  size_t lo, hi;
  gt_optimizer *oa = gt_trainer_optimizer(from), *ob = gt_trainer_optimizer(to);
  gt_optimizer_range(oa, &lo, &hi);
  bool whole = lo == 0 && hi == gt_model_buffer_floats(a);
  gt_optimizer_range(ob, &lo, &hi);
  whole = whole && lo == 0 && hi == gt_model_buffer_floats(b);
  if (!whole)
    return gt_errorf(GT_EUNSUPPORTED,
                     "re-cutting pipeline stages with ZeRO-1 is not supported: its "
                     "optimizer shards are ranges of a stage's buffer");
  if (gt_model_offloaded(a) != gt_model_offloaded(b))
    return gt_errorf(GT_EINVAL, "moving training state: one model is offloaded and the other not");
  if (gt_optimizer_num_states(oa) != gt_optimizer_num_states(ob))
    return gt_errorf(GT_EINVAL, "moving training state: the optimizers differ");
  for (int i = 0; i < gt_model_num_params(a); i++) {
    const gt_param *p = gt_model_param(a, i), *q = gt_model_param(b, i);
    if (strcmp(p->name, q->name) || p->numel != q->numel || p->layer != q->layer)
      return gt_errorf(GT_EINVAL, "moving training state: parameter %d is %s in one model and %s in the other", i,
                       p->name, q->name);
    bool tied = p->tied_to >= 0 || p->mirror_of >= 0 || q->tied_to >= 0 || q->mirror_of >= 0;
    if (tied && stage_of(a, p) != stage_of(b, q))
      return gt_errorf(GT_EUNSUPPORTED,
                       "re-cutting pipeline stages: layer %s, which holds the tied parameter %s, "
                       "would change stage",
                       gt_model_layer(a, p->layer)->name, p->name);
  }
  return GT_OK;
}

/* The bytes of parameter i in buffer k: 0 the parameters, j + 1 the
 * optimizer's state j (which, without ZeRO-1, is laid out as the
 * parameters are). */
static float *slot(gt_trainer *t, int k, const gt_param *p) {
  float *base = k ? gt_optimizer_state(gt_trainer_optimizer(t), k - 1) : gt_model_params(gt_trainer_model(t));
  return base + p->offset;
}

/* State k of a parameter when either optimizer keeps its state on disk: it
 * goes through host memory (tmp, the parameter's size). */
static gt_status move_staged(gt_trainer *from, gt_trainer *to, int k, const gt_param *p, const gt_param *q, int me,
                             int s0, int s1, gt_comm *pp, float *tmp) {
  gt_optimizer *oa = gt_trainer_optimizer(from), *ob = gt_trainer_optimizer(to);
  gt_status s = GT_OK;
  if (s0 == s1 && p->local) {
    GT_TRY(gt_optimizer_read_state(oa, k, p->offset, p->numel, tmp));
    return gt_optimizer_write_state(ob, k, q->offset, q->numel, tmp);
  }
  if (s0 != s1 && me == s0) {
    GT_TRY(gt_optimizer_read_state(oa, k, p->offset, p->numel, tmp));
    if ((s = gt_comm_send(pp, tmp, p->numel, GT_F32, s1)) != GT_OK)
      return gt_error_context(s, "sending %s's state to pipeline rank %d", p->name, s1);
  } else if (s0 != s1 && me == s1) {
    if ((s = gt_comm_recv(pp, tmp, q->numel, GT_F32, s0)) != GT_OK)
      return gt_error_context(s, "receiving %s's state from pipeline rank %d", q->name, s0);
    return gt_optimizer_write_state(ob, k, q->offset, q->numel, tmp);
  }
  return GT_OK;
}

/* With tmp: state moves through it (move_staged). */
static gt_status move_all(gt_trainer *from, gt_trainer *to, float *tmp) {
  gt_model *a = gt_trainer_model(from), *b = gt_trainer_model(to);
  gt_dist *dist = gt_trainer_dist(from);
  gt_comm *pp = dist ? gt_grid_comm(gt_dist_grid(dist), GT_GRID_PP) : NULL;
  int me = dist ? gt_dist_plan(dist)->me.pp : 0, nbuf = 1 + gt_optimizer_num_states(gt_trainer_optimizer(from));
  /* Where the state is: the device, or the host when offloaded. */
  gt_backend *be = gt_model_state_backend(b);
  gt_status s = GT_OK;
  gt_model_params_changed(b);
  for (int i = 0; i < gt_model_num_params(a); i++) {
    const gt_param *p = gt_model_param(a, i), *q = gt_model_param(b, i);
    if (p->tied_to >= 0 || p->numel == 0) continue; /* shares its owner's storage */
    int s0 = stage_of(a, p), s1 = stage_of(b, q);
    for (int k = 0; k < nbuf; k++) {
      size_t bytes = p->numel * sizeof(float);
      if (k && tmp)
        GT_TRY(move_staged(from, to, k - 1, p, q, me, s0, s1, pp, tmp));
      else if (s0 == s1 && p->local)
        GT_TRY(gt_backend_memcpy(be, slot(to, k, q), slot(from, k, p), bytes, GT_COPY_D2D, NULL));
      else if (s0 != s1 && me == s0 && (s = gt_comm_send(pp, slot(from, k, p), p->numel, GT_F32, s1)) != GT_OK)
        return gt_error_context(s, "sending %s to pipeline rank %d", p->name, s1);
      else if (s0 != s1 && me == s1 && (s = gt_comm_recv(pp, slot(to, k, q), q->numel, GT_F32, s0)) != GT_OK)
        return gt_error_context(s, "receiving %s from pipeline rank %d", q->name, s0);
    }
  }
  GT_TRY(gt_stream_sync(be, NULL));
  gt_optimizer_set_steps(gt_trainer_optimizer(to), gt_optimizer_steps(gt_trainer_optimizer(from)));
  gt_trainer_set_step_index(to, gt_trainer_step_index(from));
  return GT_OK;
}

gt_status gt_trainer_move_state(gt_trainer *from, gt_trainer *to) {
  if (gt_model_params_sharded(gt_trainer_model(from)) || gt_model_params_sharded(gt_trainer_model(to)))
    return gt_errorf(GT_EUNSUPPORTED,
                     "moving the training state in process (a reshape) is not supported with ZeRO-3 (sharded "
                     "parameters): use ZeRO-2, or restart from the last checkpoint");
  GT_TRY(check(from, to));
  bool staged = gt_optimizer_on_disk(gt_trainer_optimizer(from)) || gt_optimizer_on_disk(gt_trainer_optimizer(to));
  float *tmp = NULL;
  if (staged) {
    size_t most = 1;
    gt_model *a = gt_trainer_model(from);
    for (int i = 0; i < gt_model_num_params(a); i++)
      if (gt_model_param(a, i)->numel > most) most = gt_model_param(a, i)->numel;
    if (!(tmp = malloc(most * sizeof(float))))
      return gt_errorf(GT_ENOMEM, "out of memory moving optimizer state kept on disk (%zu floats)", most);
  }
  gt_status st = move_all(from, to, tmp);
  free(tmp);
  return st;
}
