/* Inside ckpt/: the byte buffers manifests are encoded in, the manifest in
 * memory, boxes of global indices, and files written durably. */
#ifndef GIANT_CKPT_INTERNAL_H
#define GIANT_CKPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/engine/checkpoint.h"

#define CK_MAXDIM 4
#define CK_NAME 160
#define CK_SHA 32
#define CK_DTYPE_F32 1u
#define CK_MANIFEST "MANIFEST"

/* ---- little-endian encoding (buf.c) ---- */

typedef struct ck_buf {
  unsigned char *p;
  size_t len, cap;
  bool oom; /* an append failed; checked once at the end */
} ck_buf;

void ck_put(ck_buf *b, const void *p, size_t n);
void ck_put_u32(ck_buf *b, uint32_t v);
void ck_put_u64(ck_buf *b, uint64_t v);
void ck_put_str(ck_buf *b, const char *s);
void ck_buf_free(ck_buf *b);

/* A reader that fails (sticky) instead of running past the end. */
typedef struct ck_rd {
  const unsigned char *p;
  size_t len, at;
  bool bad;
} ck_rd;

uint32_t ck_get_u32(ck_rd *r);
uint64_t ck_get_u64(ck_rd *r);
/* Copies a string of at most cap-1 bytes; longer is malformed. */
void ck_get_str(ck_rd *r, char *out, size_t cap);
const unsigned char *ck_get(ck_rd *r, size_t n);

/* ---- boxes of global indices (box.c) ---- */

typedef struct ck_box {
  int ndim;
  int64_t lo[CK_MAXDIM], hi[CK_MAXDIM];
} ck_box;

uint64_t ck_box_volume(const ck_box *b);
bool ck_box_intersect(const ck_box *a, const ck_box *b, ck_box *out);
/* The box a parameter's local block is in its global tensor. */
ck_box ck_param_box(const gt_param *p);
/* Cuts floats [a, b) of a row-major block `blk` into boxes, each one run of
 * consecutive floats: fn(box, first float of the run) for each. */
typedef gt_status (*ck_box_fn)(void *ctx, const ck_box *box, uint64_t first);
gt_status ck_range_boxes(const ck_box *blk, uint64_t a, uint64_t b, ck_box_fn fn, void *ctx);
/* The intersection of boxes sb and db as runs of floats contiguous in both
 * (row-major) blocks, in increasing order of their offsets in sb's block:
 * fn(run's first float in sb's block, in db's, floats) for each. Trailing
 * dimensions that both blocks hold whole merge into one run. */
typedef gt_status (*ck_run_fn)(void *ctx, uint64_t src, uint64_t dst, uint64_t n);
gt_status ck_box_runs(const ck_box *sb, const ck_box *db, ck_run_fn fn, void *ctx);

/* ---- the manifest (manifest.c) ---- */

typedef struct ck_tensor {
  char name[CK_NAME];
  uint32_t dtype;
  int ndim;
  int64_t shape[CK_MAXDIM];
} ck_tensor;

/* A slice's bytes are hashed in chunks of the manifest's chunk size
 * (the last one shorter); its hashes are m->hashes[hash ...]. */
typedef struct ck_slice {
  int tensor;
  ck_box box;
  int file;
  uint64_t offset, length;
  size_t hash;
} ck_slice;

typedef struct ck_blob {
  char name[CK_NAME];
  unsigned char *bytes;
  size_t len;
} ck_blob;

typedef struct ck_manifest {
  int64_t step;
  uint64_t chunk; /* bytes per hashed chunk; 0 (version 1): a slice is one chunk */
  unsigned char (*hashes)[CK_SHA];
  size_t nhashes;
  ck_tensor *tensors;
  int ntensors;
  ck_slice *slices;
  int nslices;
  char (*files)[64];
  int nfiles;
  ck_blob *blobs;
  int nblobs;
} ck_manifest;

void ck_manifest_free(ck_manifest *m);
int ck_manifest_tensor(const ck_manifest *m, const char *name);
const ck_blob *ck_manifest_blob(const ck_manifest *m, const char *name);
/* Adds a tensor (or finds it, checking the shape) and returns its index. */
gt_status ck_manifest_add_tensor(ck_manifest *m, const char *name, int ndim, const int64_t *shape, int *index);
/* Copies the slice, with its chunks' hashes (NULL: zeros, to be filled);
 * sets the copy's `hash`. */
gt_status ck_manifest_add_slice(ck_manifest *m, const ck_slice *s, const unsigned char (*hashes)[CK_SHA]);
/* A slice's chunks, and where chunk k lies in the slice's bytes. */
uint64_t ck_chunks(const ck_manifest *m, const ck_slice *s);
void ck_chunk_span(const ck_manifest *m, const ck_slice *s, uint64_t k, uint64_t *at, uint64_t *len);
/* A chunk size is a multiple of 64 bytes in [64, 1 GiB]. */
bool ck_chunk_valid(uint64_t chunk);
gt_status ck_manifest_add_file(ck_manifest *m, const char *file, int *index);
/* Copies the bytes; a blob of a name already there is left as it was. */
gt_status ck_manifest_add_blob(ck_manifest *m, const char *name, const void *bytes, size_t len);
/* Appends everything of `from` (its files, tensors, slices, blobs). */
gt_status ck_manifest_merge(ck_manifest *to, const ck_manifest *from);

/* The body alone (for the store) and the framed file (magic, version,
 * length, body, SHA-256 of the body). */
gt_status ck_manifest_encode(const ck_manifest *m, ck_buf *out);
gt_status ck_manifest_decode(const unsigned char *p, size_t len, const char *what, ck_manifest *out);
gt_status ck_manifest_write(const char *dir, const ck_manifest *m);
/* Reads and checks dir/MANIFEST, including that the slices of every
 * tensor cover it exactly once; errors name the file. */
gt_status ck_manifest_read(const char *dir, ck_manifest *out);
gt_status ck_manifest_read_file(const char *path, ck_manifest *out);
/* A committed manifest's slices tile every tensor: no two overlap and none
 * is missing (cover.c). A rank's own report covers its part only. */
gt_status ck_manifest_check_cover(const ck_manifest *m, const char *what);
/* The same framing under another name in dir (durably). */
gt_status ck_manifest_write_as(const char *dir, const char *name, const ck_manifest *m);

/* ---- files (files.c) ---- */

void ck_sha256(const void *p, size_t n, unsigned char out[CK_SHA]);
/* A file written durably: to dir/.name.tmp, then fsync, rename to
 * dir/name, fsync of the directory. A failed write is remembered and
 * reported (with the temporary file removed) by commit. */
typedef struct ck_file {
  int fd, err;
  char tmp[4200], path[4200];
  const char *dir;
} ck_file;
gt_status ck_file_open(ck_file *f, const char *dir, const char *name);
/* The same with O_DIRECT where the file system takes it (*direct says):
 * writes must then be of whole 4 KiB blocks from 4 KiB-aligned memory. */
gt_status ck_file_open_direct(ck_file *f, const char *dir, const char *name, bool *direct);
void ck_file_write(ck_file *f, const void *p, size_t n);
gt_status ck_file_commit(ck_file *f);
/* The three at once for bytes in memory. */
gt_status ck_write_durable(const char *dir, const char *name, const void *p, size_t n);
gt_status ck_fsync_dir(const char *dir);
/* All n bytes at offset off of fd, read into buf or written from it
 * (pread/pwrite go on after a short transfer or EINTR). Returns 0 or the
 * errno; a file that ends first, or a write that makes no progress, EIO. */
int ck_transfer(int fd, bool write, void *buf, size_t n, uint64_t off);
gt_status ck_mkdir(const char *dir);
/* Incremental SHA-256, for chunks that arrive in pieces. */
typedef struct ck_hasher ck_hasher;
ck_hasher *ck_hasher_new(void);
void ck_hasher_free(ck_hasher *h);
void ck_hasher_start(ck_hasher *h);
void ck_hasher_add(ck_hasher *h, const void *p, size_t n);
void ck_hasher_end(ck_hasher *h, unsigned char out[CK_SHA]);
/* A slice's shard file open for reading; *bytes_read counts what it read. */
typedef struct ck_shard {
  int fd;
  char path[4200];
  uint64_t *bytes_read;
} ck_shard;
gt_status ck_shard_open(ck_shard *f, const char *dir, const ck_manifest *m, const ck_slice *s, uint64_t *bytes_read);
void ck_shard_close(ck_shard *f);
/* Reads chunks [k0, k1) of slice s into buf (the slice's bytes from chunk
 * k0's start) and checks each against its SHA-256; an error names the
 * file, the tensor and the chunk. */
gt_status ck_read_chunks(ck_shard *f, const ck_manifest *m, const ck_slice *s, uint64_t k0, uint64_t k1, void *buf);
/* Fills `want` (row-major over its box) from tensor `tensor`'s stored
 * slices in checkpoint `dir`, reading only the chunks that hold a part of
 * it, checking each, and that the slices cover the box exactly once.
 * Adds the bytes read to *bytes_read. */
gt_status ck_fill_box(const char *dir, const ck_manifest *m, int tensor, const ck_box *want, float *dst,
                      uint64_t *bytes_read);
/* Where a slice's bytes are when the writer takes them: in host memory,
 * or in a file (a snapshot of optimizer state kept on disk). */
typedef struct ck_src {
  const float *p; /* NULL: in fd, from byte `at` */
  int fd;
  uint64_t at;
} ck_src;
/* Writes this rank's shard `name` in dir: every slice of `part` from its
 * bytes src[i], hashing each chunk into part's hashes (write.c). */
gt_status ck_write_shard(const char *dir, const char *name, ck_manifest *part, const ck_src *src);
/* Removes a checkpoint directory and the files in it. */
gt_status ck_remove_dir(const char *dir);

/* ---- directories of checkpoints (dirs.c) ---- */

/* Committed steps under root, newest first (malloc'ed). */
gt_status ck_committed(const char *root, int **steps, int *n);
void ck_step_dir(const char *root, int step, char *out, size_t cap);
/* After committing `step`: moves `latest` to it, deletes committed
 * checkpoints beyond the newest `keep` and uncommitted ones older than it. */
gt_status ck_after_commit(const char *root, int step, int keep);

#endif

/* ---- the checkpointer (save.c, state.c, load.c) ---- */

#include <pthread.h>
#include <stdatomic.h>

#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/trainer.h"

struct gt_ckpt {
  gt_ckpt_config cfg;
  char *root;
  gt_trainer *tr;
  gt_model *m;
  gt_optimizer *opt;
  gt_loader *loader;
  gt_dist *dist; /* NULL: one process */
  gt_backend *be;
  gt_plan plan;   /* a one-process plan without dist */
  char keys[128]; /* store namespace */
  /* Host snapshot buffers, allocated once: the flat parameter buffer and
   * the optimizer's state over [lo, hi). State kept on disk has no host
   * buffer (it may not fit host memory): a file beside it takes its
   * snapshots and the loads being assembled (state_fd), and loads pass
   * through `staging` on the way, a quarter of one state (4 pieces or
   * more), at most 1 Mi floats. */
  float *params;
  size_t nparams;
  float *state[2];
  int nstates;
  size_t lo, hi;
  int state_fd; /* -1: the state is in memory */
  float *staging;
  size_t staging_floats;
  ck_manifest user;   /* blobs put by the application */
  ck_manifest loaded; /* the blobs of the last checkpoint loaded */
  int loads;          /* loads so far (names the store keys of the next) */
  /* The save in flight: this rank's part of the manifest, where each of
   * its slices' bytes are, and the thread writing them. */
  ck_manifest part;
  int *src_buf;     /* which buffer slice i is in: 0 the parameters, k + 1 optimizer state k */
  uint64_t *src_at; /* and its first float there */
  ck_src *src;      /* where its bytes are, once copied (ck_snapshot_copy) */
  pthread_t thread;
  bool joinable;
  pthread_mutex_t mu;
  bool busy;         /* under mu: the thread has not finished */
  gt_status result;  /* of the last finished save */
  char why[1024];    /* its message when it failed */
  int64_t finished;  /* under mu: the step of the last finished save (-1: none) */
  int skipped;       /* saves skipped because a writer was busy */
  double save_delay; /* GT_FAULT slowsave: seconds each save waits before writing */
  /* On the CPU backend the snapshot copy is the writer thread's first
   * task, done while the next step's forward and backward run (they only
   * read the parameters); the model's first write waits for it
   * (gt_model_add_reader). Elsewhere the copy is made in gt_ckpt_save. */
  bool deferred_copy;
  bool copying; /* under mu: the writer has not finished copying the snapshot */
  pthread_cond_t copied;
  double stall_s;       /* under mu: seconds training was held by saves */
  atomic_int abandoned; /* gt_ckpt_abandon: stop waiting for other ranks' shards */
};

/* The tensor names of parameters and of optimizer state buffer k. */
void ck_param_tensor(const char *param, char *out, size_t cap);
void ck_state_tensor(gt_optim_kind kind, int k, const char *param, char *out, size_t cap);
/* Describes, in c->part and c->src, the slices this rank writes and the
 * blobs it contributes, and copies the slices' bytes to the host buffers
 * unless c->deferred_copy (the writer thread then calls ck_snapshot_copy). */
gt_status ck_snapshot(gt_ckpt *c);
gt_status ck_snapshot_copy(gt_ckpt *c);
