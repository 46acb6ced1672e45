/* A pipeline schedule on a clock: each rank runs its steps in order; a
 * forward of model stage vs waits for the forward of vs-1, a backward for
 * the backward of vs+1 (and its own forward). Ranks are swept until none
 * can move, so a schedule that would deadlock is reported, not hung on. */
#include <math.h>
#include <stdlib.h>

#include "giant/engine/pipeline.h"

void gt_pp_sim_free(gt_pp_sim_result *r) {
  if (!r) return;
  free(r->busy);
  free(r->peak_in_flight);
  free(r->peak_act_bytes);
  r->busy = NULL;
  r->peak_in_flight = NULL;
  r->peak_act_bytes = NULL;
}

static bool bad_time(double t) { return !(t >= 0) || !isfinite(t); }

gt_status gt_pp_simulate(const gt_pp_schedule *s, const gt_pp_costs *c, gt_pp_sim_result *out) {
  *out = (gt_pp_sim_result){0};
  if (!s || !c || !c->fwd || !c->bwd || s->stages < 1 || s->micro_batches < 1 || s->chunks < 1)
    return gt_errorf(GT_EINVAL, "pipeline simulation needs a schedule and forward and backward times");
  int p = s->stages, m = s->micro_batches, V = p * s->chunks;
  for (int i = 0; i < V; i++)
    if (bad_time(c->fwd[i]) || bad_time(c->bwd[i]) || (c->act_bytes && bad_time(c->act_bytes[i])))
      return gt_errorf(GT_EINVAL, "pipeline stage %d has a negative or non-finite time or size (%g, %g)", i, c->fwd[i],
                       c->bwd[i]);
  if (bad_time(c->p2p_seconds)) return gt_errorf(GT_EINVAL, "p2p time must be finite and >= 0, got %g", c->p2p_seconds);
  for (int r = 0; r < p; r++)
    for (int i = 0; i < s->nsteps[r]; i++) {
      gt_pp_step t = s->steps[r][i];
      if (t.micro_batch < 0 || t.micro_batch >= m || t.chunk < 0 || t.chunk >= s->chunks)
        return gt_errorf(GT_EINVAL, "pipeline rank %d step %d is out of range (micro-batch %d, chunk %d)", r, i,
                         t.micro_batch, t.chunk);
    }

  /* done[(mb*V + vs)*2 + op]: when that step ended, or -1. */
  size_t nd = (size_t)m * V * 2;
  double *done = malloc(nd * sizeof *done), *clock = calloc((size_t)p, sizeof *clock);
  int *next = calloc((size_t)p, sizeof *next), *live = calloc((size_t)p, sizeof *live);
  double *bytes = calloc((size_t)p, sizeof *bytes);
  out->stages = p;
  out->busy = calloc((size_t)p, sizeof *out->busy);
  out->peak_in_flight = calloc((size_t)p, sizeof *out->peak_in_flight);
  out->peak_act_bytes = calloc((size_t)p, sizeof *out->peak_act_bytes);
  gt_status st = GT_OK;
  if (!done || !clock || !next || !live || !bytes || !out->busy || !out->peak_in_flight || !out->peak_act_bytes) {
    st = gt_errorf(GT_ENOMEM, "out of host memory simulating a pipeline schedule");
    goto end;
  }
  for (size_t i = 0; i < nd; i++) done[i] = -1;

  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; r++)
      while (next[r] < s->nsteps[r]) {
        gt_pp_step t = s->steps[r][next[r]];
        int vs = gt_pp_virtual_stage(s, r, t.chunk);
        bool fwd = t.op == GT_PP_FORWARD;
        size_t at = ((size_t)t.micro_batch * V + vs) * 2;
        double start = clock[r];
        if (!fwd && done[at] < 0) break; /* its own forward has not run */
        int dep = fwd ? vs - 1 : vs + 1;
        if (dep >= 0 && dep < V) {
          double ready = done[((size_t)t.micro_batch * V + dep) * 2 + (fwd ? 0 : 1)];
          if (ready < 0) break;
          if (dep % p != r) ready += c->p2p_seconds;
          if (ready > start) start = ready;
        }
        double len = fwd ? c->fwd[vs] : c->bwd[vs];
        clock[r] = start + len;
        done[at + (fwd ? 0 : 1)] = clock[r];
        out->busy[r] += len;
        live[r] += fwd ? 1 : -1;
        bytes[r] += (fwd ? 1 : -1) * (c->act_bytes ? c->act_bytes[vs] : 0);
        if (live[r] > out->peak_in_flight[r]) out->peak_in_flight[r] = live[r];
        if (bytes[r] > out->peak_act_bytes[r]) out->peak_act_bytes[r] = bytes[r];
        next[r]++;
        moved = true;
      }
  }
  for (int r = 0; r < p; r++)
    if (next[r] < s->nsteps[r]) {
      gt_pp_step t = s->steps[r][next[r]];
      st = gt_errorf(GT_ESTATE,
                     "pipeline schedule deadlocks: rank %d waits forever at step %d (%s of micro-batch %d, "
                     "chunk %d)",
                     r, next[r], t.op == GT_PP_FORWARD ? "forward" : "backward", t.micro_batch, t.chunk);
      goto end;
    }
  double sum = 0;
  for (int r = 0; r < p; r++) {
    if (clock[r] > out->makespan) out->makespan = clock[r];
    sum += out->busy[r];
  }
  out->bubble = out->makespan > 0 ? 1 - sum / (p * out->makespan) : 0;
end:
  free(done);
  free(clock);
  free(next);
  free(live);
  free(bytes);
  if (st != GT_OK) gt_pp_sim_free(out);
  return st;
}
