/* Pipeline schedules: each rank's ordered list of forward and backward
 * steps, and the check that a list set is complete and cannot deadlock. */
#include <stdlib.h>
#include <string.h>

#include "giant/engine/pipeline.h"

gt_status gt_pp_parse(const char *name, gt_pp_kind *kind) {
  static const char *names[] = {"gpipe", "1f1b", "interleaved"};
  for (int k = 0; name && k < 3; k++)
    if (strcmp(name, names[k]) == 0) {
      *kind = (gt_pp_kind)k;
      return GT_OK;
    }
  return gt_errorf(GT_EINVAL, "unknown pipeline schedule '%s': use gpipe, 1f1b or interleaved", name ? name : "(null)");
}

const char *gt_pp_name(gt_pp_kind kind) {
  switch (kind) {
    case GT_PP_GPIPE: return "gpipe";
    case GT_PP_1F1B: return "1f1b";
    case GT_PP_INTERLEAVED: return "interleaved";
  }
  return "?";
}

int gt_pp_virtual_stage(const gt_pp_schedule *s, int rank, int chunk) { return rank + chunk * s->stages; }

static void put(gt_pp_step *list, int *n, gt_pp_op op, int mb, int chunk) {
  list[(*n)++] = (gt_pp_step){.op = op, .micro_batch = mb, .chunk = chunk};
}

static int min_int(int a, int b) { return a < b ? a : b; }

static void build_gpipe(int m, gt_pp_step *list) {
  int n = 0;
  for (int i = 0; i < m; i++) put(list, &n, GT_PP_FORWARD, i, 0);
  for (int i = 0; i < m; i++) put(list, &n, GT_PP_BACKWARD, i, 0);
}

static void build_1f1b(int p, int m, int r, gt_pp_step *list) {
  int n = 0, warmup = min_int(p - r - 1, m);
  for (int i = 0; i < warmup; i++) put(list, &n, GT_PP_FORWARD, i, 0);
  for (int i = 0; i < m - warmup; i++) {
    put(list, &n, GT_PP_FORWARD, warmup + i, 0);
    put(list, &n, GT_PP_BACKWARD, i, 0);
  }
  for (int i = m - warmup; i < m; i++) put(list, &n, GT_PP_BACKWARD, i, 0);
}

/* Megatron-LM's interleaved order: the k-th forward (or backward) unit of a
 * rank is micro-batch group k / (p*v), which holds micro-batches in blocks
 * of p; inside a group the p micro-batches go through chunk 0, then chunk
 * 1, ... (backwards through the chunks in reverse). */
static void unit(int p, int v, int k, bool forward, int *mb, int *chunk) {
  int in_group = k % (p * v);
  *mb = (k / (p * v)) * p + k % p;
  *chunk = forward ? in_group / p : v - 1 - in_group / p;
}

static void build_interleaved(int p, int m, int v, int r, gt_pp_step *list) {
  int total = m * v, n = 0, mb, c;
  /* Megatron runs every forward first when m == p: the steady phase would
   * have nothing to overlap. */
  int warmup = m == p ? total : min_int((p - r - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; k++) {
    unit(p, v, k, true, &mb, &c);
    put(list, &n, GT_PP_FORWARD, mb, c);
  }
  for (int k = 0; k < total - warmup; k++) {
    unit(p, v, warmup + k, true, &mb, &c);
    put(list, &n, GT_PP_FORWARD, mb, c);
    unit(p, v, k, false, &mb, &c);
    put(list, &n, GT_PP_BACKWARD, mb, c);
  }
  for (int k = total - warmup; k < total; k++) {
    unit(p, v, k, false, &mb, &c);
    put(list, &n, GT_PP_BACKWARD, mb, c);
  }
}

gt_status gt_pp_schedule_build(gt_pp_kind kind, int stages, int micro_batches, int chunks, gt_pp_schedule **out) {
  *out = NULL;
  if (kind != GT_PP_GPIPE && kind != GT_PP_1F1B && kind != GT_PP_INTERLEAVED)
    return gt_errorf(GT_EINVAL, "unknown pipeline schedule kind %d", (int)kind);
  if (stages < 1 || micro_batches < 1 || chunks < 1)
    return gt_errorf(GT_EINVAL, "pipeline schedule needs stages, micro-batches and chunks >= 1 (got %d, %d, %d)",
                     stages, micro_batches, chunks);
  if (chunks > 1 && kind != GT_PP_INTERLEAVED)
    return gt_errorf(GT_EINVAL, "%d chunks per rank needs the interleaved schedule, not %s", chunks, gt_pp_name(kind));
  if (kind == GT_PP_INTERLEAVED && micro_batches % stages != 0)
    return gt_errorf(GT_EINVAL,
                     "the interleaved schedule needs micro-batches (%d) to be a multiple of the "
                     "pipeline stages (%d): use %d or %d micro-batches",
                     micro_batches, stages, micro_batches / stages * stages, (micro_batches / stages + 1) * stages);
  if ((long long)micro_batches * chunks > (1 << 24) || (long long)stages * chunks > (1 << 24))
    return gt_errorf(GT_EINVAL, "pipeline schedule too large (%d stages, %d micro-batches, %d chunks)", stages,
                     micro_batches, chunks);
  gt_pp_schedule *s = calloc(1, sizeof *s);
  if (!s) return gt_errorf(GT_ENOMEM, "out of host memory for a pipeline schedule");
  *s = (gt_pp_schedule){.kind = kind, .stages = stages, .micro_batches = micro_batches, .chunks = chunks};
  s->nsteps = calloc((size_t)stages, sizeof *s->nsteps);
  s->steps = calloc((size_t)stages, sizeof *s->steps);
  if (!s->nsteps || !s->steps) goto oom;
  int n = 2 * micro_batches * chunks;
  for (int r = 0; r < stages; r++) {
    s->steps[r] = malloc((size_t)n * sizeof **s->steps);
    if (!s->steps[r]) goto oom;
    s->nsteps[r] = n;
    if (kind == GT_PP_GPIPE)
      build_gpipe(micro_batches, s->steps[r]);
    else if (kind == GT_PP_1F1B || chunks == 1)
      build_1f1b(stages, micro_batches, r, s->steps[r]);
    else
      build_interleaved(stages, micro_batches, chunks, r, s->steps[r]);
  }
  *out = s;
  return GT_OK;
oom:
  gt_pp_schedule_free(s);
  return gt_errorf(GT_ENOMEM, "out of host memory for a pipeline schedule");
}

void gt_pp_schedule_free(gt_pp_schedule *s) {
  if (!s) return;
  for (int r = 0; s->steps && r < s->stages; r++) free(s->steps[r]);
  free(s->steps);
  free(s->nsteps);
  free(s);
}

gt_status gt_pp_schedule_check(const gt_pp_schedule *s) {
  if (!s || s->stages < 1 || s->micro_batches < 1 || s->chunks < 1 || !s->nsteps || !s->steps)
    return gt_errorf(GT_EINVAL, "not a pipeline schedule (NULL or empty)");
  int p = s->stages, m = s->micro_batches, v = s->chunks;
  /* seen[(mb * v + chunk) * p + rank]: 1 after the forward, 2 after the backward. */
  unsigned char *seen = calloc((size_t)m * v * p, 1);
  if (!seen) return gt_errorf(GT_ENOMEM, "out of host memory checking a pipeline schedule");
  gt_status st = GT_OK;
  for (int r = 0; r < p && st == GT_OK; r++) {
    if (s->nsteps[r] != 2 * m * v) {
      st = gt_errorf(GT_EINVAL, "pipeline rank %d has %d steps, expected %d (2 x %d micro-batches x %d chunks)", r,
                     s->nsteps[r], 2 * m * v, m, v);
      break;
    }
    for (int i = 0; i < s->nsteps[r]; i++) {
      gt_pp_step t = s->steps[r][i];
      if (t.micro_batch < 0 || t.micro_batch >= m || t.chunk < 0 || t.chunk >= v ||
          (t.op != GT_PP_FORWARD && t.op != GT_PP_BACKWARD)) {
        st = gt_errorf(GT_EINVAL, "pipeline rank %d step %d is out of range (op %d, micro-batch %d, chunk %d)", r, i,
                       (int)t.op, t.micro_batch, t.chunk);
        break;
      }
      unsigned char *x = &seen[((size_t)t.micro_batch * v + t.chunk) * p + r];
      const char *what = t.op == GT_PP_FORWARD ? "forward" : "backward";
      int vs = gt_pp_virtual_stage(s, r, t.chunk);
      if (t.op == GT_PP_FORWARD ? *x != 0 : *x != 1) {
        st = gt_errorf(GT_EINVAL, "pipeline rank %d step %d: %s of micro-batch %d stage %d %s", r, i, what,
                       t.micro_batch, vs,
                       t.op == GT_PP_FORWARD || *x == 2 ? "appears twice" : "comes before its forward");
        break;
      }
      *x = (unsigned char)(*x + 1);
    }
  }
  free(seen);
  /* Counts and uniqueness make every (micro-batch, chunk) appear exactly
   * once per rank; running it on a unit clock finds deadlocks. */
  if (st == GT_OK) {
    int V = p * v;
    double *one = malloc((size_t)V * sizeof *one);
    if (!one) return gt_errorf(GT_ENOMEM, "out of host memory checking a pipeline schedule");
    for (int i = 0; i < V; i++) one[i] = 1;
    gt_pp_sim_result res;
    st = gt_pp_simulate(s, &(gt_pp_costs){.fwd = one, .bwd = one}, &res);
    if (st == GT_OK) gt_pp_sim_free(&res);
    free(one);
  }
  return st;
}
