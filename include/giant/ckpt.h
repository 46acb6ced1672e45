/* Checkpoints: sharded, asynchronous, verified, resharded on load.
 *
 * A checkpoint is a directory `step-%08d/` under a root directory, holding
 * one shard file per writing rank and a MANIFEST (docs/checkpoint-format.md).
 * It carries the master fp32 parameters, the optimizer state (ZeRO-1 shards
 * included), the trainer's step index (which fixes the learning-rate
 * schedule's position), the optimizer's step count, the data loader's
 * cursor of every data-parallel replica, the plan it was taken at, and the
 * application's own blobs.
 *
 * Every tensor is stored by its global name and shape as slices, each a box
 * of global index ranges hashed in fixed-size chunks (SHA-256 each), so a
 * checkpoint taken at one layout (dp, tp, pp, ZeRO-1, sequence parallelism)
 * loads into any other, each rank reading and checking only the chunks
 * that hold what it needs.
 *
 * Saving is collective (every rank of the job calls gt_ckpt_save at the same
 * step) and asynchronous: the call copies this rank's state into reused host
 * buffers and returns; a background thread hashes and writes. On the CPU
 * backend even the copy is the background thread's: the next step's
 * forward and backward run meanwhile, and its update waits for the copy
 * (gt_model_add_reader), so a save holds training for the copy's time at
 * most, and usually not at all. A checkpoint
 * becomes visible only when rank 0 has renamed its MANIFEST into place, which
 * it does after every rank has reported its shard durable through the job's
 * store; a crash at any moment leaves the previous checkpoint intact.
 */
#ifndef GIANT_CKPT_H
#define GIANT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "giant/comm.h"
#include "giant/grid.h"
#include "giant/data.h"
#include "giant/store.h"
#include "giant/trainer.h"

GT_API_BEGIN

#define GT_CKPT_MAGIC "GIANTCKP"
#define GT_CKPT_VERSION 2u /* written; version 1 (one hash per slice) is still read */
#define GT_CKPT_CHUNK_DEFAULT (4u << 20)

/* What a save does while the previous one is still being written. */
typedef enum gt_ckpt_busy {
  GT_CKPT_BUSY_WAIT = 0, /* wait for it to finish, then save */
  GT_CKPT_BUSY_SKIP = 1, /* skip this save (logged) when any rank's writer is still busy: the
                            ranks agree through one all-reduce of a flag, so all skip the
                            same saves */
} gt_ckpt_busy;

typedef struct gt_ckpt_config {
  const char *dir;   /* root directory; created if missing */
  int keep;          /* committed checkpoints to keep (0 = all); the newest is never deleted */
  gt_ckpt_busy busy;
  bool sync;         /* every save waits for its write and commit (for benchmarks and tools) */
  /* Distributed: the job's store, through which ranks report their shards
   * durable (NULL with one process). The trainer's gt_dist gives the world,
   * the rank and the key namespace. */
  gt_store *store;
  int timeout_ms;    /* how long rank 0 waits for the other ranks' shards (0: 300 s) */
  /* Bytes of a slice under one SHA-256 (0: GT_CKPT_CHUNK_DEFAULT, 4 MiB): a
   * load reads and checks whole chunks, so smaller chunks read less around
   * what a rank needs and cost 32 bytes of manifest each. A multiple of 64,
   * at most 1 GiB; the same on every rank. */
  uint64_t chunk_bytes;
} gt_ckpt_config;

typedef struct gt_ckpt gt_ckpt;

/* A checkpointer of the trainer's model, optimizer and step, and of
 * `loader`'s cursor (NULL: no loader). Allocates the host snapshot buffers
 * once, sized for this rank's state (pinned on a GPU). Destroy it before
 * the trainer, the model and the backend. */
gt_status gt_ckpt_create(const gt_ckpt_config *cfg, gt_trainer *tr, gt_loader *loader, gt_ckpt **out);
/* Waits for a save in flight, then frees everything. */
void gt_ckpt_destroy(gt_ckpt *c);

/* Application state saved with every later checkpoint under `name` (a copy
 * is kept; putting a name again replaces it). Blobs are job-wide: put the
 * same bytes on every rank, or on rank 0 only. */
gt_status gt_ckpt_put_blob(gt_ckpt *c, const char *name, const void *bytes, size_t len);
/* After a load: the blob `name` from the loaded checkpoint (*bytes points
 * into the checkpointer, valid until the next load). GT_ENOTFOUND if absent. */
gt_status gt_ckpt_get_blob(const gt_ckpt *c, const char *name, const void **bytes, size_t *len);

/* Saves the state after the trainer's last step (its step index names the
 * checkpoint). Collective. Returns once the state is copied to host
 * buffers; the writing goes on in the background unless the config asks
 * for sync. A write that fails later is logged with its reason and leaves
 * the previous checkpoint as it was; training goes on. */
gt_status gt_ckpt_save(gt_ckpt *c);
/* The job lost a rank: rank 0 stops waiting for shard reports that will
 * not come, so the save in flight ends at once without committing (a
 * save whose reports all came commits as usual). For the ranks left before
 * they reshape; destroy the checkpointer afterwards. */
void gt_ckpt_abandon(gt_ckpt *c);
/* Waits for a save in flight; returns how it ended (GT_OK when none). */
gt_status gt_ckpt_wait(gt_ckpt *c);

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
void gt_ckpt_get_stats(gt_ckpt *c, gt_ckpt_stats *out);

typedef struct gt_ckpt_info {
  int step;            /* the trainer's step index in it */
  char path[4096];     /* its directory */
  gt_grid_layout layout; /* the layout it was taken at */
  bool zero1;
  int fallbacks;       /* newer committed checkpoints that failed to load and were passed over */
  uint64_t bytes_read; /* of shard files, by this rank, for the checkpoint it loaded (each byte checked) */
} gt_ckpt_info;

/* Loads the newest committed checkpoint under the root directory, or `path`
 * (a step directory) when given, into this rank's model, optimizer, trainer
 * and loader, whatever layout it was taken at. Collective. A rank reads only
 * the chunks of stored slices that hold what it needs, and checks each
 * against its SHA-256; every tensor's name, shape and dtype is checked
 * against the model, and the slices of every tensor against each other
 * (they must cover it exactly once). Without `path`, a checkpoint that fails to load on any
 * rank is passed over (logged) for the next newest one. GT_ENOTFOUND when
 * there is no committed checkpoint (start from scratch); on any other
 * failure the model's state is unchanged. */
gt_status gt_ckpt_load(gt_ckpt *c, const char *path, gt_ckpt_info *info);

/* ---- resharding from peers, without storage ---- */

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
  int step;                  /* of the copy kept, -1 when none */
  bool active;               /* some rank holds state that no other does: updates copy (on every rank) */
  int buddy;                 /* the world rank that keeps this rank's copy */
  uint64_t floats_sent;      /* per update */
  uint64_t floats_kept;      /* the predecessor's copy */
  int updates;
  double seconds;            /* spent in updates */
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

/* ---- inspecting checkpoints (tools; no trainer needed) ---- */

/* The committed checkpoints under `dir`, newest first: steps[] gets up to
 * `max` step numbers, *n how many there are. */
gt_status gt_ckpt_list(const char *dir, int *steps, int max, int *n);

typedef struct gt_ckpt_summary {
  int step;
  gt_grid_layout layout;
  bool zero1;
  int tensors, slices, files, blobs;
  uint64_t bytes; /* of all slices */
} gt_ckpt_summary;

/* Reads a step directory's manifest (checked) and sums it up. */
gt_status gt_ckpt_describe(const char *path, gt_ckpt_summary *out);
/* Reads every chunk of every slice of a step directory and checks its
 * SHA-256; each bad chunk is named on `report` (when not NULL). *bad gets
 * their count; the status is the first failure's. */
gt_status gt_ckpt_verify(const char *path, FILE *report, int *bad);
/* Writes a step directory as one file in the single-process layout, for
 * export: the manifest format (magic, version, SHA-256) with no shard
 * files and no slices, every tensor whole as a blob `data/<tensor>`
 * (row-major little-endian fp32), and the checkpoint's own blobs. */
gt_status gt_ckpt_export(const char *path, const char *out_file);
/* For every tensor of `a`: the largest |a - b| over the largest |a| of the
 * tensor, one line each on `out`; *max_rel gets the largest. Tensors
 * missing from `b` or of another shape are an error naming them. */
gt_status gt_ckpt_diff(const char *a, const char *b, FILE *out, double *max_rel);

GT_API_END
#endif
