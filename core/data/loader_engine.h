/* The loader's functions for the library's own training loop and
 * checkpoints: where the stream stands, restarting it at a row, resharing
 * its rows, and the token file's header checks. Internal to libgiant
 * (shared with the layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_CORE_LOADER_ENGINE_H
#define GIANT_CORE_LOADER_ENGINE_H

#include "giant/data.h"

/* Reads and checks the 64-byte header at the start of `bytes` (`size` is the
 * whole file's size, checked against the count). `name` is used in errors. */
gt_status gt_tokfile_parse_header(const unsigned char *bytes, uint64_t size, const char *name, gt_tokfile_header *out);

/* Whether a read found the file unlike what was opened (truncated, or
 * unreadable): a bad input that a retry would meet again. */
bool gt_loader_file_failed(const gt_loader *l);

/* Restart from micro-batch `index` (counted from the last restart_at). */
gt_status gt_loader_seek(gt_loader *l, uint64_t index);

uint64_t gt_loader_position(const gt_loader *l);

/* The stream is one sequence of global sample indices (rows, counted
 * across epochs); micro-batch k of a replica after a restart at row R takes
 * rows R + k*total + offset .. + B-1 (even shares: offset = shard*B, total =
 * nshards*B). When every replica has taken k micro-batches, next_row = R +
 * k*total is the first row none of them has: restarting every replica
 * there, at any replica count, B or shares, continues the stream with no
 * row skipped or repeated. */
uint64_t gt_loader_next_row(const gt_loader *l);

gt_status gt_loader_restart_at(gt_loader *l, uint64_t row);

/* Takes a new share from the next micro-batch on: restarts at next_row with
 * B rows at `offset` of every `total` (0 < B <= the B the loader was opened
 * with, offset + B <= total). Called by every replica at the same step
 * boundary, with shares that tile 0..total, the stream goes on exactly
 * once. */
gt_status gt_loader_reshare(gt_loader *l, int B, int offset, int total);

const gt_loader_config *gt_loader_get_config(const gt_loader *l);

/* Rows one epoch holds: windows of T_max tokens (FIXED) or documents of at
 * least 2 tokens (DOCUMENTS). */
uint64_t gt_loader_rows_per_epoch(const gt_loader *l);

#endif
