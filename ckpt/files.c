/* Files written so that a crash leaves either the old state or the new:
 * temporary name, fsync, rename, fsync of the directory. And the chunks of
 * slices read back with their SHA-256 checked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/ckpt_internal.h"

void ck_sha256(const void *p, size_t n, unsigned char out[CK_SHA]) {
  unsigned int len = CK_SHA;
  /* EVP_Digest only fails when OpenSSL cannot allocate; a zero digest then
   * fails every check rather than passing one. */
  if (!EVP_Digest(p, n, out, &len, EVP_sha256(), NULL)) memset(out, 0, CK_SHA);
}

gt_status ck_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return gt_errorf(GT_EIO, "cannot open directory %s to sync it: %s", dir, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  return rc ? gt_errorf(GT_EIO, "cannot sync directory %s: %s", dir, strerror(err)) : GT_OK;
}

gt_status ck_mkdir(const char *dir) {
  if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return GT_OK;
    return gt_errorf(GT_EIO, "checkpoint directory %s exists and is not a directory", dir);
  }
  return gt_errorf(GT_EIO, "cannot create checkpoint directory %s: %s (check that it is writable)", dir,
                   strerror(errno));
}

gt_status ck_file_open(ck_file *f, const char *dir, const char *name) {
  *f = (ck_file){.dir = dir};
  snprintf(f->tmp, sizeof f->tmp, "%s/.%s.tmp", dir, name);
  snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0)
    return gt_errorf(GT_EIO, "cannot create %s: %s (check that the directory is writable)", f->tmp, strerror(errno));
  return GT_OK;
}

/* O_DIRECT is switched on after the open, and only for a regular file: a
 * file system without it (tmpfs) refuses the fcntl, not the file, so one
 * open serves both paths. */
gt_status ck_file_open_direct(ck_file *f, const char *dir, const char *name, bool *direct) {
  GT_TRY(ck_file_open(f, dir, name));
  struct stat st;
  int flags = fcntl(f->fd, F_GETFL);
  *direct = fstat(f->fd, &st) == 0 && S_ISREG(st.st_mode) && flags >= 0 && fcntl(f->fd, F_SETFL, flags | O_DIRECT) == 0;
  return GT_OK;
}

void ck_file_write(ck_file *f, const void *p, size_t n) {
  const unsigned char *q = p;
  for (size_t done = 0; done < n && !f->err;) {
    ssize_t w = write(f->fd, q + done, n - done);
    if (w > 0)
      done += (size_t)w;
    else if (w == 0 || errno != EINTR)
      f->err = w == 0 ? EIO : errno;
  }
}

int ck_transfer(int fd, bool write, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  while (n) {
    ssize_t r = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? EIO : errno;
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

gt_status ck_file_commit(ck_file *f) {
  int err = f->err;
  if (!err && fsync(f->fd) != 0) err = errno;
  if (close(f->fd) != 0 && !err) err = errno;
  if (!err && rename(f->tmp, f->path) != 0) err = errno;
  if (err) {
    unlink(f->tmp);
    return gt_errorf(GT_EIO, "writing %s failed: %s%s", f->path, strerror(err),
                     err == ENOSPC ? " (the disk is full: free space or point the checkpoints elsewhere)" : "");
  }
  return ck_fsync_dir(f->dir);
}

gt_status ck_write_durable(const char *dir, const char *name, const void *p, size_t n) {
  ck_file f;
  GT_TRY(ck_file_open(&f, dir, name));
  ck_file_write(&f, p, n);
  return ck_file_commit(&f);
}

struct ck_hasher {
  EVP_MD_CTX *ctx;
  bool bad; /* OpenSSL failed (out of memory): the digest is zeros */
};

ck_hasher *ck_hasher_new(void) {
  ck_hasher *h = calloc(1, sizeof *h);
  if (h && !(h->ctx = EVP_MD_CTX_new())) {
    free(h);
    h = NULL;
  }
  return h;
}

void ck_hasher_free(ck_hasher *h) {
  if (!h) return;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

void ck_hasher_start(ck_hasher *h) { h->bad = !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL); }

void ck_hasher_add(ck_hasher *h, const void *p, size_t n) {
  if (!h->bad && n) h->bad = !EVP_DigestUpdate(h->ctx, p, n);
}

void ck_hasher_end(ck_hasher *h, unsigned char out[CK_SHA]) {
  unsigned int len = CK_SHA;
  if (h->bad || !EVP_DigestFinal_ex(h->ctx, out, &len)) memset(out, 0, CK_SHA);
}

gt_status ck_shard_open(ck_shard *f, const char *dir, const ck_manifest *m, const ck_slice *s, uint64_t *bytes_read) {
  snprintf(f->path, sizeof f->path, "%s/%s", dir, m->files[s->file]);
  f->bytes_read = bytes_read;
  f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0)
    return gt_errorf(errno == ENOENT ? GT_ENOTFOUND : GT_EIO, "cannot open shard %s (tensor %s): %s", f->path,
                     m->tensors[s->tensor].name, strerror(errno));
  return GT_OK;
}

void ck_shard_close(ck_shard *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

gt_status ck_read_chunks(ck_shard *f, const ck_manifest *m, const ck_slice *s, uint64_t k0, uint64_t k1, void *buf) {
  const char *tensor = m->tensors[s->tensor].name;
  uint64_t at, len, end, last;
  ck_chunk_span(m, s, k0, &at, &len);
  ck_chunk_span(m, s, k1 - 1, &end, &last);
  size_t want = (size_t)(end + last - at), done = 0;
  int err = 0;
  while (done < want && !err) {
    ssize_t r = pread(f->fd, (char *)buf + done, want - done, (off_t)(s->offset + at + done));
    if (r > 0)
      done += (size_t)r;
    else if (r < 0 && errno != EINTR)
      err = errno;
    else if (r == 0)
      break;
  }
  if (f->bytes_read) *f->bytes_read += done;
  if (err) return gt_errorf(GT_EIO, "reading shard %s (tensor %s): %s", f->path, tensor, strerror(err));
  if (done < want)
    return gt_errorf(GT_EFORMAT, "shard %s is truncated: tensor %s needs bytes %llu..%llu and the file ends first",
                     f->path, tensor, (unsigned long long)(s->offset + at),
                     (unsigned long long)(s->offset + at + want));
  for (uint64_t k = k0; k < k1; k++) {
    uint64_t a, n;
    unsigned char sha[CK_SHA];
    ck_chunk_span(m, s, k, &a, &n);
    ck_sha256((const char *)buf + (a - at), (size_t)n, sha);
    if (memcmp(sha, m->hashes[s->hash + k], CK_SHA))
      return gt_errorf(GT_EFORMAT,
                       "shard %s: tensor %s, chunk %llu of its slice (bytes %llu..%llu of the file), "
                       "fails its SHA-256 check: the file is corrupt",
                       f->path, tensor, (unsigned long long)k, (unsigned long long)(s->offset + a),
                       (unsigned long long)(s->offset + a + n));
  }
  return GT_OK;
}

gt_status ck_remove_dir(const char *dir) {
  /* The manifest goes first, durably: a crash halfway through leaves an
   * uncommitted directory, never a committed one with shards missing. */
  char manifest[4200];
  snprintf(manifest, sizeof manifest, "%s/%s", dir, CK_MANIFEST);
  if (unlink(manifest) == 0) GT_TRY(ck_fsync_dir(dir));
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? GT_OK : gt_errorf(GT_EIO, "cannot open %s to remove it: %s", dir, strerror(errno));
  struct dirent *e;
  gt_status s = GT_OK;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0 && s == GT_OK) s = gt_errorf(GT_EIO, "cannot remove %s: %s", path, strerror(errno));
  }
  closedir(d);
  if (s == GT_OK && rmdir(dir) != 0) s = gt_errorf(GT_EIO, "cannot remove %s: %s", dir, strerror(errno));
  return s;
}
