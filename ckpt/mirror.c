/* Copies of single-owner state on a peer (gt_ckpt_mirror). At creation the
 * ranks all-gather what they hold and each finds the slices that no other
 * rank holds (a ZeRO-1 optimizer shard; everything of a rank without a
 * data-parallel replica). Each update sends those to the buddy, `stride`
 * ranks on (the next node's rank when stride is the ranks per node), and
 * keeps the predecessor's, with the step they were taken at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/peers.h"
#include "giant/engine/dist.h"
#include "giant/log.h"
#include "ckpt/peers_api.h"
#include "core/model/model_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

/* One held slice of one rank, for finding the ones nobody else holds. */
typedef struct held {
  const pr_slice *s;
  int rank;
} held;

static int cmp_box(const ck_box *a, const ck_box *b) {
  if (a->ndim != b->ndim) return a->ndim - b->ndim;
  for (int d = 0; d < a->ndim; d++) {
    if (a->lo[d] != b->lo[d]) return a->lo[d] < b->lo[d] ? -1 : 1;
    if (a->hi[d] != b->hi[d]) return a->hi[d] < b->hi[d] ? -1 : 1;
  }
  return 0;
}

static int by_slice(const void *x, const void *y) {
  const held *a = x, *b = y;
  int c = strcmp(a->s->name, b->s->name);
  if (c) return c;
  c = cmp_box(&a->s->box, &b->s->box);
  return c ? c : a->rank - b->rank;
}

static bool same_slice(const held *a, const held *b) {
  return !strcmp(a->s->name, b->s->name) && !cmp_box(&a->s->box, &b->s->box);
}

/* Whether v[i] (sorted by slice) is held by its rank alone. */
static bool alone(const held *v, int count, int i) {
  return (i == 0 || !same_slice(&v[i - 1], &v[i])) && (i + 1 == count || !same_slice(&v[i + 1], &v[i]));
}

/* The slices of `rank` that no other rank holds, into out (at: their place
 * in `rank`'s host space when keep_at, else packed one after another). */
static gt_status unique_of(const held *v, int count, int rank, bool keep_at, pr_list *out, uint64_t *floats) {
  *floats = 0;
  for (int i = 0; i < count; i++) {
    if (!alone(v, count, i) || v[i].rank != rank) continue;
    GT_TRY(pr_list_add(out, v[i].s->name, &v[i].s->box, keep_at ? v[i].s->at : *floats));
    *floats += ck_box_volume(&v[i].s->box);
  }
  return GT_OK;
}

gt_status gt_ckpt_mirror_create(gt_trainer *tr, int stride, gt_ckpt_mirror **out) {
  *out = NULL;
  if (gt_model_params_sharded(gt_trainer_model(tr)))
    return gt_errorf(GT_EUNSUPPORTED,
                     "copying the state to a peer (--mirror-every) is not supported with ZeRO-3 (sharded "
                     "parameters): use ZeRO-2, or checkpoints alone");
  gt_dist *dist = gt_trainer_dist(tr);
  gt_ckpt_mirror *m = calloc(1, sizeof *m);
  if (!m) return gt_errorf(GT_ENOMEM, "out of memory");
  m->tr = tr;
  m->step = -1;
  m->world = dist ? gt_grid_world(gt_dist_grid(dist)) : NULL;
  int n = m->world ? gt_comm_size(m->world) : 1, me = m->world ? gt_comm_rank(m->world) : 0;
  if (stride < 1 || stride >= n) stride = 1;
  m->buddy = (me + stride) % n;
  m->pred = (me - stride + n) % n;
  if (n == 1) {
    *out = m;
    return GT_OK;
  }
  /* What every rank holds (no floats are read: the space's sizes only). */
  gt_optimizer *opt = gt_trainer_optimizer(tr);
  pr_space sp = {
      .tr = tr, .nparams = gt_model_buffer_floats(gt_trainer_model(tr)), .nstates = gt_optimizer_num_states(opt)};
  gt_optimizer_range(opt, &sp.lo, &sp.hi);
  pr_rank mine = {.has_state = 1};
  pr_rank *all = calloc((size_t)n, sizeof *all);
  held *v = NULL;
  gt_status s = all ? pr_describe(&sp, false, false, &mine.hold) : gt_errorf(GT_ENOMEM, "out of memory");
  if (s == GT_OK) s = pr_exchange(m->world, &mine, all);
  int count = 0;
  for (int r = 0; s == GT_OK && r < n; r++) count += all[r].hold.n;
  if (s == GT_OK && !(v = malloc((size_t)(count ? count : 1) * sizeof *v))) s = gt_errorf(GT_ENOMEM, "out of memory");
  for (int r = 0, k = 0; s == GT_OK && r < n; r++)
    for (int i = 0; i < all[r].hold.n; i++) v[k++] = (held){&all[r].hold.s[i], r};
  if (s == GT_OK) qsort(v, (size_t)count, sizeof *v, by_slice);
  if (s == GT_OK) s = unique_of(v, count, me, true, &m->mine, &m->mine_floats);
  if (s == GT_OK) s = unique_of(v, count, m->pred, false, &m->kept, &m->kept_floats);
  /* Where every float has a replica, there is nothing to copy, on any rank. */
  bool any = false;
  for (int i = 0; s == GT_OK && i < count && !any; i++) any = alone(v, count, i);
  if (s == GT_OK && !any) m->world = NULL;
  if (s == GT_OK) {
    m->send = malloc((size_t)(m->mine_floats ? m->mine_floats : 1) * sizeof(float));
    m->copy = malloc((size_t)(m->kept_floats ? m->kept_floats : 1) * sizeof(float));
    if (!m->send || !m->copy)
      s = gt_errorf(GT_ENOMEM, "out of memory for a mirror of %llu floats",
                    (unsigned long long)(m->mine_floats + m->kept_floats));
  }
  for (int r = 0; all && r < n; r++) {
    pr_list_free(&all[r].hold);
    pr_list_free(&all[r].want);
  }
  pr_list_free(&mine.hold);
  free(all);
  free(v);
  if (s != GT_OK) {
    gt_ckpt_mirror_destroy(m);
    return s;
  }
  *out = m;
  return GT_OK;
}

gt_status gt_ckpt_mirror_update(gt_ckpt_mirror *m) {
  if (!m->world || gt_comm_size(m->world) == 1) return GT_OK;
  double t0 = gt_now();
  gt_model *model = gt_trainer_model(m->tr);
  gt_optimizer *opt = gt_trainer_optimizer(m->tr);
  gt_backend *be = gt_model_backend(model);
  size_t nparams = gt_model_buffer_floats(model), lo, hi;
  gt_optimizer_range(opt, &lo, &hi);
  uint64_t off = 0;
  for (int i = 0; i < m->mine.n; i++) {
    /* A held slice is one run of floats: of the parameters, or of state k's range. */
    const pr_slice *sl = &m->mine.s[i];
    uint64_t v = ck_box_volume(&sl->box);
    if (sl->at < nparams) {
      GT_TRY(gt_backend_download(be, m->send + off, gt_model_params(model) + sl->at, v * sizeof(float)));
    } else {
      size_t k = (sl->at - nparams) / (hi - lo);
      GT_TRY(gt_optimizer_read_state(opt, (int)k, sl->at - nparams - k * (hi - lo), v, m->send + off));
    }
    off += v;
  }
  m->step = -1; /* until the new copy is whole */
  uint64_t most = m->mine_floats > m->kept_floats ? m->mine_floats : m->kept_floats;
  for (uint64_t o = 0; o < most || o == 0; o += PR_CHUNK) {
    uint64_t so = m->mine_floats > o ? (m->mine_floats - o < PR_CHUNK ? m->mine_floats - o : PR_CHUNK) : 0;
    uint64_t ro = m->kept_floats > o ? (m->kept_floats - o < PR_CHUNK ? m->kept_floats - o : PR_CHUNK) : 0;
    GT_TRY(
        gt_comm_sendrecv(m->world, m->send + (so ? o : 0), so, m->buddy, m->copy + (ro ? o : 0), ro, m->pred, GT_F32));
    if (most == 0) break;
  }
  m->step = gt_trainer_step_index(m->tr);
  m->seconds += gt_now() - t0;
  m->updates++;
  return GT_OK;
}

void gt_ckpt_mirror_stats(const gt_ckpt_mirror *m, gt_ckpt_mirror_info *out) {
  *out = (gt_ckpt_mirror_info){.step = m->step,
                               .active = m->world != NULL,
                               .buddy = m->buddy,
                               .floats_sent = m->mine_floats,
                               .floats_kept = m->kept_floats,
                               .updates = m->updates,
                               .seconds = m->seconds};
}

void gt_ckpt_mirror_destroy(gt_ckpt_mirror *m) {
  if (!m) return;
  pr_list_free(&m->mine);
  pr_list_free(&m->kept);
  free(m->send);
  free(m->copy);
  free(m);
}
