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

#include "giant/group.h"
#include "giant/status.h"

GT_API_BEGIN

/* The committed checkpoints under `dir`, newest first: steps[] gets up to
 * `max` step numbers, *n how many there are. */
gt_status gt_ckpt_list(const char *dir, int *steps, int max, int *n);

typedef struct gt_ckpt_summary {
  int step;
  gt_grid_layout layout;
  bool zero1;
  int zero; /* the ZeRO stage it was taken at */
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
/* Writes a step directory's parameters, whole, to out_dir/model.safetensors
 * (fp32) under a naming: "giant" (Giant's own names and layouts) or
 * "hf-gpt2" (Hugging Face's GPT2LMHeadModel, with out_dir/config.json for
 * it; `heads`, the model's head count, which the checkpoint does not
 * record, is needed there and ignored otherwise). docs/interop.md. */
gt_status gt_ckpt_export_safetensors(const char *path, const char *names, int heads, const char *out_dir);
/* For every tensor of `a`: the largest |a - b| over the largest |a| of the
 * tensor, one line each on `out`; *max_rel gets the largest. Tensors
 * missing from `b` or of another shape are an error naming them. */
gt_status gt_ckpt_diff(const char *a, const char *b, FILE *out, double *max_rel);

GT_API_END
#endif
