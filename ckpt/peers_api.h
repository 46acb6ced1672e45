/* Checkpoints without storage, for the run library's in-process reshape:
 * copies of single-owner state on a peer (mirror.c), and the state moved
 * rank to rank into a new layout (peers.c); and a save given up when the
 * job loses a rank, and where saves stand. Internal to libgiant (shared
 * with the layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_CKPT_PEERS_API_H
#define GIANT_CKPT_PEERS_API_H

#include "giant/engine/checkpoint.h"
#include "giant/engine/trainer.h"

/* Where this rank's saves stand, for logs: a caller that polls it after
 * each step learns at which step each save ended. */
typedef struct gt_ckpt_stats {
  int writing;      /* the step of the save being written, -1 when none */
  int finished;     /* the step of the last save whose writer ended, -1 when none */
  gt_status result; /* how that one ended: on rank 0, GT_OK means committed */
  int skipped;      /* saves skipped because a writer was busy (the skip policy) */
  double stall_s;   /* seconds the training loop was held by saves: in gt_ckpt_save, and waiting
                       for a snapshot copy before the next update (CPU backend) */
} gt_ckpt_stats;

/* The job lost a rank: rank 0 stops waiting for shard reports that will
 * not come, so the save in flight ends at once without committing (a
 * save whose reports all came commits as usual). For the ranks left before
 * they reshape; destroy the checkpointer afterwards. */
void gt_ckpt_abandon(gt_ckpt *c);

void gt_ckpt_get_stats(gt_ckpt *c, gt_ckpt_stats *out);

typedef struct gt_ckpt_peer_stats {
  int step;                  /* the step index the state is at */
  uint64_t floats_kept;      /* copied within this rank */
  uint64_t floats_sent;      /* to other ranks */
  uint64_t floats_received;  /* from other ranks */
  uint64_t floats_from_ckpt; /* this rank's, held by no rank, read from the fallback checkpoint */
  uint64_t floats_mirrored;  /* of a peer's, offered from the copy this rank kept (gt_ckpt_mirror) */
} gt_ckpt_peer_stats;

/* Redundancy: a copy, on a peer, of the state this rank alone holds (a
 * ZeRO-1 optimizer shard; all of a rank's state where it has no data-
 * parallel replica), so that losing one rank loses nothing. */
typedef struct gt_ckpt_mirror gt_ckpt_mirror;
/* Finds what each rank alone holds (collective over the trainer's world);
 * rank r's copy goes to rank (r + stride) mod world: give the ranks per
 * node, so that it lives on another node (stride < 1 or >= world: 1). */
gt_status gt_ckpt_mirror_create(gt_trainer *tr, int stride, gt_ckpt_mirror **out);
/* Sends this rank's single-owner state to its buddy and keeps its
 * predecessor's, as of the trainer's current step. Collective; call it
 * between steps (every K steps: a copy older than the step being moved is
 * not used). */
gt_status gt_ckpt_mirror_update(gt_ckpt_mirror *m);
typedef struct gt_ckpt_mirror_info {
  int step;             /* of the copy kept, -1 when none */
  bool active;          /* some rank holds state that no other does: updates copy (on every rank) */
  int buddy;            /* the world rank that keeps this rank's copy */
  uint64_t floats_sent; /* per update */
  uint64_t floats_kept; /* the predecessor's copy */
  int updates;
  double seconds; /* spent in updates */
} gt_ckpt_mirror_info;
void gt_ckpt_mirror_stats(const gt_ckpt_mirror *m, gt_ckpt_mirror_info *out);
void gt_ckpt_mirror_destroy(gt_ckpt_mirror *m);

/* Moves the state the ranks hold in memory into a new layout: parameters,
 * optimizer state (ZeRO-1 shards included), the optimizer's update count and
 * the step index, from `from` (this rank's trainer at the old layout; NULL
 * on a rank that joins with nothing) into `to` (its trainer at the new
 * layout, on the new world's gt_dist). Collective over to's world. It uses
 * the checkpoint's slice descriptions: each float goes once, straight from
 * the lowest rank that holds it to each rank that needs it, in rounds of
 * pairwise exchanges over the world communicator. `mirror` (may be NULL):
 * this rank also offers the copy it keeps for its predecessor, when taken
 * at the step being moved. Floats that no rank holds (a shard that lived
 * on a lost rank alone, with no copy) are read from `fallback`,
 * a committed checkpoint's step directory, and logged, when it is of the
 * step being moved; with fallback NULL or of another step they are
 * GT_ENOTFOUND naming the first of them (the job must restart from the
 * checkpoint: mixing steps would make a model no run ever had). Every rank that holds
 * state must be at the same step (GT_ESTATE otherwise). The loader is the
 * caller's: restart it at the stream's next row. On failure `to` may hold
 * a part of the state; `from` is never changed. */
gt_status gt_ckpt_reshard_peers(gt_trainer *from, gt_trainer *to, const gt_ckpt_mirror *mirror, const char *fallback,
                                gt_ckpt_peer_stats *out);

#endif
