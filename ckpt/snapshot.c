/* Taking a snapshot: this rank's state copied to host buffers, and the
 * description of what it writes. Replicas hold the same bytes, so of every
 * group of ranks holding one slice exactly one writes it, chosen by the
 * parameter's index so that the writing is spread over the group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "core/data/loader_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

void ck_param_tensor(const char *param, char *out, size_t cap) { snprintf(out, cap, "param/%s", param); }

void ck_state_tensor(gt_optim_kind kind, int k, const char *param, char *out, size_t cap) {
  const char *what = kind == GT_OPTIM_SGD ? "sgd.momentum" : k == 0 ? "adamw.m" : "adamw.v";
  snprintf(out, cap, "%s/%s", what, param);
}

/* The parameters whose bytes a checkpoint holds: their owners. A tied
 * parameter shares its owner's storage and a mirror (a tied parameter's
 * copy on another pipeline stage) its owner's values. */
static bool stored(const gt_param *p) { return p->tied_to < 0 && p->mirror_of < 0 && p->local && p->numel > 0; }

/* Which of the ranks holding the same bytes writes parameter i: the writer
 * slots are the data-parallel replicas (dp_copies), times the tensor-
 * parallel ranks for a parameter every one of them holds whole. Each
 * parameter goes to the slot with the fewest floats so far, in parameter
 * order, so every rank of a group computes the same answer and the bytes
 * are spread evenly (dealing parameters out in turn would hand one replica
 * every weight matrix and the other every bias, since they alternate). */
static gt_status assign_writers(const gt_plan *plan, gt_model *m, bool dp_copies, int *slot) {
  int tp = plan->layout.tp, dp = dp_copies ? plan->layout.dp : 1;
  double *whole = calloc((size_t)(tp * dp), sizeof *whole), *split = calloc((size_t)dp, sizeof *split);
  if (!whole || !split) {
    free(whole);
    free(split);
    return gt_errorf(GT_ENOMEM, "out of memory assigning checkpoint writers");
  }
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    slot[i] = -1;
    if (!stored(p)) continue;
    bool is_whole = p->split_dim < 0;
    double *load = is_whole ? whole : split;
    int n = is_whole ? tp * dp : dp, best = 0;
    for (int k = 1; k < n; k++)
      if (load[k] < load[best]) best = k;
    load[best] += (double)p->numel;
    slot[i] = best;
  }
  free(whole);
  free(split);
  return GT_OK;
}

/* Whether this rank writes the bytes of parameter i (or of its optimizer
 * state, which ZeRO-1 does not replicate over data parallelism), as
 * assign_writers chose among the ranks that hold the same copy. */
static bool writes(const gt_plan *plan, const gt_param *p, const int *slot, int i, bool dp_copies) {
  bool whole = p->split_dim < 0;
  int tp = whole ? plan->layout.tp : 1;
  int me = (whole ? plan->me.tp : 0) + tp * (dp_copies ? plan->me.dp : 0);
  return slot[i] == me;
}

typedef struct add_ctx {
  gt_ckpt *c;
  int tensor, file;
  int which;        /* the buffer: the parameters (0) or optimizer state which - 1 */
  int64_t shift;    /* where in it the block's first element is (negative: before it) */
  uint64_t *offset; /* in the shard file */
} add_ctx;

static gt_status src_slot(gt_ckpt *c) {
  size_t n = (size_t)c->part.nslices + 1;
  int *w = realloc(c->src_buf, n * sizeof *w);
  if (w) c->src_buf = w;
  uint64_t *at = w ? realloc(c->src_at, n * sizeof *at) : NULL;
  if (at) c->src_at = at;
  ck_src *q = at ? realloc(c->src, n * sizeof *q) : NULL;
  if (q) c->src = q;
  return q ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory describing the checkpoint's slices");
}

static gt_status add_slice(void *ctx, const ck_box *box, uint64_t first) {
  add_ctx *a = ctx;
  ck_slice s = {.tensor = a->tensor, .box = *box, .file = a->file, .offset = *a->offset};
  s.length = ck_box_volume(box) * sizeof(float);
  GT_TRY(src_slot(a->c));
  a->c->src_at[a->c->part.nslices] = (uint64_t)((int64_t)first + a->shift);
  a->c->src_buf[a->c->part.nslices] = a->which;
  GT_TRY(ck_manifest_add_slice(&a->c->part, &s, NULL)); /* hashed as it is written */
  *a->offset += s.length;
  return GT_OK;
}

static gt_status add_tensor(gt_ckpt *c, const char *name, const gt_param *p, int *index) {
  return ck_manifest_add_tensor(&c->part, name, p->ndim, p->global_shape, index);
}

/* Parameter i's slices that this rank writes: the parameter, where it is
 * the writer, and the part of its optimizer state this rank holds, where it
 * is that state's writer. */
static gt_status describe_param(gt_ckpt *c, int file, int i, const int *param_slot, const int *state_slot,
                                uint64_t *offset) {
  const gt_plan *plan = &c->plan;
  const gt_param *p = gt_model_param(c->m, i);
  if (!stored(p)) return GT_OK;
  char name[CK_NAME + 32];
  ck_box blk = ck_param_box(p);
  add_ctx a = {.c = c, .file = file, .offset = offset};
  /* The optimizer holds floats [lo, hi) of the flat buffer: the part of
   * this parameter inside it, cut into boxes of the global tensor. */
  size_t lo = p->offset > c->lo ? p->offset : c->lo;
  size_t hi = p->offset + p->numel < c->hi ? p->offset + p->numel : c->hi;
  if (gt_model_params_sharded(c->m)) {
    /* ZeRO-3: the parameters are held as the state is, by the same
     * range, from the model's shard. */
    if (lo < hi && writes(plan, p, state_slot, i, false)) {
      ck_param_tensor(p->name, name, sizeof name);
      GT_TRY(add_tensor(c, name, p, &a.tensor));
      a.which = 0;
      a.shift = (int64_t)p->offset - (int64_t)c->lo;
      GT_TRY(ck_range_boxes(&blk, lo - p->offset, hi - p->offset, add_slice, &a));
    }
  } else if (writes(plan, p, param_slot, i, true)) {
    ck_param_tensor(p->name, name, sizeof name);
    GT_TRY(add_tensor(c, name, p, &a.tensor));
    a.which = 0;
    a.shift = (int64_t)p->offset;
    GT_TRY(add_slice(&a, &blk, 0));
  }
  if (lo >= hi || !writes(plan, p, state_slot, i, !plan->zero1)) return GT_OK;
  gt_optim_kind kind = gt_optimizer_get_config(c->opt)->kind;
  for (int k = 0; k < c->nstates; k++) {
    ck_state_tensor(kind, k, p->name, name, sizeof name);
    GT_TRY(add_tensor(c, name, p, &a.tensor));
    a.which = k + 1;
    a.shift = (int64_t)p->offset - (int64_t)c->lo;
    GT_TRY(ck_range_boxes(&blk, lo - p->offset, hi - p->offset, add_slice, &a));
  }
  return GT_OK;
}

static gt_status describe_slices(gt_ckpt *c, int file) {
  const gt_plan *plan = &c->plan;
  int np = gt_model_num_params(c->m);
  /* Parameters are held by every replica; optimizer state too, unless
   * ZeRO-1 shards it. */
  int *param_slot = malloc((size_t)(np ? np : 1) * sizeof *param_slot);
  int *state_slot = malloc((size_t)(np ? np : 1) * sizeof *state_slot);
  gt_status st = param_slot && state_slot ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory describing a checkpoint");
  if (st == GT_OK) st = assign_writers(plan, c->m, true, param_slot);
  if (st == GT_OK) st = assign_writers(plan, c->m, !plan->zero1, state_slot);
  uint64_t offset = 0;
  for (int i = 0; i < np && st == GT_OK; i++) st = describe_param(c, file, i, param_slot, state_slot, &offset);
  free(param_slot);
  free(state_slot);
  return st;
}

static gt_status trainer_blob(gt_ckpt *c) {
  ck_buf b = {0};
  ck_put_u32(&b, 1);
  ck_put_u64(&b, (uint64_t)gt_trainer_step_index(c->tr));
  ck_put_u32(&b, (uint32_t)gt_optimizer_get_config(c->opt)->kind);
  ck_put_u64(&b, (uint64_t)gt_optimizer_steps(c->opt));
  ck_put_u64(&b, gt_model_get_config(c->m)->seed);
  const gt_plan *p = &c->plan;
  uint32_t plan[] = {(uint32_t)p->layout.dp, (uint32_t)p->layout.tp, (uint32_t)p->layout.pp, (uint32_t)p->zero,
                     p->seq_parallel,        (uint32_t)p->schedule,  (uint32_t)p->chunks,    (uint32_t)p->world};
  for (size_t i = 0; i < sizeof plan / sizeof *plan; i++) ck_put_u32(&b, plan[i]);
  gt_status s =
      b.oom ? gt_errorf(GT_ENOMEM, "out of memory") : ck_manifest_add_blob(&c->part, "giant/trainer", b.p, b.len);
  ck_buf_free(&b);
  return s;
}

/* One per data-parallel replica, from its first tensor- and pipeline-
 * parallel rank (the others read the same stream). */
static gt_status loader_blob(gt_ckpt *c) {
  if (!c->loader || c->plan.me.tp || c->plan.me.pp) return GT_OK;
  const gt_loader_config *lc = gt_loader_get_config(c->loader);
  ck_buf b = {0};
  ck_put_u32(&b, 2);
  ck_put_str(&b, lc->path);
  ck_put_u64(&b, gt_loader_rows_per_epoch(c->loader));
  ck_put_u32(&b, (uint32_t)lc->B);
  ck_put_u32(&b, (uint32_t)lc->T_max);
  ck_put_u32(&b, (uint32_t)lc->mode);
  ck_put_u64(&b, lc->seed);
  ck_put_u32(&b, (uint32_t)lc->shard);
  ck_put_u32(&b, (uint32_t)lc->nshards);
  ck_put_u64(&b, gt_loader_position(c->loader));
  ck_put_u64(&b, gt_loader_next_row(c->loader));
  ck_put_u32(&b, (uint32_t)lc->offset); /* version 2: the replica's share */
  ck_put_u32(&b, (uint32_t)lc->total);
  char name[64];
  snprintf(name, sizeof name, "giant/loader/dp%d", c->plan.me.dp);
  gt_status s = b.oom ? gt_errorf(GT_ENOMEM, "out of memory") : ck_manifest_add_blob(&c->part, name, b.p, b.len);
  ck_buf_free(&b);
  return s;
}

/* Copies to the host only the floats of the slices this rank writes (the
 * other replicas copy the rest): runs of slices adjacent in a buffer, or
 * apart by a parameter's alignment padding, go in one download. On the CPU
 * backend "device" memory is host memory and the writer thread copies with
 * memcpy, not through the backend's stream. Optimizer state kept on disk
 * is copied whole to the snapshot's file, on disk. Then says where each
 * slice's bytes are (c->src). */
gt_status ck_snapshot_copy(gt_ckpt *c) {
  /* The backend of the live buffers: the host's when they are offloaded. */
  gt_backend *be = gt_model_state_backend(c->m);
  const float *base[3] = {0};
  for (int w = 0; w <= c->nstates; w++) {
    float *host = w ? c->state[w - 1] : c->params;
    /* Sharded (ZeRO-3), the parameters' slices are placed from the
     * shard's start, as the state's are. */
    const float *dev = w                               ? gt_optimizer_state(c->opt, w - 1)
                       : gt_model_params_sharded(c->m) ? gt_model_param_at(c->m, c->lo)
                                                       : gt_model_params(c->m);
    base[w] = host;
    if (w && c->state_fd >= 0) {
      /* Every state at once, when this rank writes any of it. */
      bool writes_state = false;
      for (int i = 0; i < c->part.nslices && !writes_state; i++) writes_state = c->src_buf[i] > 0;
      if (w == 1 && writes_state) GT_TRY(gt_optimizer_copy_state_out(c->opt, c->state_fd));
      continue;
    }
    if (c->deferred_copy && c->cfg.sync) {
      /* A synchronous save holds the training thread until it is written,
       * so on the CPU backend it writes from the live buffers: no copy. */
      base[w] = dev;
      continue;
    }
    size_t a = 0, b = 0; /* the run [a, b), in floats from the buffer's start */
    for (int i = 0; i <= c->part.nslices; i++) {
      bool last = i == c->part.nslices;
      if (!last && c->src_buf[i] != w) continue;
      size_t at = last ? 0 : (size_t)c->src_at[i], n = last ? 0 : (size_t)(c->part.slices[i].length / sizeof(float));
      if (!last && b > a && at >= b && at - b <= 64) {
        b = at + n;
        continue;
      }
      if (b > a && c->deferred_copy)
        memcpy(host + a, dev + a, (b - a) * sizeof(float));
      else if (b > a)
        GT_TRY(gt_backend_download(be, host + a, dev + a, (b - a) * sizeof(float)));
      a = at;
      b = at + n;
    }
  }
  for (int i = 0; i < c->part.nslices; i++) {
    int w = c->src_buf[i];
    if (base[w])
      c->src[i] = (ck_src){.p = base[w] + c->src_at[i]};
    else /* state w - 1 in the snapshot's file, laid out as the state's own */
      c->src[i] =
          (ck_src){.fd = c->state_fd, .at = ((uint64_t)(w - 1) * (c->hi - c->lo) + c->src_at[i]) * sizeof(float)};
  }
  return GT_OK;
}

gt_status ck_snapshot(gt_ckpt *c) {
  ck_manifest_free(&c->part);
  c->part.step = gt_trainer_step_index(c->tr);
  c->part.chunk = c->cfg.chunk_bytes;
  char file[64];
  int index;
  snprintf(file, sizeof file, "shard-%05d.bin", c->plan.rank);
  GT_TRY(ck_manifest_add_file(&c->part, file, &index));
  GT_TRY(describe_slices(c, index));
  if (!c->deferred_copy) GT_TRY(ck_snapshot_copy(c));
  if (c->part.nslices == 0) c->part.nfiles = 0; /* nothing of this rank's to write */
  if (c->plan.rank == 0) GT_TRY(trainer_blob(c));
  GT_TRY(loader_blob(c));
  for (int i = 0; i < c->user.nblobs; i++) {
    char name[CK_NAME + 8];
    snprintf(name, sizeof name, "user/%s", c->user.blobs[i].name);
    GT_TRY(ck_manifest_add_blob(&c->part, name, c->user.blobs[i].bytes, c->user.blobs[i].len));
  }
  return GT_OK;
}
