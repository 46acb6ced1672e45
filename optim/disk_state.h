/* The disk tier of an optimizer's state (docs/offload.md): the state lives
 * in one file, and an update streams it through a few staging buffers of
 * host memory, reading ahead and writing behind on an I/O thread, so that
 * the state may be larger than host memory.
 *
 * The file is created unlinked in the directory given (O_TMPFILE, or a
 * named file removed at once), so that a run that dies leaves nothing
 * behind, and its whole size is reserved when it is opened: a directory
 * that is full, read-only or missing fails there, not at step 900. State
 * k's float i sits at byte (k * floats + i) * 4; it starts at zero. */
#ifndef GIANT_OPTIM_DISK_STATE_H
#define GIANT_OPTIM_DISK_STATE_H

#include <stddef.h>

#include "giant/backend.h"

typedef struct disk_state disk_state;

/* nstates buffers of `floats` each, staged `stage_bytes` of host memory
 * from `be` (gt_backend_host_alloc, so a host budget counts it) at a time. */
gt_status disk_state_open(gt_backend *be, const char *dir, int nstates, size_t floats, size_t stage_bytes,
                          disk_state **out);
void disk_state_close(disk_state *d);
/* Floats of each state one staging buffer holds. */
size_t disk_state_chunk(const disk_state *d);

/* Synchronous copies of floats [at, at + n) of state k. */
gt_status disk_state_read(disk_state *d, int k, size_t at, size_t n, float *dst);
gt_status disk_state_write(disk_state *d, int k, size_t at, size_t n, const float *src);

/* For checkpoints, which must not take the whole state through host
 * memory: an unlinked file in the state's directory with room reserved
 * for a copy of all of it, laid out as the state's own file; and copies of
 * the whole state to and from such a file (copy_file_range, so the kernel
 * copies, or shares blocks where the file system can; through a staging
 * buffer where it cannot). Not during a stream. */
gt_status disk_state_scratch(disk_state *d, int *fd);
gt_status disk_state_copy_out(disk_state *d, int fd);
gt_status disk_state_copy_in(disk_state *d, int fd);

/* Runs fn over floats [from, to) of every state, a chunk at a time: for
 * each chunk [at, at + n), state[k] holds state k's floats, which fn may
 * change; they are written back. Chunk i+1 is read while fn works on
 * chunk i, and chunk i-1 written meanwhile. The first error (fn's or the
 * disk's) stops the stream and is returned. */
typedef gt_status (*disk_state_fn)(void *ctx, size_t at, size_t n, float *const *state);
gt_status disk_state_stream(disk_state *d, size_t from, size_t to, disk_state_fn fn, void *ctx);

#endif
