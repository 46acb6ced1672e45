/* Checkpoints from an engine's own loop: a checkpointer of a trainer's
 * state, saved asynchronously and loaded into any layout. The format and
 * how a save stays safe are in giant/ckpt.h, which also reads checkpoints
 * without a trainer (the user's API); the run library checkpoints for
 * programs that use it (giant/run.h). */
#ifndef GIANT_ENGINE_CHECKPOINT_H
#define GIANT_ENGINE_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/ckpt.h"
#include "giant/data.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"

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
  const char *dir; /* root directory; created if missing */
  int keep;        /* committed checkpoints to keep (0 = all); the newest is never deleted */
  gt_ckpt_busy busy;
  bool sync; /* every save waits for its write and commit (for benchmarks and tools) */
  /* Distributed: the job's store, through which ranks report their shards
   * durable (NULL with one process). The trainer's gt_dist gives the world,
   * the rank and the key namespace. */
  gt_store *store;
  int timeout_ms; /* how long rank 0 waits for the other ranks' shards (0: 300 s) */
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
/* Waits for a save in flight; returns how it ended (GT_OK when none). */
gt_status gt_ckpt_wait(gt_ckpt *c);

typedef struct gt_ckpt_info {
  int step;              /* the trainer's step index in it */
  char path[4096];       /* its directory */
  gt_grid_layout layout; /* the layout it was taken at */
  bool zero1;
  int zero;            /* the ZeRO stage it was taken at */
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

GT_API_END
#endif
