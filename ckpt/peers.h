/* Inside ckpt/: the state a rank holds, described as boxes of global
 * indices with where their floats are in the rank's host copy, for moving
 * state between ranks (peers.c) and keeping copies on a peer (mirror.c). */
#ifndef GIANT_CKPT_PEERS_H
#define GIANT_CKPT_PEERS_H

#include "ckpt/ckpt_internal.h"
#include "ckpt/peers_api.h"
#include "giant/engine/comm.h"
#include "giant/engine/trainer.h"

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
  int has_state; /* it held a trainer before (not a joining rank) */
  uint64_t step, opt_steps;
  pr_list hold, want;
} pr_rank;

/* A trainer's state on the host, in the order of the host space. */
typedef struct pr_space {
  gt_trainer *tr;
  float *buf;
  size_t nparams, lo, hi;
  int nstates;
  size_t used; /* floats of the trainer's state; what follows is the caller's */
} pr_space;

/* A copy of a peer's single-owner state (mirror.c). */
struct gt_ckpt_mirror {
  gt_trainer *tr;
  gt_comm *world;  /* NULL or of size 1: nothing to mirror */
  int buddy, pred; /* world ranks: who keeps this rank's copy, whose copy this rank keeps */
  pr_list mine;    /* this rank's slices that no other rank holds (at: in its host space) */
  uint64_t mine_floats;
  pr_list kept; /* the predecessor's (at: in `copy`) */
  uint64_t kept_floats;
  float *send, *copy;
  int step; /* the step index the copy was taken at, -1: none whole */
  int updates;
  double seconds; /* in updates */
};

/* A round's exchange goes in pieces of at most this many floats, so that
 * no single transfer outgrows what a transport frames at once. */
#define PR_CHUNK ((uint64_t)16 << 20)

gt_status pr_list_add(pr_list *l, const char *name, const ck_box *box, uint64_t at);
void pr_list_free(pr_list *l);
bool pr_same_box(const ck_box *a, const ck_box *b);
/* The boxes a trainer holds (want = false: what a save writes, owners
 * only) or must be given (want = true: mirrors too, under their owner's
 * name, as a load reads them). shard_params: of the parameters, hold only
 * the optimizer's range (ZeRO-1 after an update that was not gathered). */
gt_status pr_describe(const pr_space *sp, bool want, bool shard_params, pr_list *out);
/* A host copy of a trainer's state (NULL trainer: an empty space), with
 * `extra` floats after it; and the copy written back. */
gt_status pr_space_open(gt_trainer *tr, size_t extra, pr_space *sp);
gt_status pr_space_store(const pr_space *sp);
/* Every rank's pr_rank, all-gathered over `world`. */
gt_status pr_exchange(gt_comm *world, const pr_rank *me, pr_rank *all);

#endif
