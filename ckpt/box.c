/* Boxes of global indices: what a rank holds of a tensor, what a stored
 * slice covers, and the copy of one's overlap into another. Every block of
 * data is row-major over its box. */

#include "ckpt/ckpt_internal.h"

uint64_t ck_box_volume(const ck_box *b) {
  uint64_t v = 1;
  for (int d = 0; d < b->ndim; d++) v *= (uint64_t)(b->hi[d] - b->lo[d]);
  return v;
}

bool ck_box_intersect(const ck_box *a, const ck_box *b, ck_box *out) {
  if (a->ndim != b->ndim) return false;
  out->ndim = a->ndim;
  for (int d = 0; d < a->ndim; d++) {
    out->lo[d] = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
    out->hi[d] = a->hi[d] < b->hi[d] ? a->hi[d] : b->hi[d];
    if (out->lo[d] >= out->hi[d]) return false;
  }
  return true;
}

ck_box ck_param_box(const gt_param *p) {
  ck_box b = {.ndim = p->ndim};
  for (int d = 0; d < p->ndim; d++) {
    b.lo[d] = d == p->split_dim ? (int64_t)p->split_rank * p->shape[d] : 0;
    b.hi[d] = b.lo[d] + p->shape[d];
  }
  return b;
}

/* Floats [a, b) of the block over dims [d, ndim) of `blk`, with the dims
 * before d fixed as in `cur`; `base` is the flat index of the block's start. */
static gt_status range_rec(const ck_box *blk, ck_box *cur, int d, uint64_t base, uint64_t a, uint64_t b, ck_box_fn fn,
                           void *ctx) {
  if (a >= b) return GT_OK;
  uint64_t inner = 1;
  for (int k = d + 1; k < blk->ndim; k++) inner *= (uint64_t)(blk->hi[k] - blk->lo[k]);
  int64_t lo = blk->lo[d];
  if (d == blk->ndim - 1) {
    cur->lo[d] = lo + (int64_t)a;
    cur->hi[d] = lo + (int64_t)b;
    return fn(ctx, cur, base + a);
  }
  uint64_t r0 = a / inner, r1 = b / inner;
  if (r0 == r1) { /* inside one row */
    cur->lo[d] = lo + (int64_t)r0;
    cur->hi[d] = cur->lo[d] + 1;
    return range_rec(blk, cur, d + 1, base + r0 * inner, a % inner, b % inner, fn, ctx);
  }
  if (a % inner) { /* the tail of the first row */
    cur->lo[d] = lo + (int64_t)r0;
    cur->hi[d] = cur->lo[d] + 1;
    GT_TRY(range_rec(blk, cur, d + 1, base + r0 * inner, a % inner, inner, fn, ctx));
    r0++;
  }
  if (r1 > r0) { /* whole rows */
    ck_box whole = *cur;
    whole.lo[d] = lo + (int64_t)r0;
    whole.hi[d] = lo + (int64_t)r1;
    for (int k = d + 1; k < blk->ndim; k++) {
      whole.lo[k] = blk->lo[k];
      whole.hi[k] = blk->hi[k];
    }
    GT_TRY(fn(ctx, &whole, base + r0 * inner));
  }
  if (b % inner) { /* the head of the last row */
    cur->lo[d] = lo + (int64_t)r1;
    cur->hi[d] = cur->lo[d] + 1;
    GT_TRY(range_rec(blk, cur, d + 1, base + r1 * inner, 0, b % inner, fn, ctx));
  }
  return GT_OK;
}

gt_status ck_range_boxes(const ck_box *blk, uint64_t a, uint64_t b, ck_box_fn fn, void *ctx) {
  ck_box cur = *blk;
  return range_rec(blk, &cur, 0, 0, a, b, fn, ctx);
}

/* The flat offset of global index idx in the row-major block over b. */
static uint64_t flat(const ck_box *b, const int64_t *idx) {
  uint64_t o = 0;
  for (int d = 0; d < b->ndim; d++) o = o * (uint64_t)(b->hi[d] - b->lo[d]) + (uint64_t)(idx[d] - b->lo[d]);
  return o;
}

static bool whole_in(const ck_box *x, const ck_box *b, int d) { return x->lo[d] == b->lo[d] && x->hi[d] == b->hi[d]; }

gt_status ck_box_runs(const ck_box *sb, const ck_box *db, ck_run_fn fn, void *ctx) {
  ck_box x = {0};
  if (!ck_box_intersect(sb, db, &x)) return GT_OK;
  int n = x.ndim, k = n - 1;
  if (n == 0) return fn(ctx, 0, 0, 1); /* a scalar */
  /* Dims after k are held whole by both blocks: a run spans them. */
  while (k > 0 && whole_in(&x, sb, k) && whole_in(&x, db, k)) k--;
  uint64_t run = 1;
  for (int d = k; d < n; d++) run *= (uint64_t)(x.hi[d] - x.lo[d]);
  int64_t idx[CK_MAXDIM];
  for (int d = 0; d < n; d++) idx[d] = x.lo[d];
  for (;;) {
    GT_TRY(fn(ctx, flat(sb, idx), flat(db, idx), run));
    int d = k - 1; /* odometer over the dims before k */
    while (d >= 0 && ++idx[d] == x.hi[d]) {
      idx[d] = x.lo[d];
      d--;
    }
    if (d < 0) return GT_OK;
  }
}
