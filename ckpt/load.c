/* Loading into any layout. Each rank works out the boxes of every tensor
 * it holds (its parameters' blocks, its optimizer's range cut at
 * parameters), reads the chunks of the stored slices that hold a part of
 * them, checks each chunk's SHA-256, and copies the overlaps. Everything goes to the host buffers
 * first; the model, optimizer, trainer and loader change only once every
 * rank has read its part. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "giant/log.h"
#include "core/data/loader_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

/* One stored slice's part of a box. Its runs come in increasing order in
 * the slice, so a window of chunks, each read and checked once, moves
 * forward only; a chunk is read only when a run needs a byte of it. */
typedef struct slice_read {
  const ck_manifest *m;
  const ck_slice *s;
  ck_shard f;
  char *dst;
  unsigned char *win; /* the slice's chunks [w0, w1) */
  uint64_t size, cap, w0, w1;
  uint64_t got; /* floats copied */
} slice_read;

#define CK_READ_WINDOW (16u << 20) /* bytes read at once at most, unless a chunk is larger */

static gt_status copy_run(void *ctx, uint64_t src, uint64_t dst, uint64_t n) {
  slice_read *r = ctx;
  uint64_t a = src * sizeof(float), e = (src + n) * sizeof(float);
  while (a < e) {
    uint64_t k = a / r->size;
    if (k < r->w0 || k >= r->w1) {
      /* A window holds one chunk at least (a slice shorter than a chunk
       * is one chunk of its length). */
      uint64_t k1 = (e - 1) / r->size + 1, fit = r->cap >= r->size ? r->cap / r->size : 1;
      if (k1 > k + fit) k1 = k + fit;
      GT_TRY(ck_read_chunks(&r->f, r->m, r->s, k, k1, r->win));
      r->w0 = k;
      r->w1 = k1;
    }
    uint64_t end = r->w1 * r->size < r->s->length ? r->w1 * r->size : r->s->length;
    uint64_t take = (e < end ? e : end) - a;
    memcpy(r->dst + dst * sizeof(float) + (a - src * sizeof(float)), r->win + (a - r->w0 * r->size), (size_t)take);
    a += take;
  }
  r->got += n;
  return GT_OK;
}

static gt_status read_part(const char *dir, const ck_manifest *m, const ck_slice *s, const ck_box *want, float *dst,
                           uint64_t *bytes_read, uint64_t *got) {
  slice_read r = {.m = m, .s = s, .dst = (char *)dst, .size = m->chunk ? m->chunk : s->length};
  uint64_t fit = CK_READ_WINDOW / r.size ? CK_READ_WINDOW / r.size : 1;
  r.cap = fit * r.size < s->length ? fit * r.size : s->length;
  r.win = malloc((size_t)r.cap);
  if (!r.win) return gt_errorf(GT_ENOMEM, "out of memory reading a slice of %s", m->tensors[s->tensor].name);
  gt_status st = ck_shard_open(&r.f, dir, m, s, bytes_read);
  if (st == GT_OK) st = ck_box_runs(&s->box, want, copy_run, &r);
  ck_shard_close(&r.f);
  free(r.win);
  *got += r.got;
  return st;
}

gt_status ck_fill_box(const char *dir, const ck_manifest *m, int tensor, const ck_box *want, float *dst,
                      uint64_t *bytes_read) {
  uint64_t got = 0;
  for (int i = 0; i < m->nslices; i++) {
    const ck_slice *s = &m->slices[i];
    ck_box x;
    if (s->tensor != tensor || !ck_box_intersect(&s->box, want, &x)) continue;
    GT_TRY(read_part(dir, m, s, want, dst, bytes_read, &got));
  }
  if (got != ck_box_volume(want))
    return gt_errorf(GT_EFORMAT,
                     "checkpoint %s: tensor %s: its slices cover %llu of the %llu elements this rank "
                     "needs (slices overlap or are missing)",
                     dir, m->tensors[tensor].name, (unsigned long long)got, (unsigned long long)ck_box_volume(want));
  return GT_OK;
}

/* The tensor `name`, checked against the model's parameter. */
static gt_status find_tensor(const char *dir, const ck_manifest *m, const char *name, const gt_param *p, int *index) {
  *index = ck_manifest_tensor(m, name);
  if (*index < 0)
    return gt_errorf(GT_EFORMAT, "checkpoint %s has no tensor %s: it is of another model or optimizer", dir, name);
  const ck_tensor *t = &m->tensors[*index];
  bool same = t->ndim == p->ndim && t->dtype == CK_DTYPE_F32;
  for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->global_shape[d];
  if (!same) {
    char a[96] = "", b[96] = "";
    for (int d = 0; d < t->ndim; d++)
      snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    for (int d = 0; d < p->ndim; d++)
      snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "x" : "", (long long)p->global_shape[d]);
    return gt_errorf(GT_EFORMAT, "checkpoint %s: tensor %s is %s there and %s in this model", dir, name, a, b);
  }
  return GT_OK;
}

/* Every tensor of the checkpoint is one this model and optimizer have. */
static gt_status check_names(gt_ckpt *c, const char *dir, const ck_manifest *m, gt_optim_kind kind) {
  char name[CK_NAME + 32];
  int expected = 0;
  for (int i = 0; i < gt_model_num_params(c->m); i++) {
    const gt_param *p = gt_model_param(c->m, i);
    if (p->tied_to >= 0 || p->mirror_of >= 0) continue;
    int k;
    ck_param_tensor(p->name, name, sizeof name);
    GT_TRY(find_tensor(dir, m, name, p, &k));
    for (int s = 0; s < c->nstates; s++) {
      ck_state_tensor(kind, s, p->name, name, sizeof name);
      GT_TRY(find_tensor(dir, m, name, p, &k));
    }
    expected += 1 + c->nstates;
  }
  if (m->ntensors != expected)
    return gt_errorf(GT_EFORMAT,
                     "checkpoint %s holds %d tensors where this model and optimizer have %d: it is of "
                     "another model or optimizer",
                     dir, m->ntensors, expected);
  return GT_OK;
}

static gt_status read_params(gt_ckpt *c, const char *dir, const ck_manifest *m, uint64_t *bytes_read) {
  char name[CK_NAME + 32];
  for (int i = 0; i < gt_model_num_params(c->m); i++) {
    const gt_param *p = gt_model_param(c->m, i);
    if (p->tied_to >= 0 || !p->local || !p->numel) continue;
    const gt_param *owner = p->mirror_of >= 0 ? gt_model_param(c->m, p->mirror_of) : p;
    int t;
    ck_param_tensor(owner->name, name, sizeof name);
    GT_TRY(find_tensor(dir, m, name, p, &t));
    ck_box blk = ck_param_box(p);
    GT_TRY(ck_fill_box(dir, m, t, &blk, c->params + p->offset, bytes_read));
  }
  return GT_OK;
}

/* Where a box of optimizer state k goes: floats [lo, hi) of a parameter
 * are cut into boxes each contiguous in the rank's state buffer. */
typedef struct state_dst {
  const char *dir;
  const ck_manifest *m;
  int tensor;
  float *buf; /* the rank's state buffer, from float c->lo of the flat buffer; NULL: */
  int fd;     /* on disk, in this file from byte `at`, through `staging` */
  uint64_t at;
  float *staging;
  int64_t shift; /* where the parameter's first float is in it (negative: before it) */
  uint64_t *bytes_read;
} state_dst;

static gt_status fill_state_box(void *ctx, const ck_box *box, uint64_t first) {
  state_dst *d = ctx;
  uint64_t i = (uint64_t)(d->shift + (int64_t)first);
  if (d->buf) return ck_fill_box(d->dir, d->m, d->tensor, box, d->buf + i, d->bytes_read);
  GT_TRY(ck_fill_box(d->dir, d->m, d->tensor, box, d->staging, d->bytes_read));
  int e = ck_transfer(d->fd, true, d->staging, ck_box_volume(box) * sizeof(float), d->at + i * sizeof(float));
  if (e)
    return gt_errorf(GT_EIO, "loading checkpoint %s: writing optimizer state to its file on disk failed: %s", d->dir,
                     strerror(e));
  return GT_OK;
}

/* The optimizer's range [lo, hi), parameter by parameter: only the part of
 * each parameter inside the range is read. */
static gt_status read_state(gt_ckpt *c, const char *dir, const ck_manifest *m, gt_optim_kind kind,
                            uint64_t *bytes_read) {
  char name[CK_NAME + 32];
  for (int i = 0; i < gt_model_num_params(c->m); i++) {
    const gt_param *p = gt_model_param(c->m, i);
    if (p->tied_to >= 0 || !p->local || !p->numel) continue;
    size_t lo = p->offset > c->lo ? p->offset : c->lo;
    size_t hi = p->offset + p->numel < c->hi ? p->offset + p->numel : c->hi;
    if (lo >= hi) continue;
    const gt_param *owner = p->mirror_of >= 0 ? gt_model_param(c->m, p->mirror_of) : p;
    ck_box box = ck_param_box(p);
    for (int k = 0; k < c->nstates; k++) {
      state_dst d = {.dir = dir,
                     .m = m,
                     .bytes_read = bytes_read,
                     .buf = c->state[k],
                     .fd = c->state_fd,
                     .at = (uint64_t)k * (c->hi - c->lo) * sizeof(float),
                     .staging = c->staging,
                     .shift = (int64_t)p->offset - (int64_t)c->lo};
      ck_state_tensor(kind, k, owner->name, name, sizeof name);
      GT_TRY(find_tensor(dir, m, name, p, &d.tensor));
      /* Through the staging buffer, pieces of at most its size. */
      size_t piece = d.buf ? hi - lo : c->staging_floats;
      for (size_t a = lo; a < hi; a += piece) {
        size_t b = hi - a < piece ? hi : a + piece;
        GT_TRY(ck_range_boxes(&box, a - p->offset, b - p->offset, fill_state_box, &d));
      }
    }
  }
  return GT_OK;
}

typedef struct trainer_state {
  uint64_t step, opt_steps, seed;
  uint32_t kind, plan[8];
} trainer_state;

static gt_status read_trainer(const char *dir, const ck_manifest *m, trainer_state *t) {
  const ck_blob *b = ck_manifest_blob(m, "giant/trainer");
  if (!b) return gt_errorf(GT_EFORMAT, "checkpoint %s has no trainer state (blob giant/trainer)", dir);
  ck_rd r = {.p = b->bytes, .len = b->len};
  uint32_t version = ck_get_u32(&r);
  t->step = ck_get_u64(&r);
  t->kind = ck_get_u32(&r);
  t->opt_steps = ck_get_u64(&r);
  t->seed = ck_get_u64(&r);
  for (int i = 0; i < 8; i++) t->plan[i] = ck_get_u32(&r);
  if (r.bad || version != 1 || t->step > (1u << 30) || t->opt_steps > (1u << 30))
    return gt_errorf(GT_EFORMAT, "checkpoint %s: the trainer state is malformed", dir);
  return GT_OK;
}

/* The next row of the data stream, the same in every replica's cursor. */
static gt_status read_cursor(gt_ckpt *c, const char *dir, const ck_manifest *m, uint64_t *row, bool *found) {
  *found = false;
  for (int i = 0; i < m->nblobs; i++) {
    if (strncmp(m->blobs[i].name, "giant/loader/", 13)) continue;
    ck_rd r = {.p = m->blobs[i].bytes, .len = m->blobs[i].len};
    char path[4096];
    uint32_t version = ck_get_u32(&r);
    ck_get_str(&r, path, sizeof path);
    uint64_t rows = ck_get_u64(&r);
    uint32_t B = ck_get_u32(&r), T = ck_get_u32(&r), mode = ck_get_u32(&r);
    uint64_t seed = ck_get_u64(&r);
    /* shard, nshards, position */
    (void)ck_get_u32(&r);
    (void)ck_get_u32(&r);
    (void)ck_get_u64(&r);
    uint64_t next = ck_get_u64(&r);
    /* Version 2 adds the share (offset, total); the stream resumes at the
     * next row whatever the shares, so version 1 reads the same. */
    if (version == 2) {
      (void)ck_get_u32(&r);
      (void)ck_get_u32(&r);
    }
    if (r.bad || (version != 1 && version != 2) || B == 0)
      return gt_errorf(GT_EFORMAT, "checkpoint %s: loader cursor %s is malformed", dir, m->blobs[i].name);
    if (*found && next != *row)
      return gt_errorf(GT_EFORMAT, "checkpoint %s: the replicas' data cursors disagree (row %llu and %llu)", dir,
                       (unsigned long long)*row, (unsigned long long)next);
    const gt_loader_config *lc = gt_loader_get_config(c->loader);
    if (rows != gt_loader_rows_per_epoch(c->loader) || (int)T != lc->T_max || mode != (uint32_t)lc->mode ||
        seed != lc->seed)
      return gt_errorf(GT_EINVAL,
                       "checkpoint %s was taken reading %s (%llu rows of T_max %u, mode %u, seed %llu); this loader "
                       "reads %s (%llu rows of T_max %d, mode %d, seed %llu): the data stream would not continue",
                       dir, path, (unsigned long long)rows, T, mode, (unsigned long long)seed, lc->path,
                       (unsigned long long)gt_loader_rows_per_epoch(c->loader), lc->T_max, (int)lc->mode,
                       (unsigned long long)lc->seed);
    *row = next;
    *found = true;
  }
  return GT_OK;
}

typedef struct loaded {
  trainer_state tr;
  uint64_t row;
  bool has_cursor;
  uint64_t bytes_read;
} loaded;

static gt_status load_one(gt_ckpt *c, const char *dir, ck_manifest *m, loaded *out) {
  GT_TRY(ck_manifest_read(dir, m));
  GT_TRY(read_trainer(dir, m, &out->tr));
  gt_optim_kind kind = gt_optimizer_get_config(c->opt)->kind;
  if (out->tr.kind != (uint32_t)kind)
    return gt_errorf(GT_EINVAL, "checkpoint %s holds %s state and this trainer uses %s", dir,
                     out->tr.kind == GT_OPTIM_SGD ? "SGD" : "AdamW", kind == GT_OPTIM_SGD ? "SGD" : "AdamW");
  GT_TRY(check_names(c, dir, m, kind));
  /* Start from the current buffers so that what no tensor covers (padding)
   * keeps its value. */
  GT_TRY(gt_model_get_params(c->m, c->params, c->nparams));
  if (c->state_fd >= 0) GT_TRY(gt_optimizer_copy_state_out(c->opt, c->state_fd));
  for (int k = 0; k < c->nstates && c->state_fd < 0; k++)
    GT_TRY(gt_optimizer_read_state(c->opt, k, 0, c->hi - c->lo, c->state[k]));
  GT_TRY(read_params(c, dir, m, &out->bytes_read));
  GT_TRY(read_state(c, dir, m, kind, &out->bytes_read));
  if (c->loader) GT_TRY(read_cursor(c, dir, m, &out->row, &out->has_cursor));
  return GT_OK;
}

/* Whether every rank loaded: failures are counted in the store. */
static gt_status agree(gt_ckpt *c, int attempt, bool ok, bool *all_ok) {
  *all_ok = ok;
  if (c->plan.world == 1) return GT_OK;
  char key[256];
  snprintf(key, sizeof key, "%s/load%d/%d", c->keys, c->loads, attempt);
  int64_t failed = 0;
  GT_TRY(gt_store_add(c->cfg.store, key, ok ? 0 : 1, &failed));
  char barrier[300];
  snprintf(barrier, sizeof barrier, "%s/barrier", key);
  GT_TRY(gt_store_barrier(c->cfg.store, barrier, c->plan.rank, c->plan.world, c->cfg.timeout_ms));
  GT_TRY(gt_store_add(c->cfg.store, key, 0, &failed));
  *all_ok = failed == 0;
  return GT_OK;
}

static gt_status apply(gt_ckpt *c, const loaded *l) {
  GT_TRY(gt_model_set_params(c->m, c->params, c->nparams));
  if (c->state_fd >= 0) GT_TRY(gt_optimizer_copy_state_in(c->opt, c->state_fd));
  for (int k = 0; k < c->nstates && c->state_fd < 0; k++)
    GT_TRY(gt_optimizer_write_state(c->opt, k, 0, c->hi - c->lo, c->state[k]));
  gt_optimizer_set_steps(c->opt, (int)l->tr.opt_steps);
  gt_trainer_set_step_index(c->tr, (int)l->tr.step);
  if (c->loader && l->has_cursor) GT_TRY(gt_loader_restart_at(c->loader, l->row));
  return GT_OK;
}

gt_status gt_ckpt_load(gt_ckpt *c, const char *path, gt_ckpt_info *info) {
  (void)gt_ckpt_wait(c);
  int *steps = NULL, n = 1;
  if (!path) {
    GT_TRY(ck_committed(c->root, &steps, &n));
    if (n == 0) {
      free(steps);
      return gt_errorf(GT_ENOTFOUND, "no committed checkpoint under %s", c->root);
    }
  }
  c->loads++;
  gt_status result = GT_OK;
  char first_error[1024] = "";
  int fallbacks = 0;
  for (int a = 0; a < n; a++) {
    char dir[4150];
    if (path)
      snprintf(dir, sizeof dir, "%s", path);
    else
      ck_step_dir(c->root, steps[a], dir, sizeof dir);
    ck_manifest m = {0};
    loaded l = {0};
    gt_status s = load_one(c, dir, &m, &l);
    if (s != GT_OK) {
      gt_warn("cannot load checkpoint %s: %s", dir, gt_last_error());
      if (!*first_error) snprintf(first_error, sizeof first_error, "%s", gt_last_error());
      if (result == GT_OK) result = s;
    }
    bool all_ok;
    gt_status as = agree(c, a, s == GT_OK, &all_ok);
    if (as == GT_OK && all_ok)
      s = apply(c, &l);
    else if (as != GT_OK)
      s = as;
    if (s == GT_OK && all_ok) {
      ck_manifest_free(&c->loaded);
      c->loaded = m;
      gt_info("loaded checkpoint %s (step %llu)%s", dir, (unsigned long long)l.tr.step,
              fallbacks ? ", passing over newer ones that failed to load" : "");
      if (info) {
        *info = (gt_ckpt_info){.step = (int)l.tr.step,
                               .fallbacks = fallbacks,
                               .layout = {(int)l.tr.plan[0], (int)l.tr.plan[1], (int)l.tr.plan[2]},
                               .zero1 = l.tr.plan[3] != 0,
                               .zero = (int)l.tr.plan[3],
                               .bytes_read = l.bytes_read};
        snprintf(info->path, sizeof info->path, "%.4095s", dir);
      }
      free(steps);
      return GT_OK;
    }
    ck_manifest_free(&m);
    if (as != GT_OK || (s != GT_OK && all_ok)) {
      free(steps);
      return s;
    }
    if (!path && a + 1 < n) gt_warn("falling back from checkpoint %s to the previous committed one", dir);
    fallbacks++;
  }
  free(steps);
  if (!*first_error) return gt_errorf(GT_EFORMAT, "no checkpoint under %s loaded on every rank", path ? path : c->root);
  return gt_errorf(result == GT_OK ? GT_EFORMAT : result, "%s", first_error);
}
