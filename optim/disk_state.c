/* The disk tier of an optimizer's state (disk_state.h).
 *
 * One I/O thread serves a queue of chunk reads and writes in order. With
 * NBUF staging buffers, a stream keeps NBUF - 1 reads ahead of the chunk
 * being updated, and a chunk's write is queued as soon as it is updated:
 * the read that next fills the same buffer is queued after that write, so
 * the queue's order alone keeps a buffer from being refilled before it is
 * written. */
#include "optim/disk_state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBUF 3
#define QCAP 8 /* at most NBUF - 1 reads and NBUF writes are ever queued */
#define MIN_CHUNK 1024

typedef enum { OP_READ, OP_WRITE } op_kind;

typedef struct request {
  op_kind op;
  int buf;
  size_t at, n;
} request;

struct disk_state {
  gt_backend *be;
  char *dir;
  int fd, nstates;
  size_t floats, chunk;
  float *stage[NBUF]; /* state k of a chunk at stage[b] + k * chunk */
  pthread_t io;
  bool io_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  request q[QCAP];
  int head, count;
  uint64_t queued, done; /* requests ever queued, and served */
  bool quit;
  gt_status err; /* the first I/O error, with its message */
  char msg[600];
};

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* Whole transfers: pread and pwrite may move less than asked. */
static int transfer(int fd, op_kind op, void *buf, size_t bytes, off_t off) {
  char *p = buf;
  while (bytes) {
    ssize_t r = op == OP_READ ? pread(fd, p, bytes, off) : pwrite(fd, p, bytes, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return op == OP_READ ? EIO : ENOSPC; /* the file is shorter than it was made */
    p += r;
    bytes -= (size_t)r;
    off += r;
  }
  return 0;
}

static int serve(disk_state *d, const request *r, float *const *bufs) {
  for (int k = 0; k < d->nstates; k++) {
    off_t off = (off_t)((size_t)k * d->floats + r->at) * (off_t)sizeof(float);
    int e = transfer(d->fd, r->op, bufs[k], r->n * sizeof(float), off);
    if (e) return e;
  }
  return 0;
}

static void *io_main(void *arg) {
  disk_state *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->count && !d->quit) pthread_cond_wait(&d->cv, &d->mu);
    if (!d->count) break;
    request r = d->q[d->head];
    bool failed = d->err != GT_OK;
    pthread_mutex_unlock(&d->mu);
    int e = 0;
    if (!failed) { /* after an error the rest is dropped: the stream stops */
      float *bufs[2] = {d->stage[r.buf], d->stage[r.buf] + d->chunk};
      e = serve(d, &r, bufs);
    }
    pthread_mutex_lock(&d->mu);
    if (e && d->err == GT_OK) {
      d->err = GT_EIO;
      snprintf(d->msg, sizeof d->msg, "optimizer state on disk in %s: %s of floats [%zu, %zu) failed: %s", d->dir,
               r.op == OP_READ ? "reading" : "writing", r.at, r.at + r.n, strerror(e));
    }
    d->head = (d->head + 1) % QCAP;
    d->count--;
    d->done++;
    pthread_cond_broadcast(&d->cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Queues a request; returns its sequence number (wait for done >= it). */
static uint64_t submit(disk_state *d, op_kind op, int buf, size_t at, size_t n) {
  pthread_mutex_lock(&d->mu);
  while (d->count == QCAP) pthread_cond_wait(&d->cv, &d->mu);
  d->q[(d->head + d->count) % QCAP] = (request){op, buf, at, n};
  d->count++;
  uint64_t seq = ++d->queued;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return seq;
}

static gt_status wait_for(disk_state *d, uint64_t seq) {
  pthread_mutex_lock(&d->mu);
  while (d->done < seq) pthread_cond_wait(&d->cv, &d->mu);
  gt_status err = d->err;
  pthread_mutex_unlock(&d->mu);
  return err == GT_OK ? GT_OK : gt_errorf(err, "%s", d->msg);
}

/* The file: unlinked from the start, so nothing is left however the run
 * ends. O_TMPFILE where the filesystem has it, else a named file removed
 * at once. */
static gt_status create_file(const char *dir, int *fd) {
  *fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (*fd >= 0) return GT_OK;
  int e = errno;
  if (e == EOPNOTSUPP || e == EISDIR || e == EINVAL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/giant-optim-XXXXXX", dir);
    *fd = mkostemp(path, O_CLOEXEC);
    if (*fd >= 0) {
      unlink(path);
      return GT_OK;
    }
    e = errno;
  }
  return gt_errorf(e == ENOENT || e == ENOTDIR ? GT_ENOTFOUND : GT_EIO,
                   "optimizer state on disk: cannot create a file in %s: %s; give a directory that exists and is "
                   "writable",
                   dir, strerror(e));
}

/* The whole of its size reserved now: a full disk fails here. */
static gt_status reserve(int fd, const char *dir, size_t bytes, const char *what) {
  if (!bytes) return GT_OK;
  int e = posix_fallocate(fd, 0, (off_t)bytes);
  if (!e) return GT_OK;
  return gt_errorf(e == ENOSPC || e == EFBIG || e == EDQUOT ? GT_ENOMEM : GT_EIO,
                   "optimizer state on disk: %s has no room for %s, %zu bytes (%.1f MiB): %s; free space there or "
                   "give another directory",
                   dir, what, bytes, mib(bytes), strerror(e));
}

gt_status disk_state_open(gt_backend *be, const char *dir, int nstates, size_t floats, size_t stage_bytes,
                          disk_state **out) {
  *out = NULL;
  if (!dir || !*dir) return gt_errorf(GT_EINVAL, "optimizer state on disk: no directory given");
  if (nstates < 1 || nstates > 2) return gt_errorf(GT_EINVAL, "optimizer state on disk: %d states", nstates);
  /* Chunks of whole 64-byte lines, no bigger than the state itself. */
  size_t want = floats ? (floats + 15) & ~(size_t)15 : 16;
  size_t chunk = stage_bytes / NBUF / ((size_t)nstates * sizeof(float)) & ~(size_t)15;
  if (chunk > want) chunk = want;
  size_t least = want < MIN_CHUNK ? want : MIN_CHUNK;
  if (chunk < least)
    return gt_errorf(GT_ENOMEM,
                     "optimizer state on disk: %zu bytes of host memory to stage it are too few: it "
                     "needs at least %zu",
                     stage_bytes, (size_t)NBUF * (size_t)nstates * least * sizeof(float));
  disk_state *d = calloc(1, sizeof *d);
  if (!d || !(d->dir = strdup(dir))) {
    free(d);
    return gt_errorf(GT_ENOMEM, "out of memory opening the optimizer state on disk");
  }
  d->be = be;
  d->fd = -1;
  d->nstates = nstates;
  d->floats = floats;
  d->chunk = chunk;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  gt_status s = create_file(dir, &d->fd);
  size_t bytes = (size_t)nstates * floats * sizeof(float);
  /* Every block now: a full disk fails here, and the state starts at 0. */
  if (s == GT_OK) s = reserve(d->fd, dir, bytes, "the state");
  for (int b = 0; b < NBUF && s == GT_OK; b++) {
    s = gt_backend_host_alloc(be, (size_t)nstates * chunk * sizeof(float), (void **)&d->stage[b]);
    if (s != GT_OK) s = gt_error_context(s, "host memory to stage the optimizer state on disk");
  }
  if (s == GT_OK && pthread_create(&d->io, NULL, io_main, d) != 0)
    s = gt_errorf(GT_EIO, "optimizer state on disk: cannot start its I/O thread");
  if (s != GT_OK) {
    disk_state_close(d);
    return s;
  }
  d->io_started = true;
  *out = d;
  return GT_OK;
}

void disk_state_close(disk_state *d) {
  if (!d) return;
  if (d->io_started) {
    pthread_mutex_lock(&d->mu);
    d->quit = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->io, NULL);
  }
  for (int b = 0; b < NBUF; b++) gt_backend_host_free(d->be, d->stage[b]);
  if (d->fd >= 0) close(d->fd);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d->dir);
  free(d);
}

size_t disk_state_chunk(const disk_state *d) { return d->chunk; }

static gt_status check_range(const disk_state *d, int k, size_t at, size_t n) {
  if (k < 0 || k >= d->nstates || at > d->floats || n > d->floats - at)
    return gt_errorf(GT_EINVAL, "optimizer state on disk: state %d, floats [%zu, %zu) are outside its %d x %zu", k, at,
                     at + n, d->nstates, d->floats);
  return GT_OK;
}

/* Straight from the caller's thread: these are rare (checkpoints, moves),
 * and never run during a stream (the optimizer's owner calls both). */
static gt_status direct(disk_state *d, op_kind op, int k, size_t at, size_t n, float *buf) {
  GT_TRY(check_range(d, k, at, n));
  off_t off = (off_t)((size_t)k * d->floats + at) * (off_t)sizeof(float);
  int e = transfer(d->fd, op, buf, n * sizeof(float), off);
  if (e)
    return gt_errorf(GT_EIO, "optimizer state on disk in %s: %s state %d's floats [%zu, %zu) failed: %s", d->dir,
                     op == OP_READ ? "reading" : "writing", k, at, at + n, strerror(e));
  return GT_OK;
}

gt_status disk_state_read(disk_state *d, int k, size_t at, size_t n, float *dst) {
  return direct(d, OP_READ, k, at, n, dst);
}

gt_status disk_state_write(disk_state *d, int k, size_t at, size_t n, const float *src) {
  return direct(d, OP_WRITE, k, at, n, (float *)src);
}

gt_status disk_state_scratch(disk_state *d, int *fd) {
  GT_TRY(create_file(d->dir, fd));
  gt_status s = reserve(*fd, d->dir, (size_t)d->nstates * d->floats * sizeof(float), "a snapshot of the state");
  if (s != GT_OK) {
    close(*fd);
    *fd = -1;
  }
  return s;
}

/* Copies the state's bytes from one file to the other, both from offset 0. */
static gt_status copy_file(disk_state *d, int from, int to, const char *what) {
  size_t bytes = (size_t)d->nstates * d->floats * sizeof(float), done = 0;
  int e = 0;
  while (done < bytes) {
    loff_t in = (loff_t)done, out = (loff_t)done;
    ssize_t n = copy_file_range(from, &in, to, &out, bytes - done, 0);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    e = n == 0 ? EIO : errno;
    if (e != EINTR) break;
    e = 0;
  }
  /* Not across file systems on older kernels, nor on some file systems:
   * through the first staging buffer, free outside a stream. */
  if (e == EXDEV || e == EINVAL || e == ENOSYS || e == EOPNOTSUPP) {
    size_t cap = (size_t)d->nstates * d->chunk * sizeof(float);
    for (e = 0; done < bytes && !e;) {
      size_t n = bytes - done < cap ? bytes - done : cap;
      e = transfer(from, OP_READ, d->stage[0], n, (off_t)done);
      if (!e) e = transfer(to, OP_WRITE, d->stage[0], n, (off_t)done);
      done += n;
    }
  }
  if (e) return gt_errorf(GT_EIO, "optimizer state on disk in %s: copying it %s failed: %s", d->dir, what, strerror(e));
  return GT_OK;
}

gt_status disk_state_copy_out(disk_state *d, int fd) { return copy_file(d, d->fd, fd, "out for a checkpoint"); }
gt_status disk_state_copy_in(disk_state *d, int fd) { return copy_file(d, fd, d->fd, "in from a checkpoint"); }

gt_status disk_state_stream(disk_state *d, size_t from, size_t to, disk_state_fn fn, void *ctx) {
  if (from > to || to > d->floats)
    return gt_errorf(GT_EINVAL, "optimizer state on disk: floats [%zu, %zu) are outside its %zu", from, to, d->floats);
  size_t nchunks = (to - from + d->chunk - 1) / d->chunk;
  uint64_t read_seq[NBUF] = {0}, last = 0;
#define CHUNK_AT(i) (from + (size_t)(i)*d->chunk)
#define CHUNK_N(i) (to - CHUNK_AT(i) < d->chunk ? to - CHUNK_AT(i) : d->chunk)
  for (size_t i = 0; i < nchunks && i < NBUF - 1; i++)
    last = read_seq[i % NBUF] = submit(d, OP_READ, (int)(i % NBUF), CHUNK_AT(i), CHUNK_N(i));
  gt_status s = GT_OK;
  for (size_t i = 0; i < nchunks && s == GT_OK; i++) {
    int b = (int)(i % NBUF);
    s = wait_for(d, read_seq[b]);
    float *bufs[2] = {d->stage[b], d->stage[b] + d->chunk};
    if (s == GT_OK) s = fn(ctx, CHUNK_AT(i), CHUNK_N(i), bufs);
    if (s != GT_OK) break;
    last = submit(d, OP_WRITE, b, CHUNK_AT(i), CHUNK_N(i));
    size_t next = i + NBUF - 1;
    if (next < nchunks)
      last = read_seq[next % NBUF] = submit(d, OP_READ, (int)(next % NBUF), CHUNK_AT(next), CHUNK_N(next));
  }
#undef CHUNK_AT
#undef CHUNK_N
  /* The buffers are free, and every write is on disk, before returning. */
  gt_status w = wait_for(d, last);
  return s != GT_OK ? s : w;
}
