/* A rank's state described as boxes of global indices (peers.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/peers.h"
#include "giant/engine/comm.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

gt_status pr_list_add(pr_list *l, const char *name, const ck_box *box, uint64_t at) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    pr_slice *s = realloc(l->s, (size_t)cap * sizeof *s);
    if (!s) return gt_errorf(GT_ENOMEM, "out of memory describing the state to move");
    l->s = s;
    l->cap = cap;
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
  return pr_list_add(r->l, r->name, box, r->base + first);
}

gt_status pr_describe(const pr_space *sp, bool want, bool shard_params, pr_list *out) {
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
      GT_TRY(pr_list_add(out, name, &blk, p->offset));
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

gt_status pr_space_open(gt_trainer *tr, size_t extra, pr_space *sp) {
  *sp = (pr_space){.tr = tr};
  if (!tr) return GT_OK;
  gt_model *m = gt_trainer_model(tr);
  gt_optimizer *opt = gt_trainer_optimizer(tr);
  sp->nparams = gt_model_buffer_floats(m);
  gt_optimizer_range(opt, &sp->lo, &sp->hi);
  sp->nstates = gt_optimizer_num_states(opt);
  sp->used = sp->nparams + (size_t)sp->nstates * (sp->hi - sp->lo);
  size_t n = sp->used + extra;
  sp->buf = malloc((n ? n : 1) * sizeof(float));
  if (!sp->buf) return gt_errorf(GT_ENOMEM, "out of memory for a host copy of this rank's state (%zu floats)", n);
  GT_TRY(gt_model_get_params(m, sp->buf, sp->nparams));
  for (int k = 0; k < sp->nstates; k++)
    GT_TRY(gt_optimizer_read_state(opt, k, 0, sp->hi - sp->lo, sp->buf + sp->nparams + (size_t)k * (sp->hi - sp->lo)));
  return GT_OK;
}

gt_status pr_space_store(const pr_space *sp) {
  gt_model *m = gt_trainer_model(sp->tr);
  gt_optimizer *opt = gt_trainer_optimizer(sp->tr);
  GT_TRY(gt_model_set_params(m, sp->buf, sp->nparams));
  for (int k = 0; k < sp->nstates; k++)
    GT_TRY(gt_optimizer_write_state(opt, k, 0, sp->hi - sp->lo, sp->buf + sp->nparams + (size_t)k * (sp->hi - sp->lo)));
  return GT_OK;
}

/* ---- the exchange of descriptions ---- */

static void put_list(ck_buf *b, const pr_list *l) {
  ck_put_u32(b, (uint32_t)l->n);
  for (int i = 0; i < l->n; i++) {
    const pr_slice *s = &l->s[i];
    ck_put_str(b, s->name);
    ck_put_u32(b, (uint32_t)s->box.ndim);
    for (int d = 0; d < s->box.ndim; d++) {
      ck_put_u64(b, (uint64_t)s->box.lo[d]);
      ck_put_u64(b, (uint64_t)s->box.hi[d]);
    }
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
    for (int d = 0; d < box.ndim && !r->bad; d++) {
      box.lo[d] = (int64_t)ck_get_u64(r);
      box.hi[d] = (int64_t)ck_get_u64(r);
    }
    uint64_t at = ck_get_u64(r);
    if (!r->bad) GT_TRY(pr_list_add(l, name, &box, at));
  }
  return r->bad ? gt_errorf(GT_EFORMAT, "a peer's state description is malformed") : GT_OK;
}

/* All-gather moves bytes untouched, so byte strings travel as floats. */
gt_status pr_exchange(gt_comm *world, const pr_rank *me, pr_rank *all) {
  int n = gt_comm_size(world);
  ck_buf b = {0};
  ck_put_u32(&b, (uint32_t)me->has_state);
  ck_put_u64(&b, me->step);
  ck_put_u64(&b, me->opt_steps);
  put_list(&b, &me->hold);
  put_list(&b, &me->want);
  if (b.oom) {
    ck_buf_free(&b);
    return gt_errorf(GT_ENOMEM, "out of memory describing the state to move");
  }
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
  free(lens);
  free(send);
  free(recv);
  return s;
}

bool pr_same_box(const ck_box *a, const ck_box *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d]) return false;
  return true;
}

void pr_list_free(pr_list *l) { free(l->s); }
