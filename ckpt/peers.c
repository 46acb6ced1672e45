/* Resharding from peers: the state a job's surviving ranks hold in memory,
 * moved to its owners at a new layout without touching storage.
 *
 * It works with the slice descriptions a checkpoint is made of. Every rank
 * describes what it holds (its parameters' blocks, its optimizer's range
 * cut at parameters, as boxes of global indices: what a save would write
 * before replicas are deduplicated) and what its new trainer must hold (as
 * a load would read it). The descriptions go to every rank in one all-
 * gather, so that every rank computes the same transfer plan: for each
 * wanted box, its overlap with each distinct held box, taken from the
 * lowest rank that holds it. The plan then runs as rounds of pairwise
 * exchanges (round k: send to rank + k, receive from rank - k), which move
 * every float once, straight to its new owner. What no rank holds comes
 * from a committed checkpoint when one is given, else it is an error that
 * names it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "giant/log.h"

/* One box of one tensor, and where its floats are in its rank's host
 * space: the parameter buffer, then each optimizer state's range. */
typedef struct pr_slice {
  char name[CK_NAME + 32]; /* as ck_param_tensor and ck_state_tensor write it */
  ck_box box;
  uint64_t at;
} pr_slice;

typedef struct pr_list {
  pr_slice *s;
  int n, cap;
} pr_list;

/* A rank's side of the exchange. */
typedef struct pr_rank {
  int has_state;          /* it held a trainer before (not a joining rank) */
  uint64_t step, opt_steps;
  pr_list hold, want;
} pr_rank;

/* A trainer's state on the host, in the order of the host space. */
typedef struct pr_space {
  gt_trainer *tr;
  float *buf;
  size_t nparams, lo, hi;
  int nstates;
} pr_space;

static gt_status list_add(pr_list *l, const char *name, const ck_box *box, uint64_t at) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    pr_slice *s = realloc(l->s, (size_t)cap * sizeof *s);
    if (!s) return gt_errorf(GT_ENOMEM, "out of memory describing the state to move");
    l->s = s, l->cap = cap;
  }
  pr_slice *s = &l->s[l->n++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->box = *box;
  s->at = at;
  return GT_OK;
}

typedef struct range_add {
  pr_list *l;
  const char *name;
  uint64_t base; /* the host-space float of the parameter's first element */
} range_add;

static gt_status add_range_box(void *ctx, const ck_box *box, uint64_t first) {
  range_add *r = ctx;
  return list_add(r->l, r->name, box, r->base + first);
}

/* The boxes a trainer holds (want = false: what a save writes, owners
 * only) or must be given (want = true: mirrors too, under their owner's
 * name, as a load reads them). shard_params: of the parameters, hold only
 * the optimizer's range (ZeRO-1 after an update that was not gathered). */
static gt_status describe(const pr_space *sp, bool want, bool shard_params, pr_list *out) {
  gt_model *m = gt_trainer_model(sp->tr);
  gt_optim_kind kind = gt_optimizer_get_config(gt_trainer_optimizer(sp->tr))->kind;
  char name[CK_NAME + 32];
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    if (p->tied_to >= 0 || !p->local || !p->numel) continue;
    if (p->mirror_of >= 0 && !want) continue;
    const gt_param *owner = p->mirror_of >= 0 ? gt_model_param(m, p->mirror_of) : p;
    ck_box blk = ck_param_box(p);
    ck_param_tensor(owner->name, name, sizeof name);
    size_t lo = p->offset > sp->lo ? p->offset : sp->lo;
    size_t hi = p->offset + p->numel < sp->hi ? p->offset + p->numel : sp->hi;
    if (!want && shard_params) {
      /* Only the shard this rank updated is current somewhere. */
      range_add r = {out, name, p->offset};
      if (lo < hi) GT_TRY(ck_range_boxes(&blk, lo - p->offset, hi - p->offset, add_range_box, &r));
    } else {
      GT_TRY(list_add(out, name, &blk, p->offset));
    }
    for (int k = 0; lo < hi && k < sp->nstates; k++) {
      ck_state_tensor(kind, k, owner->name, name, sizeof name);
      /* State k's float j of the flat buffer is at nparams + k*(hi-lo) + (j - lo). */
      range_add r = {out, name, sp->nparams + (uint64_t)k * (sp->hi - sp->lo) + p->offset - sp->lo};
      GT_TRY(ck_range_boxes(&blk, lo - p->offset, hi - p->offset, add_range_box, &r));
    }
  }
  return GT_OK;
}

static gt_status space_open(gt_trainer *tr, pr_space *sp) {
  *sp = (pr_space){.tr = tr};
  if (!tr) return GT_OK;
  gt_model *m = gt_trainer_model(tr);
  gt_optimizer *opt = gt_trainer_optimizer(tr);
  sp->nparams = gt_model_buffer_floats(m);
  gt_optimizer_range(opt, &sp->lo, &sp->hi);
  sp->nstates = gt_optimizer_num_states(opt);
  size_t n = sp->nparams + (size_t)sp->nstates * (sp->hi - sp->lo);
  sp->buf = malloc((n ? n : 1) * sizeof(float));
  if (!sp->buf) return gt_errorf(GT_ENOMEM, "out of memory for a host copy of this rank's state (%zu floats)", n);
  GT_TRY(gt_model_get_params(m, sp->buf, sp->nparams));
  for (int k = 0; k < sp->nstates; k++)
    GT_TRY(gt_backend_download(gt_model_backend(m), sp->buf + sp->nparams + (size_t)k * (sp->hi - sp->lo),
                               gt_optimizer_state(opt, k), (sp->hi - sp->lo) * sizeof(float)));
  return GT_OK;
}

static gt_status space_store(const pr_space *sp) {
  gt_model *m = gt_trainer_model(sp->tr);
  gt_optimizer *opt = gt_trainer_optimizer(sp->tr);
  GT_TRY(gt_model_set_params(m, sp->buf, sp->nparams));
  for (int k = 0; k < sp->nstates; k++)
    GT_TRY(gt_backend_upload(gt_model_backend(m), gt_optimizer_state(opt, k),
                             sp->buf + sp->nparams + (size_t)k * (sp->hi - sp->lo), (sp->hi - sp->lo) * sizeof(float)));
  return GT_OK;
}

/* ---- the exchange of descriptions ---- */

static void put_list(ck_buf *b, const pr_list *l) {
  ck_put_u32(b, (uint32_t)l->n);
  for (int i = 0; i < l->n; i++) {
    const pr_slice *s = &l->s[i];
    ck_put_str(b, s->name);
    ck_put_u32(b, (uint32_t)s->box.ndim);
    for (int d = 0; d < s->box.ndim; d++) ck_put_u64(b, (uint64_t)s->box.lo[d]), ck_put_u64(b, (uint64_t)s->box.hi[d]);
    ck_put_u64(b, s->at);
  }
}

static gt_status get_list(ck_rd *r, pr_list *l) {
  uint32_t n = ck_get_u32(r);
  if (r->bad || n > (1u << 24)) return gt_errorf(GT_EFORMAT, "a peer's state description is malformed");
  for (uint32_t i = 0; i < n && !r->bad; i++) {
    char name[CK_NAME];
    ck_box box = {0};
    ck_get_str(r, name, sizeof name);
    box.ndim = (int)ck_get_u32(r);
    if (box.ndim < 0 || box.ndim > CK_MAXDIM) r->bad = true;
    for (int d = 0; d < box.ndim && !r->bad; d++) box.lo[d] = (int64_t)ck_get_u64(r), box.hi[d] = (int64_t)ck_get_u64(r);
    uint64_t at = ck_get_u64(r);
    if (!r->bad) GT_TRY(list_add(l, name, &box, at));
  }
  return r->bad ? gt_errorf(GT_EFORMAT, "a peer's state description is malformed") : GT_OK;
}

/* All-gather moves bytes untouched, so byte strings travel as floats. */
static gt_status exchange(gt_comm *world, const pr_rank *me, pr_rank *all) {
  int n = gt_comm_size(world);
  ck_buf b = {0};
  ck_put_u32(&b, (uint32_t)me->has_state);
  ck_put_u64(&b, me->step);
  ck_put_u64(&b, me->opt_steps);
  put_list(&b, &me->hold);
  put_list(&b, &me->want);
  if (b.oom) return ck_buf_free(&b), gt_errorf(GT_ENOMEM, "out of memory describing the state to move");
  float *lens = calloc((size_t)n, sizeof *lens), mine;
  uint32_t len = (uint32_t)b.len;
  memcpy(&mine, &len, sizeof mine);
  gt_status s = lens ? gt_comm_allgather(world, &mine, lens, 1, GT_F32) : gt_errorf(GT_ENOMEM, "out of memory");
  uint32_t most = 0;
  for (int r = 0; s == GT_OK && r < n; r++) {
    uint32_t l;
    memcpy(&l, &lens[r], sizeof l);
    if (l > most) most = l;
  }
  size_t words = (most + 3) / 4;
  float *send = s == GT_OK ? calloc(words ? words : 1, sizeof(float)) : NULL;
  float *recv = send ? calloc((size_t)n * (words ? words : 1), sizeof(float)) : NULL;
  if (s == GT_OK && !recv) s = gt_errorf(GT_ENOMEM, "out of memory exchanging state descriptions");
  if (s == GT_OK) {
    memcpy(send, b.p, b.len);
    s = gt_comm_allgather(world, send, recv, words, GT_F32);
  }
  for (int r = 0; s == GT_OK && r < n; r++) {
    uint32_t l;
    memcpy(&l, &lens[r], sizeof l);
    ck_rd rd = {.p = (const unsigned char *)(recv + (size_t)r * words), .len = l};
    all[r].has_state = (int)ck_get_u32(&rd);
    all[r].step = ck_get_u64(&rd);
    all[r].opt_steps = ck_get_u64(&rd);
    s = get_list(&rd, &all[r].hold);
    if (s == GT_OK) s = get_list(&rd, &all[r].want);
    if (s != GT_OK) s = gt_error_context(s, "from rank %d", r);
  }
  ck_buf_free(&b);
  free(lens), free(send), free(recv);
  return s;
}

/* ---- the plan ---- */

/* A held box that is the first of its kind: no lower rank holds the same
 * box of the same tensor. */
typedef struct pr_src {
  const pr_slice *s;
  int rank;
} pr_src;

static int by_name(const void *a, const void *b) {
  const pr_src *x = a, *y = b;
  int c = strcmp(x->s->name, y->s->name);
  return c ? c : x->rank - y->rank;
}

static bool same_box(const ck_box *a, const ck_box *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d]) return false;
  return true;
}

/* The distinct held boxes, sorted by tensor name then rank. */
static gt_status sources(const pr_rank *all, int n, pr_src **out, int *count) {
  int total = 0;
  for (int r = 0; r < n; r++) total += all[r].hold.n;
  pr_src *v = malloc((size_t)(total ? total : 1) * sizeof *v);
  if (!v) return gt_errorf(GT_ENOMEM, "out of memory planning the state's moves");
  int k = 0;
  for (int r = 0; r < n; r++)
    for (int i = 0; i < all[r].hold.n; i++) v[k++] = (pr_src){&all[r].hold.s[i], r};
  qsort(v, (size_t)k, sizeof *v, by_name);
  int w = 0;
  for (int i = 0; i < k; i++) {
    bool dup = false;
    for (int j = w - 1; j >= 0 && !strcmp(v[j].s->name, v[i].s->name) && !dup; j--) dup = same_box(&v[j].s->box, &v[i].s->box);
    if (!dup) v[w++] = v[i];
  }
  *out = v, *count = w;
  return GT_OK;
}

/* The first source of tensor `name`, or count when there is none. */
static int first_of(const pr_src *v, int count, const char *name) {
  int a = 0, b = count;
  while (a < b) {
    int mid = (a + b) / 2;
    if (strcmp(v[mid].s->name, name) < 0) a = mid + 1;
    else b = mid;
  }
  return a < count && !strcmp(v[a].s->name, name) ? a : count;
}

/* Visits, in the one order every rank uses, each piece of the plan: the
 * overlap of receiver r's wanted box with a source's box. */
typedef gt_status (*piece_fn)(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x);

/* The copy of `have` that rank r holds itself, if it holds one: a replica
 * takes its own bytes rather than a lower rank's identical ones. */
static const pr_slice *own_copy(const pr_rank *r, const pr_slice *have) {
  for (int i = 0; i < r->hold.n; i++)
    if (same_box(&r->hold.s[i].box, &have->box) && !strcmp(r->hold.s[i].name, have->name)) return &r->hold.s[i];
  return NULL;
}

static gt_status each_piece(const pr_rank *all, int n, const pr_src *v, int count, piece_fn fn, void *ctx) {
  for (int r = 0; r < n; r++)
    for (int i = 0; i < all[r].want.n; i++) {
      const pr_slice *w = &all[r].want.s[i];
      for (int j = first_of(v, count, w->name); j < count && !strcmp(v[j].s->name, w->name); j++) {
        ck_box x;
        if (!ck_box_intersect(&v[j].s->box, &w->box, &x)) continue;
        const pr_slice *mine = v[j].rank == r ? NULL : own_copy(&all[r], v[j].s);
        GT_TRY(fn(ctx, mine ? r : v[j].rank, r, mine ? mine : v[j].s, w, &x));
      }
    }
  return GT_OK;
}

/* The floats each pair of ranks moves: [src * n + dst]. */
typedef struct tally {
  uint64_t *floats;
  int n;
} tally;

static gt_status count_piece(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x) {
  (void)have, (void)want;
  tally *t = ctx;
  t->floats[(size_t)src * (size_t)t->n + (size_t)dst] += ck_box_volume(x);
  return GT_OK;
}

/* How much of each wanted box the sources cover: all of it, or the state
 * is missing there (a box covered twice means the holders disagree about
 * the layout: an error). *first_missing: the first short one, or -1. */
static gt_status coverage(const pr_rank *all, int n, const pr_src *v, int count, int *miss_rank, int *miss_slice,
                          uint64_t *missing) {
  *miss_rank = *miss_slice = -1;
  *missing = 0;
  for (int r = 0; r < n; r++)
    for (int i = 0; i < all[r].want.n; i++) {
      const pr_slice *w = &all[r].want.s[i];
      uint64_t got = 0, need = ck_box_volume(&w->box);
      for (int j = first_of(v, count, w->name); j < count && !strcmp(v[j].s->name, w->name); j++) {
        ck_box x;
        if (ck_box_intersect(&v[j].s->box, &w->box, &x)) got += ck_box_volume(&x);
      }
      if (got > need)
        return gt_errorf(GT_ESTATE, "tensor %s: the ranks' holdings overlap (%llu floats cover a box of %llu): they "
                         "were not taken at one layout", w->name, (unsigned long long)got, (unsigned long long)need);
      if (got < need && *miss_rank < 0) *miss_rank = r, *miss_slice = i;
      *missing += need - got;
    }
  return GT_OK;
}

/* ---- moving the floats ---- */

typedef struct mover {
  int me, src, dst;       /* this round's pair: what `src` sends to `dst` */
  const pr_space *from, *to;
  float *buf;             /* the pair's floats, piece after piece */
  uint64_t at;            /* floats of buf used so far */
  bool pack;              /* true: fill buf from `from`; false: empty it into `to` */
  const pr_slice *have, *want;
  const ck_box *x;
} mover;

/* ck_box_runs over (have, x) when packing, (x, want) when unpacking. */
static gt_status move_run(void *ctx, uint64_t a, uint64_t b, uint64_t n) {
  mover *m = ctx;
  if (m->pack) memcpy(m->buf + m->at + b, m->from->buf + m->have->at + a, n * sizeof(float));
  else memcpy(m->to->buf + m->want->at + b, m->buf + m->at + a, n * sizeof(float));
  return GT_OK;
}

static gt_status move_piece(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x) {
  mover *m = ctx;
  if (src != m->src || dst != m->dst) return GT_OK;
  m->have = have, m->want = want, m->x = x;
  if (m->pack) GT_TRY(ck_box_runs(&have->box, x, move_run, m));
  else GT_TRY(ck_box_runs(x, &want->box, move_run, m));
  m->at += ck_box_volume(x);
  return GT_OK;
}

/* A round's exchange goes in pieces of at most this many floats, so that
 * no single transfer outgrows what a transport frames at once. */
#define PR_CHUNK ((uint64_t)16 << 20)

static gt_status run_round(gt_comm *world, const pr_rank *all, int n, const pr_src *v, int count, const tally *t,
                           int k, const pr_space *from, const pr_space *to, gt_ckpt_peer_stats *st) {
  int me = world ? gt_comm_rank(world) : 0, dst = (me + k) % n, src = (me - k + n) % n;
  uint64_t out = t->floats[(size_t)me * n + dst], in = t->floats[(size_t)src * n + me], most = 0;
  for (int r = 0; r < n; r++) {
    uint64_t f = t->floats[(size_t)r * n + (r + k) % n];
    if (f > most) most = f;
  }
  if (most == 0) return GT_OK; /* every rank sees the same: nobody moves anything this round */
  float *sbuf = malloc((size_t)(out ? out : 1) * sizeof(float));
  float *rbuf = k == 0 ? sbuf : malloc((size_t)(in ? in : 1) * sizeof(float));
  gt_status s = sbuf && rbuf ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory moving %llu floats", (unsigned long long)(out + in));
  mover m = {.me = me, .src = me, .dst = dst, .from = from, .to = to, .buf = sbuf, .pack = true};
  if (s == GT_OK && out) s = each_piece(all, n, v, count, move_piece, &m);
  for (uint64_t o = 0; s == GT_OK && k > 0 && o < most; o += PR_CHUNK) {
    uint64_t so = out > o ? (out - o < PR_CHUNK ? out - o : PR_CHUNK) : 0;
    uint64_t ro = in > o ? (in - o < PR_CHUNK ? in - o : PR_CHUNK) : 0;
    s = gt_comm_sendrecv(world, sbuf + (so ? o : 0), so, dst, rbuf + (ro ? o : 0), ro, src, GT_F32);
  }
  m = (mover){.me = me, .src = src, .dst = me, .from = from, .to = to, .buf = rbuf, .pack = false};
  if (s == GT_OK && in) s = each_piece(all, n, v, count, move_piece, &m);
  if (s == GT_OK && k == 0) st->floats_kept += in;
  if (s == GT_OK && k > 0) st->floats_sent += out, st->floats_received += in;
  free(sbuf);
  if (rbuf != sbuf) free(rbuf);
  return s;
}

/* The wanted boxes of this rank that peers do not cover, read whole from
 * the fallback checkpoint (the peers' pieces then overwrite what they do
 * cover, so exactly the missing floats keep the checkpoint's values). */
static gt_status fill_missing(const char *dir, const pr_rank *mine, const pr_src *v, int count, const pr_space *to,
                              gt_ckpt_peer_stats *st) {
  ck_manifest m = {0};
  gt_status s = GT_OK;
  bool read = false;
  for (int i = 0; s == GT_OK && i < mine->want.n; i++) {
    const pr_slice *w = &mine->want.s[i];
    uint64_t got = 0, need = ck_box_volume(&w->box);
    for (int j = first_of(v, count, w->name); j < count && !strcmp(v[j].s->name, w->name); j++) {
      ck_box x;
      if (ck_box_intersect(&v[j].s->box, &w->box, &x)) got += ck_box_volume(&x);
    }
    if (got == need) continue;
    if (!read) s = ck_manifest_read(dir, &m), read = true;
    int t = s == GT_OK ? ck_manifest_tensor(&m, w->name) : -1;
    if (s == GT_OK && t < 0) s = gt_errorf(GT_EFORMAT, "checkpoint %s has no tensor %s", dir, w->name);
    uint64_t bytes = 0;
    if (s == GT_OK) s = ck_fill_box(dir, &m, t, &w->box, to->buf + w->at, &bytes);
    if (s == GT_OK) {
      st->floats_from_ckpt += need - got;
      gt_info("reshard: %llu floats of %s that no surviving rank holds come from checkpoint %s",
              (unsigned long long)(need - got), w->name, dir);
    }
  }
  ck_manifest_free(&m);
  return s;
}

/* Whether every rank's part went well: one all-reduce of failure counts. */
static gt_status agree(gt_comm *world, gt_status mine) {
  if (!world || gt_comm_size(world) == 1) return mine;
  float bad = mine == GT_OK ? 0.0f : 1.0f;
  GT_TRY(gt_comm_allreduce(world, &bad, 1, GT_F32, GT_COMM_SUM));
  if (mine != GT_OK) return mine;
  return bad > 0 ? gt_errorf(GT_ESTATE, "%g other rank(s) could not take their part of the state", (double)bad) : GT_OK;
}

static void list_free(pr_list *l) { free(l->s); }

gt_status gt_ckpt_reshard_peers(gt_trainer *from, gt_trainer *to, const char *fallback, gt_ckpt_peer_stats *out) {
  gt_ckpt_peer_stats st = {0};
  gt_dist *dist = gt_trainer_dist(to);
  gt_comm *world = dist ? gt_grid_world(gt_dist_grid(dist)) : NULL;
  int n = world ? gt_comm_size(world) : 1, me = world ? gt_comm_rank(world) : 0;
  pr_space fs = {0}, ts = {0};
  pr_rank mine = {.has_state = from != NULL};
  pr_rank *all = calloc((size_t)n, sizeof *all);
  pr_src *v = NULL;
  int count = 0;
  tally t = {.floats = calloc((size_t)n * (size_t)n, sizeof(uint64_t)), .n = n};
  gt_status s = all && t.floats ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory planning the state's moves");
  if (s == GT_OK) s = space_open(from, &fs);
  if (s == GT_OK) s = space_open(to, &ts);
  /* ZeRO-1 after a failure: when any rank updated its shard without the
   * all-gather, every shard's parameters come from its owner alone, so
   * that no rank offers a copy older than the owner's. */
  float partial = from && gt_trainer_params_partial(from) ? 1.0f : 0.0f;
  if (world) { /* every rank takes part, whatever happened before: the collectives must pair */
    gt_status a = gt_comm_allreduce(world, &partial, 1, GT_F32, GT_COMM_SUM);
    if (s == GT_OK) s = a;
  }
  if (s == GT_OK && from) {
    mine.step = (uint64_t)gt_trainer_step_index(from);
    mine.opt_steps = (uint64_t)gt_optimizer_steps(gt_trainer_optimizer(from));
    s = describe(&fs, false, partial > 0, &mine.hold);
  }
  if (s == GT_OK) s = describe(&ts, true, false, &mine.want);
  s = agree(world, s); /* a rank that cannot describe its state must not leave the others in the exchange */
  if (s == GT_OK && world) s = exchange(world, &mine, all);
  else if (s == GT_OK) all[0] = mine, mine = (pr_rank){0};
  /* The step: every rank that held state must be at the same one. */
  int holder = -1;
  for (int r = 0; s == GT_OK && r < n; r++) {
    if (!all[r].has_state) continue;
    if (holder >= 0 && (all[r].step != all[holder].step || all[r].opt_steps != all[holder].opt_steps))
      s = gt_errorf(GT_ESTATE, "ranks %d and %d hold the state of different steps (%llu and %llu): the step in flight "
                    "must be finished or abandoned on every rank first", holder, r,
                    (unsigned long long)all[holder].step, (unsigned long long)all[r].step);
    if (holder < 0) holder = r;
  }
  if (s == GT_OK && holder < 0) s = gt_errorf(GT_ENOTFOUND, "no rank holds a trainer's state to move");
  if (s == GT_OK) s = sources(all, n, &v, &count);
  int miss_rank = -1, miss_slice = -1;
  uint64_t missing = 0;
  if (s == GT_OK) s = coverage(all, n, v, count, &miss_rank, &miss_slice, &missing);
  if (s == GT_OK && missing && !fallback) {
    const pr_slice *w = &all[miss_rank].want.s[miss_slice];
    s = gt_errorf(GT_ENOTFOUND, "%llu floats of the state are held by no rank left (the first: %s, wanted by rank %d): "
                  "they were on the lost rank alone; give a checkpoint to take them from, or keep a copy on a peer",
                  (unsigned long long)missing, w->name, miss_rank);
  }
  gt_status local = GT_OK;
  if (s == GT_OK && missing) local = fill_missing(fallback, &all[me], v, count, &ts, &st);
  if (s == GT_OK) s = agree(world, local);
  if (s == GT_OK) s = each_piece(all, n, v, count, count_piece, &t);
  for (int k = 0; s == GT_OK && k < n; k++) s = run_round(world, all, n, v, count, &t, k, &fs, &ts, &st);
  if (s == GT_OK) s = agree(world, space_store(&ts));
  if (s == GT_OK) {
    gt_trainer_set_step_index(to, (int)all[holder].step);
    gt_optimizer_set_steps(gt_trainer_optimizer(to), (int)all[holder].opt_steps);
    st.step = (int)all[holder].step;
    if (out) *out = st;
  }
  for (int r = 0; all && r < n; r++) list_free(&all[r].hold), list_free(&all[r].want);
  list_free(&mine.hold), list_free(&mine.want);
  free(all), free(v), free(t.floats), free(fs.buf), free(ts.buf);
  return s;
}
