/* The token file: its header, and an atomic writer.
 *
 * A file is written to path.tmp, fsynced, then renamed over path, so a
 * reader sees either the old file or the complete new one, never a torn one.
 * Integers are stored little-endian byte by byte so files move between hosts.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "giant/data.h"
#include "core/data/loader_engine.h"
#include "core/data/text.h"

#define WBUF_BYTES (1u << 20)

struct gt_tokfile_writer {
  FILE *fp;
  char *path, *tmp;
  uint32_t vocab_size, doc_sep, width;
  uint64_t count;
  unsigned char *buf;
  size_t used;
};

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint32_t width_for(uint32_t vocab_size) {
  if (vocab_size <= 256u) return 1;
  if (vocab_size <= 65536u) return 2;
  return 4;
}

gt_status gt_tokfile_writer_open(const char *path, uint32_t vocab_size, uint32_t doc_sep, gt_tokfile_writer **out) {
  *out = NULL;
  if (!path || !*path) return gt_errorf(GT_EINVAL, "token file path is empty");
  if (vocab_size == 0) return gt_errorf(GT_EINVAL, "vocabulary size must be positive");
  if (doc_sep != GT_TOKFILE_NO_SEP && doc_sep >= vocab_size)
    return gt_errorf(GT_EINVAL, "document separator id %u is >= the vocabulary %u", doc_sep, vocab_size);
  gt_tokfile_writer *w = calloc(1, sizeof *w);
  size_t n = strlen(path);
  if (w) {
    w->path = strdup(path);
    w->tmp = malloc(n + 5);
    w->buf = malloc(WBUF_BYTES);
  }
  if (!w || !w->path || !w->tmp || !w->buf) {
    gt_tokfile_writer_abort(w);
    return gt_errorf(GT_ENOMEM, "out of memory opening token file %s", path);
  }
  memcpy(w->tmp, path, n);
  memcpy(w->tmp + n, ".tmp", 5);
  w->vocab_size = vocab_size;
  w->doc_sep = doc_sep;
  w->width = width_for(vocab_size);
  int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    gt_status s =
        gt_errorf(GT_EIO, "cannot create %s: %s (check the directory exists and is writable)", w->tmp, strerror(errno));
    free(w->tmp);
    w->tmp = NULL; /* nothing to remove */
    gt_tokfile_writer_abort(w);
    return s;
  }
  w->fp = fdopen(fd, "wb");
  if (!w->fp) {
    close(fd);
    gt_tokfile_writer_abort(w);
    return gt_errorf(GT_EIO, "cannot open a stream on %s", path);
  }
  /* The real header goes in at commit, once the count is known. */
  unsigned char zero[GT_TOKFILE_HEADER_BYTES] = {0};
  if (fwrite(zero, 1, sizeof zero, w->fp) != sizeof zero) {
    gt_status s = gt_errorf(GT_EIO, "writing %s: %s", w->tmp, strerror(errno));
    gt_tokfile_writer_abort(w);
    return s;
  }
  *out = w;
  return GT_OK;
}

static gt_status flush_buf(gt_tokfile_writer *w) {
  if (w->used && fwrite(w->buf, 1, w->used, w->fp) != w->used)
    return gt_errorf(GT_EIO, "writing %s: %s (disk full?)", w->tmp, strerror(errno));
  w->used = 0;
  return GT_OK;
}

gt_status gt_tokfile_writer_append(gt_tokfile_writer *w, const uint32_t *tokens, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] >= w->vocab_size)
      return gt_errorf(GT_EINVAL, "token id %u at position %llu is >= the vocabulary %u", tokens[i],
                       (unsigned long long)(w->count + i), w->vocab_size);
  for (size_t i = 0; i < n; i++) {
    if (w->used + w->width > WBUF_BYTES) GT_TRY(flush_buf(w));
    put_le(w->buf + w->used, tokens[i], (int)w->width);
    w->used += w->width;
  }
  w->count += n;
  return GT_OK;
}

uint64_t gt_tokfile_writer_count(const gt_tokfile_writer *w) { return w->count; }

static void encode_header(const gt_tokfile_writer *w, unsigned char *h) {
  memset(h, 0, GT_TOKFILE_HEADER_BYTES);
  memcpy(h, GT_TOKFILE_MAGIC, 8);
  put_le(h + 8, GT_TOKFILE_VERSION, 4);
  put_le(h + 12, w->width, 4);
  put_le(h + 16, w->count, 8);
  put_le(h + 24, w->vocab_size, 4);
  put_le(h + 28, w->doc_sep, 4);
}

/* Makes the rename itself durable. */
static void sync_parent_dir(const char *path) {
  char *dir = strdup(path);
  if (!dir) return;
  char *slash = strrchr(dir, '/');
  const char *d = ".";
  if (slash == dir)
    d = "/";
  else if (slash) {
    *slash = '\0';
    d = dir;
  }
  int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

gt_status gt_tokfile_writer_commit(gt_tokfile_writer *w) {
  unsigned char h[GT_TOKFILE_HEADER_BYTES];
  encode_header(w, h);
  gt_status s = flush_buf(w);
  if (s == GT_OK && (fseek(w->fp, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->fp) != sizeof h ||
                     fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0))
    s = gt_errorf(GT_EIO, "writing %s: %s (disk full?)", w->tmp, strerror(errno));
  if (s == GT_OK) {
    int rc = fclose(w->fp);
    w->fp = NULL;
    if (rc != 0) s = gt_errorf(GT_EIO, "closing %s: %s", w->tmp, strerror(errno));
  }
  if (s == GT_OK && rename(w->tmp, w->path) != 0)
    s = gt_errorf(GT_EIO, "renaming %s to %s: %s", w->tmp, w->path, strerror(errno));
  if (s != GT_OK) {
    gt_tokfile_writer_abort(w);
    return s;
  }
  sync_parent_dir(w->path);
  free(w->tmp);
  w->tmp = NULL;
  gt_tokfile_writer_abort(w);
  return GT_OK;
}

void gt_tokfile_writer_abort(gt_tokfile_writer *w) {
  if (!w) return;
  if (w->fp) fclose(w->fp);
  if (w->tmp) unlink(w->tmp);
  free(w->tmp);
  free(w->path);
  free(w->buf);
  free(w);
}

gt_status gt_tokfile_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                           uint32_t doc_sep) {
  gt_tokfile_writer *w;
  GT_TRY(gt_tokfile_writer_open(path, vocab_size, doc_sep, &w));
  gt_status s = GT_OK;
  for (uint64_t i = 0; i < count && s == GT_OK; i += WBUF_BYTES) {
    uint64_t n = count - i < WBUF_BYTES ? count - i : WBUF_BYTES;
    s = gt_tokfile_writer_append(w, tokens + i, (size_t)n);
  }
  if (s != GT_OK) {
    gt_tokfile_writer_abort(w);
    return gt_error_context(s, "writing %s", path);
  }
  return gt_tokfile_writer_commit(w);
}

gt_status gt_tokfile_parse_header(const unsigned char *b, uint64_t size, const char *name, gt_tokfile_header *out) {
  if (size < GT_TOKFILE_HEADER_BYTES)
    return gt_errorf(GT_EFORMAT,
                     "%s: truncated header: the file is %llu bytes, shorter than the %u-byte "
                     "header (not a token file, or cut short; re-run giant-tokenize)",
                     name, (unsigned long long)size, GT_TOKFILE_HEADER_BYTES);
  if (memcmp(b, GT_TOKFILE_MAGIC, 8) != 0)
    return gt_errorf(GT_EFORMAT,
                     "%s: wrong magic at offset 0: expected \"%s\"; this is not a token file "
                     "(make one with giant-tokenize)",
                     name, GT_TOKFILE_MAGIC);
  gt_tokfile_header h;
  h.version = (uint32_t)get_le(b + 8, 4);
  h.width = (uint32_t)get_le(b + 12, 4);
  h.count = get_le(b + 16, 8);
  h.vocab_size = (uint32_t)get_le(b + 24, 4);
  h.doc_sep = (uint32_t)get_le(b + 28, 4);
  if (h.version != GT_TOKFILE_VERSION)
    return gt_errorf(GT_EUNSUPPORTED,
                     "%s: unsupported version %u at offset 8 (this build reads version %u); "
                     "re-tokenize with this build's giant-tokenize",
                     name, h.version, GT_TOKFILE_VERSION);
  if (h.width != 1 && h.width != 2 && h.width != 4)
    return gt_errorf(GT_EFORMAT, "%s: bad token width %u at offset 12 (must be 1, 2 or 4)", name, h.width);
  if (h.vocab_size == 0) return gt_errorf(GT_EFORMAT, "%s: vocabulary size at offset 24 is 0", name);
  if (h.width < 4 && h.vocab_size > (1ull << (8 * h.width)))
    return gt_errorf(GT_EFORMAT, "%s: vocabulary size %u at offset 24 does not fit width %u", name, h.vocab_size,
                     h.width);
  if (h.doc_sep != GT_TOKFILE_NO_SEP && h.doc_sep >= h.vocab_size)
    return gt_errorf(GT_EFORMAT, "%s: document separator id %u at offset 28 is >= the vocabulary %u", name, h.doc_sep,
                     h.vocab_size);
  for (int i = 32; i < (int)GT_TOKFILE_HEADER_BYTES; i++)
    if (b[i] != 0) return gt_errorf(GT_EFORMAT, "%s: reserved header byte at offset %d is not zero", name, i);
  uint64_t body = size - GT_TOKFILE_HEADER_BYTES;
  if (h.count > body / h.width || h.count * h.width != body) {
    if (h.count > body / h.width)
      return gt_errorf(GT_EFORMAT,
                       "%s: truncated body: the header (offset 16) says %llu tokens of %u bytes "
                       "but the file holds %llu bytes after the header; the file was cut short",
                       name, (unsigned long long)h.count, h.width, (unsigned long long)body);
    return gt_errorf(GT_EFORMAT,
                     "%s: file size %llu does not match the header's %llu tokens of %u bytes "
                     "(trailing bytes at offset %llu)",
                     name, (unsigned long long)size, (unsigned long long)h.count, h.width,
                     (unsigned long long)(GT_TOKFILE_HEADER_BYTES + h.count * h.width));
  }
  *out = h;
  return GT_OK;
}
