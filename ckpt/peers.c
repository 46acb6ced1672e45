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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/peers.h"
#include "giant/log.h"
#include "ckpt/peers_api.h"
#include "core/model/model_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"
#include "optim/trainer/trainer_engine.h"

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
    for (int j = w - 1; j >= 0 && !strcmp(v[j].s->name, v[i].s->name) && !dup; j--)
      dup = pr_same_box(&v[j].s->box, &v[i].s->box);
    if (!dup) v[w++] = v[i];
  }
  *out = v;
  *count = w;
  return GT_OK;
}

/* The first source of tensor `name`, or count when there is none. */
static int first_of(const pr_src *v, int count, const char *name) {
  int a = 0, b = count;
  while (a < b) {
    int mid = (a + b) / 2;
    if (strcmp(v[mid].s->name, name) < 0)
      a = mid + 1;
    else
      b = mid;
  }
  return a < count && !strcmp(v[a].s->name, name) ? a : count;
}

/* The floats of wanted box w that the distinct held boxes cover (their
 * overlaps with it; the boxes of one layout never overlap each other). */
static uint64_t covered(const pr_src *v, int count, const pr_slice *w) {
  uint64_t got = 0;
  for (int j = first_of(v, count, w->name); j < count && !strcmp(v[j].s->name, w->name); j++) {
    ck_box x;
    if (ck_box_intersect(&v[j].s->box, &w->box, &x)) got += ck_box_volume(&x);
  }
  return got;
}

/* Visits, in the one order every rank uses, each piece of the plan: the
 * overlap of receiver r's wanted box with a source's box. */
typedef gt_status (*piece_fn)(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x);

/* The copy of `have` that rank r holds itself, if it holds one: a replica
 * takes its own bytes rather than a lower rank's identical ones. */
static const pr_slice *own_copy(const pr_rank *r, const pr_slice *have) {
  for (int i = 0; i < r->hold.n; i++)
    if (pr_same_box(&r->hold.s[i].box, &have->box) && !strcmp(r->hold.s[i].name, have->name)) return &r->hold.s[i];
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
  (void)have;
  (void)want;
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
      uint64_t got = covered(v, count, w), need = ck_box_volume(&w->box);
      if (got > need)
        return gt_errorf(GT_ESTATE,
                         "tensor %s: the ranks' holdings overlap (%llu floats cover a box of %llu): they "
                         "were not taken at one layout",
                         w->name, (unsigned long long)got, (unsigned long long)need);
      if (got < need && *miss_rank < 0) {
        *miss_rank = r;
        *miss_slice = i;
      }
      *missing += need - got;
    }
  return GT_OK;
}

/* ---- moving the floats ---- */

typedef struct mover {
  int me, src, dst; /* this round's pair: what `src` sends to `dst` */
  const pr_space *from, *to;
  float *buf;  /* the pair's floats, piece after piece */
  uint64_t at; /* floats of buf used so far */
  bool pack;   /* true: fill buf from `from`; false: empty it into `to` */
  const pr_slice *have, *want;
  const ck_box *x;
} mover;

/* ck_box_runs over (have, x) when packing, (x, want) when unpacking. */
static gt_status move_run(void *ctx, uint64_t a, uint64_t b, uint64_t n) {
  mover *m = ctx;
  if (m->pack)
    memcpy(m->buf + m->at + b, m->from->buf + m->have->at + a, n * sizeof(float));
  else
    memcpy(m->to->buf + m->want->at + b, m->buf + m->at + a, n * sizeof(float));
  return GT_OK;
}

/* Within a rank: straight from the old host copy into the new one. */
static gt_status copy_run(void *ctx, uint64_t a, uint64_t b, uint64_t n) {
  mover *m = ctx;
  memcpy(m->to->buf + m->want->at + b, m->from->buf + m->have->at + a, n * sizeof(float));
  return GT_OK;
}

static gt_status copy_piece(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x) {
  mover *m = ctx;
  if (src != m->me || dst != m->me) return GT_OK;
  m->have = have;
  m->want = want;
  m->x = x;
  return ck_box_runs(&have->box, &want->box, copy_run, m); /* their overlap is x */
}

static gt_status move_piece(void *ctx, int src, int dst, const pr_slice *have, const pr_slice *want, const ck_box *x) {
  mover *m = ctx;
  if (src != m->src || dst != m->dst) return GT_OK;
  m->have = have;
  m->want = want;
  m->x = x;
  if (m->pack)
    GT_TRY(ck_box_runs(&have->box, x, move_run, m));
  else
    GT_TRY(ck_box_runs(x, &want->box, move_run, m));
  m->at += ck_box_volume(x);
  return GT_OK;
}

static gt_status run_round(gt_comm *world, const pr_rank *all, int n, const pr_src *v, int count, const tally *t, int k,
                           const pr_space *from, const pr_space *to, gt_ckpt_peer_stats *st) {
  int me = world ? gt_comm_rank(world) : 0, dst = (me + k) % n, src = (me - k + n) % n;
  uint64_t out = t->floats[(size_t)me * n + dst], in = t->floats[(size_t)src * n + me], most = 0;
  for (int r = 0; r < n; r++) {
    uint64_t f = t->floats[(size_t)r * n + (r + k) % n];
    if (f > most) most = f;
  }
  if (most == 0) return GT_OK; /* every rank sees the same: nobody moves anything this round */
  if (k == 0) {
    mover m = {.me = me, .from = from, .to = to};
    GT_TRY(each_piece(all, n, v, count, copy_piece, &m));
    st->floats_kept += in;
    return GT_OK;
  }
  float *sbuf = malloc((size_t)(out ? out : 1) * sizeof(float));
  float *rbuf = k == 0 ? sbuf : malloc((size_t)(in ? in : 1) * sizeof(float));
  gt_status s =
      sbuf && rbuf ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory moving %llu floats", (unsigned long long)(out + in));
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
  if (s == GT_OK && k > 0) {
    st->floats_sent += out;
    st->floats_received += in;
  }
  free(sbuf);
  if (rbuf != sbuf) free(rbuf);
  return s;
}

/* The wanted boxes of this rank that peers do not cover, read whole from
 * the fallback checkpoint (the peers' pieces then overwrite what they do
 * cover, so exactly the missing floats keep the checkpoint's values). */
static gt_status fill_missing(const char *dir, uint64_t step, const pr_rank *mine, const pr_src *v, int count,
                              const pr_space *to, gt_ckpt_peer_stats *st) {
  ck_manifest m = {0};
  gt_status s = GT_OK;
  bool read = false;
  for (int i = 0; s == GT_OK && i < mine->want.n; i++) {
    const pr_slice *w = &mine->want.s[i];
    uint64_t got = covered(v, count, w), need = ck_box_volume(&w->box);
    if (got == need) continue;
    if (!read) {
      s = ck_manifest_read(dir, &m);
      read = true;
    }
    /* Floats of another step next to this step's would be a model no run
     * ever had: only a checkpoint of the very step the others hold fills. */
    if (s == GT_OK && (uint64_t)m.step != step)
      s = gt_errorf(GT_ENOTFOUND,
                    "%llu floats of %s are held by no rank left, and the newest checkpoint (%s) is of "
                    "step %lld, not of step %llu that the others hold: restart from the checkpoint",
                    (unsigned long long)(need - got), w->name, dir, (long long)m.step, (unsigned long long)step);
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

/* Whether every rank's part went well: one all-reduce of failure counts,
 * state held by no rank (GT_ENOTFOUND, which no retry mends) counted apart
 * so that every rank returns it alike. */
#define LOST_WEIGHT 65536.0f
static gt_status agree(gt_comm *world, gt_status mine) {
  if (!world || gt_comm_size(world) == 1) return mine;
  float bad = mine == GT_OK ? 0.0f : mine == GT_ENOTFOUND ? LOST_WEIGHT : 1.0f;
  GT_TRY(gt_comm_allreduce(world, &bad, 1, GT_F32, GT_COMM_SUM));
  if (mine != GT_OK) return mine;
  if (bad >= LOST_WEIGHT)
    return gt_errorf(GT_ENOTFOUND, "%g other rank(s) lack state that no rank left holds", floorf(bad / LOST_WEIGHT));
  return bad > 0 ? gt_errorf(GT_ESTATE, "%g other rank(s) could not take their part of the state", (double)bad) : GT_OK;
}

gt_status gt_ckpt_reshard_peers(gt_trainer *from, gt_trainer *to, const gt_ckpt_mirror *mirror, const char *fallback,
                                gt_ckpt_peer_stats *out) {
  if ((from && gt_model_params_sharded(gt_trainer_model(from))) || gt_model_params_sharded(gt_trainer_model(to)))
    return gt_errorf(GT_EUNSUPPORTED,
                     "resharding from peers is not supported with ZeRO-3 (sharded parameters): use ZeRO-2, "
                     "or load the last checkpoint");
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
  /* The predecessor's copy, when it is of this step, goes after this
   * rank's own state in its host space. */
  bool copy = mirror && from && mirror->step >= 0 && mirror->step == gt_trainer_step_index(from) && mirror->kept.n;
  if (s == GT_OK) s = pr_space_open(from, copy ? mirror->kept_floats : 0, &fs);
  if (s == GT_OK) s = pr_space_open(to, 0, &ts);
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
    s = pr_describe(&fs, false, partial > 0, &mine.hold);
  }
  if (s == GT_OK && copy) {
    memcpy(fs.buf + fs.used, mirror->copy, mirror->kept_floats * sizeof(float));
    for (int i = 0; i < mirror->kept.n && s == GT_OK; i++)
      s = pr_list_add(&mine.hold, mirror->kept.s[i].name, &mirror->kept.s[i].box, fs.used + mirror->kept.s[i].at);
    st.floats_mirrored = mirror->kept_floats;
  }
  if (s == GT_OK) s = pr_describe(&ts, true, false, &mine.want);
  s = agree(world, s); /* a rank that cannot describe its state must not leave the others in the exchange */
  if (s == GT_OK && world) {
    s = pr_exchange(world, &mine, all);
  } else if (s == GT_OK) {
    all[0] = mine;
    mine = (pr_rank){0};
  }
  /* The step: every rank that held state must be at the same one. */
  int holder = -1;
  for (int r = 0; s == GT_OK && r < n; r++) {
    if (!all[r].has_state) continue;
    if (holder >= 0 && (all[r].step != all[holder].step || all[r].opt_steps != all[holder].opt_steps))
      s = gt_errorf(GT_ESTATE,
                    "ranks %d and %d hold the state of different steps (%llu and %llu): the step in flight "
                    "must be finished or abandoned on every rank first",
                    holder, r, (unsigned long long)all[holder].step, (unsigned long long)all[r].step);
    if (holder < 0) holder = r;
  }
  if (s == GT_OK && holder < 0) s = gt_errorf(GT_ENOTFOUND, "no rank holds a trainer's state to move");
  if (s == GT_OK) s = sources(all, n, &v, &count);
  int miss_rank = -1, miss_slice = -1;
  uint64_t missing = 0;
  if (s == GT_OK) s = coverage(all, n, v, count, &miss_rank, &miss_slice, &missing);
  /* Each rank's own answer (ranks may differ in their fallback), then one
   * agreement: every rank stays in step with the others' collectives. */
  gt_status local = GT_OK;
  if (s == GT_OK && missing && !fallback) {
    const pr_slice *w = &all[miss_rank].want.s[miss_slice];
    local = gt_errorf(GT_ENOTFOUND,
                      "%llu floats of the state are held by no rank left (the first: %s, wanted by rank "
                      "%d): they were on the lost rank alone; give a checkpoint to take them from, or keep a copy on "
                      "a peer (gt_ckpt_mirror)",
                      (unsigned long long)missing, w->name, miss_rank);
  } else if (s == GT_OK && missing) {
    local = fill_missing(fallback, all[holder].step, &all[me], v, count, &ts, &st);
  }
  if (s == GT_OK) s = agree(world, local);
  if (s == GT_OK) s = each_piece(all, n, v, count, count_piece, &t);
  for (int k = 0; s == GT_OK && k < n; k++) s = run_round(world, all, n, v, count, &t, k, &fs, &ts, &st);
  if (s == GT_OK) s = agree(world, pr_space_store(&ts));
  if (s == GT_OK) {
    gt_trainer_set_step_index(to, (int)all[holder].step);
    gt_optimizer_set_steps(gt_trainer_optimizer(to), (int)all[holder].opt_steps);
    st.step = (int)all[holder].step;
    if (out) *out = st;
  }
  for (int r = 0; all && r < n; r++) {
    pr_list_free(&all[r].hold);
    pr_list_free(&all[r].want);
  }
  pr_list_free(&mine.hold);
  pr_list_free(&mine.want);
  free(all);
  free(v);
  free(t.floats);
  free(fs.buf);
  free(ts.buf);
  return s;
}
