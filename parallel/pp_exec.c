/* The pipeline executor: walks this rank's list of schedule steps, moving
 * activations forward and gradients backward between stages.
 *
 * One communicator per link and direction, each with its own progress
 * thread, on which this rank only sends or only receives (pp_links.h):
 * sends are started and left in flight (the schedules are deadlock-free
 * when sends do not wait for their receivers), and each direction's
 * receives are posted two schedule steps ahead, so the data of the next
 * transfer lands while this step computes and the wait at a step is only
 * for data its peer has not produced yet. A (micro-batch, chunk)'s
 * activations and received input are taken from the model's arena at its
 * forward (the input when its receive is posted) and given back after its
 * backward, so the memory a schedule holds is what it keeps in flight:
 * with 1F1B at most the stage count, with GPipe every micro-batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/log.h"
#include "giant/engine/plan.h"
#include "parallel/pp_exec.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/engine/pipeline.h"
#include "parallel/dist_engine.h"
#include "parallel/pp_links.h"

/* Receives posted per direction, the one a step waits for included. */
#define PP_AHEAD 2

struct gt_pp_exec {
  gt_dist *d;
  gt_model *m;
  gt_pp_schedule *sched;
  int P, r, V, M, S;
  gt_pp_links links;
  gt_comm *tied;
  gt_acts **acts;           /* [M * V] */
  float **in;               /* [M * V]: the activation each forward received */
  float *grad[PP_AHEAD];    /* the output gradients backwards receive, in turn */
  gt_comm_req **rreq;       /* [steps]: each step's posted receive */
  int next_post[2];         /* by direction: the first step whose receive is not posted yet */
  int ahead[2];             /* ... receives posted and not yet waited for */
  int bwd_posts, bwd_waits; /* backward receives posted and waited for this run: their grad buffers */
  size_t in_floats;         /* room for the widest activation between stages */
  gt_comm_req **sends;      /* forward sends in flight (their buffers outlive the step's forwards) */
  int nsends;
  gt_comm_req **held_req; /* backward sends whose activations wait for them */
  int *held_slot, nheld;
  float *scalar;
  double run_seconds, busy_seconds; /* the last run */
  double busy_fwd;                  /* ... of busy_seconds, in forwards */
  double wait_prev, wait_next;      /* ... blocked receiving from the previous and the next pipeline rank */
};

static int rows_of(const gt_pp_exec *e, const gt_batch *b) {
  int N = b->B * b->T;
  const gt_model_parallel *mp = gt_model_get_parallel(e->m);
  return mp->seq_parallel && mp->tp && mp->tp->size > 1 ? N / mp->tp->size : N;
}

/* Floats that cross the boundary after stage vs (its last layer's output). */
static size_t boundary(const gt_pp_exec *e, int vs, const gt_batch *b) {
  int lo, hi;
  gt_model_stage_layers(e->m, vs, &lo, &hi);
  return (size_t)rows_of(e, b) * (size_t)gt_model_layer(e->m, hi)->out_dim;
}

/* Gives a (micro-batch, chunk)'s memory back to the arena. */
static void release(gt_pp_exec *e, int slot) {
  gt_acts_destroy(e->acts[slot]);
  e->acts[slot] = NULL;
  if (e->in[slot]) gt_arena_free(gt_model_arena(e->m), e->in[slot]);
  e->in[slot] = NULL;
}

/* Gives back the activations whose backward sends have finished (all of
 * them, waiting, when `all`). */
static gt_status reap(gt_pp_exec *e, bool all) {
  gt_status first = GT_OK;
  for (int i = 0; i < e->nheld;) {
    bool done = true;
    gt_status s = all ? gt_comm_wait(e->held_req[i], -1) : gt_comm_test(e->held_req[i], &done);
    if (!done) {
      i++;
      continue;
    }
    if (s != GT_OK && first == GT_OK) first = s;
    int slot = e->held_slot[i];
    e->held_req[i] = e->held_req[--e->nheld];
    e->held_slot[i] = e->held_slot[e->nheld];
    release(e, slot);
  }
  return first;
}

/* The direction a step receives in, or -1: a forward's input from the
 * previous stage, a backward's output gradient from the next. */
static int recv_dir(const gt_pp_exec *e, const gt_pp_step *st) {
  int vs = gt_pp_virtual_stage(e->sched, e->r, st->chunk);
  if (st->op == GT_PP_FORWARD) return vs > 0 ? GT_PP_DIR_FWD : -1;
  return vs < e->S - 1 ? GT_PP_DIR_BWD : -1;
}

/* Posts receives in direction dir until PP_AHEAD are waiting or the
 * schedule has no more. In schedule order, as the peer sends them. */
static gt_status post_receives(gt_pp_exec *e, int dir, const gt_batch *batches) {
  const gt_pp_step *steps = e->sched->steps[e->r];
  int n = e->sched->nsteps[e->r];
  while (e->ahead[dir] < PP_AHEAD) {
    int i = e->next_post[dir];
    while (i < n && recv_dir(e, &steps[i]) != dir) i++;
    e->next_post[dir] = i + 1;
    if (i >= n) return GT_OK;
    if (!e->links.recv[dir])
      return gt_errorf(GT_ESTATE, "the schedule receives at step %d on stage rank %d, which has no link to receive on",
                       i, e->r);
    const gt_pp_step *st = &steps[i];
    int vs = gt_pp_virtual_stage(e->sched, e->r, st->chunk), slot = st->micro_batch * e->V + st->chunk;
    const gt_batch *b = &batches[st->micro_batch];
    float *buf;
    size_t count;
    if (dir == GT_PP_DIR_FWD) {
      if (e->in[slot])
        return gt_errorf(GT_ESTATE, "schedule runs the forward of micro-batch %d twice", st->micro_batch);
      GT_TRY(gt_arena_alloc_as(gt_model_arena(e->m), GT_MEM_ACTIVATIONS, e->in_floats * sizeof(float),
                               (void **)&e->in[slot]));
      buf = e->in[slot];
      count = boundary(e, vs - 1, b);
    } else {
      /* The buffer of the receive PP_AHEAD posts back: its backward ran. */
      buf = e->grad[e->bwd_posts++ % PP_AHEAD];
      count = boundary(e, vs, b);
    }
    GT_TRY(gt_comm_recv_start(e->links.recv[dir], buf, count, GT_F32, GT_PP_LINK_SENDER, &e->rreq[i]));
    e->ahead[dir]++;
  }
  return GT_OK;
}

/* Waits for step i's posted receive; the time goes to the peer's waits. */
static gt_status wait_receive(gt_pp_exec *e, int i, int dir) {
  double w0 = gt_now();
  gt_status s = gt_comm_wait(e->rreq[i], -1);
  e->rreq[i] = NULL;
  e->ahead[dir]--;
  *(dir == GT_PP_DIR_FWD ? &e->wait_prev : &e->wait_next) += gt_now() - w0;
  return s;
}

/* A run given up with receives still posted: their peers may never send,
 * so the links are aborted (here and at the peers, which fail at once
 * rather than at their timeout) and the requests collected. */
static void cancel_receives(gt_pp_exec *e) {
  int n = e->sched ? e->sched->nsteps[e->r] : 0;
  bool pending = false;
  for (int i = 0; i < n; i++) pending = pending || e->rreq[i];
  if (!pending) return;
  gt_pp_links_abort(&e->links);
  for (int i = 0; i < n; i++) {
    if (e->rreq[i]) gt_comm_wait(e->rreq[i], -1);
    e->rreq[i] = NULL;
  }
  e->ahead[0] = e->ahead[1] = 0;
}

void gt_pp_exec_destroy(gt_pp_exec *e) {
  if (!e) return;
  for (int i = 0; i < e->nsends; i++) gt_comm_wait(e->sends[i], -1);
  if (e->held_req) reap(e, true);
  if (e->rreq) cancel_receives(e);
  gt_arena *ar = gt_model_arena(e->m);
  for (int i = 0; e->acts && i < e->M * e->V; i++) release(e, i);
  for (int k = 0; k < PP_AHEAD; k++)
    if (e->grad[k]) gt_arena_free(ar, e->grad[k]);
  if (e->scalar) gt_arena_free(ar, e->scalar);
  gt_pp_links_destroy(&e->links);
  gt_comm_destroy(e->tied);
  gt_pp_schedule_free(e->sched);
  free(e->acts);
  free(e->in);
  free(e->sends);
  free(e->rreq);
  free(e->held_req);
  free(e->held_slot);
  free(e);
}

gt_status gt_pp_exec_create(gt_dist *d, gt_model *m, int micro_batches, gt_pp_exec **out) {
  *out = NULL;
  const gt_plan *plan = gt_dist_plan(d);
  gt_pp_exec *e = calloc(1, sizeof *e);
  if (!e) return gt_errorf(GT_ENOMEM, "out of memory creating the pipeline executor");
  e->d = d;
  e->m = m;
  e->P = plan->layout.pp;
  e->r = plan->me.pp;
  e->V = plan->chunks;
  e->M = micro_batches;
  e->S = e->P * e->V;
  gt_status s = gt_pp_schedule_build(plan->schedule, e->P, e->M, e->V, &e->sched);
  if (s == GT_OK && gt_model_num_pipeline_stages(m) != e->S)
    s = gt_errorf(GT_EINVAL, "the model has %d pipeline stages, the plan %d", gt_model_num_pipeline_stages(m), e->S);
  /* The two directions, and the pair of ranks (first and last stage, same
   * data- and tensor-parallel place) that share the tied token table. */
  gt_comm *pp = gt_grid_comm(gt_dist_grid(d), GT_GRID_PP), *world = gt_grid_world(gt_dist_grid(d));
  /* Keys unique to this generation and this pipeline group. */
  int group = plan->me.dp * plan->layout.tp + plan->me.tp, inst = gt_dist_next_instance(d);
  char links[160], tied[160];
  snprintf(links, sizeof links, "%s/pp-link/%d/%d", gt_dist_generation(d), inst, group);
  snprintf(tied, sizeof tied, "%s/pp-tied/%d", gt_dist_generation(d), inst);
  /* Interleaved chunks make a ring: the last rank feeds the first's next chunk. */
  if (s == GT_OK) s = gt_pp_links_create(pp, e->r, e->P, e->V > 1, links, &e->links);
  bool end = e->r == 0 || e->r == e->P - 1;
  if (s == GT_OK) s = gt_comm_split(world, end ? group : -1, e->r, tied, &e->tied);
  const gt_model_config *mc = gt_model_get_config(m);
  size_t BT = (size_t)mc->B_max * (size_t)mc->T_max, widest = 1;
  /* Only a stage's last layer crosses to the next stage: its width, not a
   * wider layer inside a stage (an LM head's vocabulary), sizes the input
   * and gradient buffers, PP_AHEAD of which are posted ahead. */
  for (int vs = 0; s == GT_OK && vs < e->S - 1; vs++) {
    int lo, hi;
    gt_model_stage_layers(m, vs, &lo, &hi);
    size_t w = (size_t)gt_model_layer(m, hi)->out_dim;
    widest = w > widest ? w : widest;
  }
  e->acts = calloc((size_t)(e->M * e->V), sizeof *e->acts);
  e->in = calloc((size_t)(e->M * e->V), sizeof *e->in);
  e->sends = calloc((size_t)(2 * e->M * e->V + 1), sizeof *e->sends);
  e->rreq = e->sched ? calloc((size_t)e->sched->nsteps[e->r] + 1, sizeof *e->rreq) : NULL;
  e->held_req = calloc((size_t)(e->M * e->V + 1), sizeof *e->held_req);
  e->held_slot = calloc((size_t)(e->M * e->V + 1), sizeof *e->held_slot);
  if (s == GT_OK && (!e->acts || !e->in || !e->sends || !e->rreq || !e->held_req || !e->held_slot))
    s = gt_errorf(GT_ENOMEM, "out of memory");
  gt_arena *ar = gt_model_arena(m);
  e->in_floats = BT * widest;
  for (int k = 0; k < PP_AHEAD && s == GT_OK; k++)
    s = gt_arena_alloc_as(ar, GT_MEM_ACTIVATIONS, BT * widest * sizeof(float), (void **)&e->grad[k]);
  if (s == GT_OK) s = gt_arena_alloc_as(ar, GT_MEM_COMM, sizeof(float), (void **)&e->scalar);
  if (s != GT_OK) {
    gt_pp_exec_destroy(e);
    return gt_error_context(s, "pipeline executor");
  }
  *out = e;
  return GT_OK;
}

static gt_status send_later(gt_pp_exec *e, const float *buf, size_t n) {
  return gt_comm_send_start(e->links.send[GT_PP_DIR_FWD], buf, n, GT_F32, GT_PP_LINK_RECEIVER, &e->sends[e->nsends++]);
}

/* Step i of this rank's schedule; its receive, if any, was posted ahead. */
static gt_status run_step(gt_pp_exec *e, int i, const gt_batch *batches, const double *weights, double *loss_sum) {
  const gt_pp_step *st = &e->sched->steps[e->r][i];
  int mb = st->micro_batch, vs = gt_pp_virtual_stage(e->sched, e->r, st->chunk), slot = mb * e->V + st->chunk;
  const gt_batch *b = &batches[mb];
  if (st->op == GT_PP_FORWARD) GT_TRY(gt_acts_create(e->m, &e->acts[slot]));
  gt_acts *a = e->acts[slot];
  if (!a) return gt_errorf(GT_ESTATE, "schedule runs the backward of micro-batch %d before its forward", mb);
  if (st->op == GT_PP_FORWARD) {
    const float *in = NULL;
    if (vs > 0) {
      GT_TRY(wait_receive(e, i, GT_PP_DIR_FWD));
      in = e->in[slot];
    }
    const float *out = NULL;
    float loss = 0;
    double t0 = gt_now();
    GT_TRY(gt_model_forward_stage(e->m, a, b, vs, in, &out, vs == e->S - 1 ? &loss : NULL));
    e->busy_fwd += gt_now() - t0;
    e->busy_seconds += gt_now() - t0;
    if (vs == e->S - 1)
      *loss_sum += weights[mb] * loss;
    else
      GT_TRY(send_later(e, out, boundary(e, vs, b)));
    return GT_OK;
  }
  const float *dout = NULL, *din = NULL;
  if (vs < e->S - 1) {
    GT_TRY(wait_receive(e, i, GT_PP_DIR_BWD));
    dout = e->grad[e->bwd_waits++ % PP_AHEAD];
  }
  int64_t valid = gt_acts_targets(a);
  float scale = valid ? (float)(weights[mb] / (double)valid) : 0.0f;
  double t0 = gt_now();
  GT_TRY(gt_model_backward_stage(e->m, a, vs, dout, scale, &din));
  e->busy_seconds += gt_now() - t0;
  if (vs == 0) {
    release(e, slot);
    return GT_OK;
  }
  /* din lives in these activations: they go back once the send is done. */
  GT_TRY(gt_comm_send_start(e->links.send[GT_PP_DIR_BWD], din, boundary(e, vs - 1, b), GT_F32, GT_PP_LINK_RECEIVER,
                            &e->held_req[e->nheld]));
  e->held_slot[e->nheld++] = slot;
  return GT_OK;
}

gt_status gt_pp_exec_run(gt_pp_exec *e, const gt_batch *batches, const double *weights, float *loss) {
  double loss_sum = 0, start = gt_now();
  gt_status s = GT_OK;
  e->nsends = 0;
  e->busy_seconds = e->busy_fwd = e->wait_prev = e->wait_next = 0;
  e->next_post[0] = e->next_post[1] = e->ahead[0] = e->ahead[1] = e->bwd_posts = e->bwd_waits = 0;
  /* What a failed run left behind: a run that succeeds gives every slot back. */
  for (int i = 0; i < e->M * e->V; i++) release(e, i);
  for (int i = 0; i < e->sched->nsteps[e->r] && s == GT_OK; i++) {
    s = reap(e, false);
    for (int dir = 0; dir < 2 && s == GT_OK; dir++) s = post_receives(e, dir, batches);
    if (s == GT_OK) s = run_step(e, i, batches, weights, &loss_sum);
    if (s != GT_OK) gt_error_context(s, "pipeline step %d on stage rank %d", i, e->r);
  }
  if (s != GT_OK) cancel_receives(e);
  gt_status r = reap(e, true);
  if (s == GT_OK) s = r;
  for (int i = 0; i < e->nsends; i++) {
    gt_status w = gt_comm_wait(e->sends[i], -1);
    if (w != GT_OK && s == GT_OK) s = w;
  }
  e->nsends = 0;
  e->run_seconds = gt_now() - start;
  if (s != GT_OK) return s;
  /* The last stage knows the loss; everyone reports it. */
  gt_backend *be = gt_model_backend(e->m);
  float mean = (float)loss_sum;
  GT_TRY(gt_backend_upload(be, e->scalar, &mean, sizeof mean));
  GT_TRY(gt_comm_broadcast(gt_grid_comm(gt_dist_grid(e->d), GT_GRID_PP), e->scalar, 1, GT_F32, e->P - 1));
  GT_TRY(gt_backend_download(be, &mean, e->scalar, sizeof mean));
  *loss = mean;
  return GT_OK;
}

gt_status gt_pp_exec_sync_tied(gt_pp_exec *e) {
  if (!e->tied || e->P < 2) return GT_OK;
  gt_model *m = e->m;
  /* In declaration order on both ends: the owner finds its parameter tied
   * by a layer it does not hold; the other end holds the mirror. */
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    if (gt_model_param_tied_across_stages(m, i)) /* held whole by this rank, also under ZeRO-2 */
      GT_TRY(gt_comm_allreduce(e->tied, gt_model_param_grad(m, i), p->numel, GT_F32, GT_COMM_SUM));
  }
  return GT_OK;
}

void gt_pp_exec_peer_waits(const gt_pp_exec *e, double *prev_seconds, double *next_seconds) {
  *prev_seconds = e->wait_prev;
  *next_seconds = e->wait_next;
}

void gt_pp_exec_timing(const gt_pp_exec *e, double *run_seconds, double *busy_seconds) {
  *run_seconds = e->run_seconds;
  *busy_seconds = e->busy_seconds;
}

void gt_pp_exec_busy_split(const gt_pp_exec *e, double *forward_seconds, double *backward_seconds) {
  *forward_seconds = e->busy_fwd;
  *backward_seconds = e->busy_seconds - e->busy_fwd;
}
