/* The manifest: every tensor by global name, shape and dtype; every stored
 * slice with its box, shard file, offset, length and the SHA-256 of each of
 * its chunks; the blobs
 * (the trainer's, loaders' and application's state). Ranks encode the part
 * they wrote and hand it to rank 0 through the store; rank 0 merges the
 * parts and writes the file whose rename commits the checkpoint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "giant/engine/checkpoint.h"

#define GROW(arr, n, what)                                                             \
  do {                                                                                 \
    void *q_ = realloc((arr), ((size_t)(n) + 1) * sizeof *(arr));                      \
    if (!q_) return gt_errorf(GT_ENOMEM, "out of memory for the manifest's %s", what); \
    (arr) = q_;                                                                        \
  } while (0)

void ck_manifest_free(ck_manifest *m) {
  for (int i = 0; i < m->nblobs; i++) free(m->blobs[i].bytes);
  free(m->blobs);
  free(m->tensors);
  free(m->slices);
  free(m->hashes);
  free(m->files);
  *m = (ck_manifest){0};
}

int ck_manifest_tensor(const ck_manifest *m, const char *name) {
  for (int i = 0; i < m->ntensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return i;
  return -1;
}

const ck_blob *ck_manifest_blob(const ck_manifest *m, const char *name) {
  for (int i = 0; i < m->nblobs; i++)
    if (!strcmp(m->blobs[i].name, name)) return &m->blobs[i];
  return NULL;
}

gt_status ck_manifest_add_tensor(ck_manifest *m, const char *name, int ndim, const int64_t *shape, int *index) {
  int i = ck_manifest_tensor(m, name);
  if (i >= 0) {
    const ck_tensor *t = &m->tensors[i];
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) return gt_errorf(GT_EFORMAT, "tensor %s is described with two different shapes", name);
    *index = i;
    return GT_OK;
  }
  if (ndim < 1 || ndim > CK_MAXDIM || strlen(name) >= CK_NAME)
    return gt_errorf(GT_EINVAL, "tensor %s cannot be checkpointed (%d dims; at most %d dims and %d characters)", name,
                     ndim, CK_MAXDIM, CK_NAME - 1);
  GROW(m->tensors, m->ntensors, "tensors");
  ck_tensor *t = &m->tensors[m->ntensors];
  *t = (ck_tensor){.dtype = CK_DTYPE_F32, .ndim = ndim};
  snprintf(t->name, sizeof t->name, "%s", name);
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
  *index = m->ntensors++;
  return GT_OK;
}

bool ck_chunk_valid(uint64_t chunk) { return chunk >= 64 && chunk <= (1u << 30) && chunk % 64 == 0; }

uint64_t ck_chunks(const ck_manifest *m, const ck_slice *s) {
  return m->chunk ? (s->length + m->chunk - 1) / m->chunk : 1;
}

void ck_chunk_span(const ck_manifest *m, const ck_slice *s, uint64_t k, uint64_t *at, uint64_t *len) {
  uint64_t size = m->chunk ? m->chunk : s->length;
  *at = k * size;
  *len = s->length - *at < size ? s->length - *at : size;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 1;
  while (c < n) c *= 2;
  return c;
}

gt_status ck_manifest_add_slice(ck_manifest *m, const ck_slice *s, const unsigned char (*hashes)[CK_SHA]) {
  uint64_t n = ck_chunks(m, s);
  GROW(m->slices, m->nslices, "slices");
  /* The hash table's capacity is the power of two at or above its count,
   * so adding thousands of slices reallocates it a few times only. */
  size_t need = m->nhashes + (size_t)n;
  if (!m->hashes || need > pow2_at_least(m->nhashes)) {
    void *q = realloc(m->hashes, pow2_at_least(need) * CK_SHA);
    if (!q) return gt_errorf(GT_ENOMEM, "out of memory for the manifest's chunk hashes");
    m->hashes = q;
  }
  ck_slice *t = &m->slices[m->nslices++];
  *t = *s;
  t->hash = m->nhashes;
  if (hashes)
    memcpy(m->hashes[t->hash], hashes, (size_t)n * CK_SHA);
  else
    memset(m->hashes[t->hash], 0, (size_t)n * CK_SHA);
  m->nhashes += (size_t)n;
  return GT_OK;
}

gt_status ck_manifest_add_file(ck_manifest *m, const char *file, int *index) {
  if (strlen(file) >= sizeof m->files[0]) return gt_errorf(GT_EINVAL, "shard file name %s is too long", file);
  GROW(m->files, m->nfiles, "files");
  snprintf(m->files[m->nfiles], sizeof m->files[0], "%s", file);
  *index = m->nfiles++;
  return GT_OK;
}

gt_status ck_manifest_add_blob(ck_manifest *m, const char *name, const void *bytes, size_t len) {
  if (ck_manifest_blob(m, name)) return GT_OK;
  if (strlen(name) >= CK_NAME) return gt_errorf(GT_EINVAL, "blob name %s is too long", name);
  GROW(m->blobs, m->nblobs, "blobs");
  ck_blob *b = &m->blobs[m->nblobs];
  b->bytes = malloc(len ? len : 1);
  if (!b->bytes) return gt_errorf(GT_ENOMEM, "out of memory for blob %s", name);
  if (len) memcpy(b->bytes, bytes, len);
  b->len = len;
  snprintf(b->name, sizeof b->name, "%s", name);
  m->nblobs++;
  return GT_OK;
}

gt_status ck_manifest_merge(ck_manifest *to, const ck_manifest *from) {
  int *file = calloc((size_t)from->nfiles + 1, sizeof *file),
      *tensor = calloc((size_t)from->ntensors + 1, sizeof *tensor);
  gt_status s = file && tensor ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory merging manifests");
  for (int i = 0; s == GT_OK && i < from->nfiles; i++) s = ck_manifest_add_file(to, from->files[i], &file[i]);
  for (int i = 0; s == GT_OK && i < from->ntensors; i++) {
    const ck_tensor *t = &from->tensors[i];
    s = ck_manifest_add_tensor(to, t->name, t->ndim, t->shape, &tensor[i]);
  }
  if (s == GT_OK && from->nslices && to->chunk != from->chunk)
    s = gt_errorf(GT_EINVAL,
                  "ranks hash checkpoint slices in chunks of %llu and %llu bytes: give every rank the "
                  "same gt_ckpt_config.chunk_bytes",
                  (unsigned long long)to->chunk, (unsigned long long)from->chunk);
  for (int i = 0; s == GT_OK && i < from->nslices; i++) {
    ck_slice sl = from->slices[i];
    sl.file = file[sl.file];
    sl.tensor = tensor[sl.tensor];
    s = ck_manifest_add_slice(to, &sl, (const unsigned char(*)[CK_SHA])from->hashes[sl.hash]);
  }
  for (int i = 0; s == GT_OK && i < from->nblobs; i++)
    s = ck_manifest_add_blob(to, from->blobs[i].name, from->blobs[i].bytes, from->blobs[i].len);
  free(file);
  free(tensor);
  return s;
}

gt_status ck_manifest_encode(const ck_manifest *m, ck_buf *b) {
  ck_put_u64(b, (uint64_t)m->step);
  ck_put_u64(b, m->chunk);
  ck_put_u32(b, (uint32_t)m->nfiles);
  for (int i = 0; i < m->nfiles; i++) ck_put_str(b, m->files[i]);
  ck_put_u32(b, (uint32_t)m->ntensors);
  for (int i = 0; i < m->ntensors; i++) {
    const ck_tensor *t = &m->tensors[i];
    ck_put_str(b, t->name);
    ck_put_u32(b, t->dtype);
    ck_put_u32(b, (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) ck_put_u64(b, (uint64_t)t->shape[d]);
  }
  ck_put_u32(b, (uint32_t)m->nslices);
  for (int i = 0; i < m->nslices; i++) {
    const ck_slice *s = &m->slices[i];
    ck_put_u32(b, (uint32_t)s->tensor);
    for (int d = 0; d < s->box.ndim; d++) {
      ck_put_u64(b, (uint64_t)s->box.lo[d]);
      ck_put_u64(b, (uint64_t)s->box.hi[d]);
    }
    ck_put_u32(b, (uint32_t)s->file);
    ck_put_u64(b, s->offset);
    ck_put_u64(b, s->length);
    ck_put(b, m->hashes[s->hash], (size_t)ck_chunks(m, s) * CK_SHA);
  }
  ck_put_u32(b, (uint32_t)m->nblobs);
  for (int i = 0; i < m->nblobs; i++) {
    ck_put_str(b, m->blobs[i].name);
    ck_put_u64(b, m->blobs[i].len);
    ck_put(b, m->blobs[i].bytes, m->blobs[i].len);
  }
  return b->oom ? gt_errorf(GT_ENOMEM, "out of memory encoding the manifest") : GT_OK;
}

static gt_status decode_version(const unsigned char *p, size_t len, uint32_t version, const char *what,
                                ck_manifest *out);

/* 4 EiB: no tensor comes near; sums and chunk counts below it cannot wrap. */
#define CK_MAX_TENSOR_BYTES ((uint64_t)1 << 62)

/* Every count and index is checked against what the bytes can hold, so a
 * damaged manifest is an error, never a huge allocation or a wild index. */
static gt_status decode(ck_rd *r, uint32_t version, const char *what, ck_manifest *m) {
#define BAD(...) return gt_error_context(gt_errorf(GT_EFORMAT, __VA_ARGS__), "%s", what)
  m->step = (int64_t)ck_get_u64(r);
  m->chunk = version == 1 ? 0 : ck_get_u64(r);
  if (version != 1 && !ck_chunk_valid(m->chunk))
    BAD("its chunk size %llu is not a multiple of 64 in [64, 1 GiB]", (unsigned long long)m->chunk);
  uint32_t n = ck_get_u32(r);
  if (r->bad || n > r->len) BAD("the file table is cut short");
  for (uint32_t i = 0; i < n; i++) {
    char f[64];
    int k;
    ck_get_str(r, f, sizeof f);
    if (r->bad || !*f || strchr(f, '/')) BAD("shard file %u has a bad name", i);
    GT_TRY(ck_manifest_add_file(m, f, &k));
  }
  n = ck_get_u32(r);
  if (r->bad || n > r->len) BAD("the tensor table is cut short");
  for (uint32_t i = 0; i < n; i++) {
    char name[CK_NAME];
    int64_t shape[CK_MAXDIM];
    ck_get_str(r, name, sizeof name);
    uint32_t dtype = ck_get_u32(r), nd = ck_get_u32(r);
    if (r->bad || nd < 1 || nd > CK_MAXDIM) BAD("tensor %u (%s) is malformed", i, name);
    /* Sizes are products of the shape: one that wraps would let slices
     * that do not tile the tensor pass the checks that count elements
     * (and a read of it loop for ever), so a tensor's bytes must fit far
     * inside 64 bits, which also bounds every slice inside it. */
    uint64_t bytes = sizeof(float);
    for (uint32_t d = 0; d < nd; d++) {
      shape[d] = (int64_t)ck_get_u64(r);
      if (shape[d] < 0 || (shape[d] > 0 && bytes > CK_MAX_TENSOR_BYTES / (uint64_t)shape[d]))
        BAD("tensor %s has a negative or impossibly large dimension", name);
      bytes *= (uint64_t)shape[d];
    }
    if (dtype != CK_DTYPE_F32) BAD("tensor %s has unknown dtype %u", name, dtype);
    int k;
    GT_TRY(ck_manifest_add_tensor(m, name, (int)nd, shape, &k));
  }
  n = ck_get_u32(r);
  if (r->bad || n > r->len) BAD("the slice table is cut short");
  for (uint32_t i = 0; i < n; i++) {
    ck_slice s = {.tensor = (int)ck_get_u32(r)};
    if (r->bad || s.tensor < 0 || s.tensor >= m->ntensors) BAD("slice %u names no tensor", i);
    const ck_tensor *t = &m->tensors[s.tensor];
    s.box.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
      s.box.lo[d] = (int64_t)ck_get_u64(r);
      s.box.hi[d] = (int64_t)ck_get_u64(r);
      if (s.box.lo[d] < 0 || s.box.lo[d] >= s.box.hi[d] || s.box.hi[d] > t->shape[d])
        BAD("a slice of tensor %s lies outside its shape", t->name);
    }
    s.file = (int)ck_get_u32(r);
    s.offset = ck_get_u64(r);
    s.length = ck_get_u64(r);
    if (r->bad || s.file < 0 || s.file >= m->nfiles) BAD("a slice of tensor %s names no shard file", t->name);
    if (s.length != ck_box_volume(&s.box) * sizeof(float))
      BAD("a slice of tensor %s has length %llu for %llu floats", t->name, (unsigned long long)s.length,
          (unsigned long long)ck_box_volume(&s.box));
    /* The count of hashes is checked against the bytes left before it is
     * multiplied, so a huge length cannot overflow into a small read. */
    uint64_t chunks = ck_chunks(m, &s);
    const unsigned char *sha = chunks <= (r->len - r->at) / CK_SHA ? ck_get(r, (size_t)chunks * CK_SHA) : NULL;
    if (!sha) BAD("the chunk hashes of a slice of tensor %s are cut short", t->name);
    GT_TRY(ck_manifest_add_slice(m, &s, (const unsigned char(*)[CK_SHA])sha));
  }
  n = ck_get_u32(r);
  if (r->bad || n > r->len) BAD("the blob table is cut short");
  for (uint32_t i = 0; i < n; i++) {
    char name[CK_NAME];
    ck_get_str(r, name, sizeof name);
    uint64_t len = ck_get_u64(r);
    const unsigned char *p = r->bad ? NULL : ck_get(r, (size_t)len);
    if (!p) BAD("blob %u (%s) is cut short", i, name);
    GT_TRY(ck_manifest_add_blob(m, name, p, (size_t)len));
  }
  if (r->bad || r->at != r->len) BAD("it has %zu stray bytes at its end", r->len - r->at);
  return GT_OK;
#undef BAD
}

gt_status ck_manifest_decode(const unsigned char *p, size_t len, const char *what, ck_manifest *out) {
  return decode_version(p, len, GT_CKPT_VERSION, what, out);
}

static gt_status decode_version(const unsigned char *p, size_t len, uint32_t version, const char *what,
                                ck_manifest *out) {
  *out = (ck_manifest){0};
  ck_rd r = {.p = p, .len = len};
  gt_status s = decode(&r, version, what, out);
  if (s != GT_OK) ck_manifest_free(out);
  return s;
}

/* magic[8] version u32 reserved u32 body_len u64 body sha256(body) */
gt_status ck_manifest_write(const char *dir, const ck_manifest *m) { return ck_manifest_write_as(dir, CK_MANIFEST, m); }

gt_status ck_manifest_write_as(const char *dir, const char *name, const ck_manifest *m) {
  ck_buf body = {0}, file = {0};
  gt_status s = ck_manifest_encode(m, &body);
  unsigned char sha[CK_SHA];
  if (s == GT_OK) {
    ck_sha256(body.p, body.len, sha);
    ck_put(&file, GT_CKPT_MAGIC, 8);
    ck_put_u32(&file, GT_CKPT_VERSION);
    ck_put_u32(&file, 0);
    ck_put_u64(&file, body.len);
    ck_put(&file, body.p, body.len);
    ck_put(&file, sha, CK_SHA);
    s = file.oom ? gt_errorf(GT_ENOMEM, "out of memory writing the manifest") : GT_OK;
  }
  if (s == GT_OK) s = ck_write_durable(dir, name, file.p, file.len);
  ck_buf_free(&body);
  ck_buf_free(&file);
  return s;
}

static gt_status slurp(const char *path, unsigned char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return gt_errorf(GT_ENOTFOUND, "%s is missing: the checkpoint was never committed", path);
    return gt_errorf(GT_EIO, "cannot open %s: %s", path, strerror(errno));
  }
  ck_buf b = {0};
  unsigned char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) ck_put(&b, chunk, n);
  int err = ferror(f);
  fclose(f);
  if (err || b.oom) {
    ck_buf_free(&b);
    return gt_errorf(err ? GT_EIO : GT_ENOMEM, "cannot read %s", path);
  }
  *out = b.p;
  *len = b.len;
  return GT_OK;
}

gt_status ck_manifest_read(const char *dir, ck_manifest *out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, CK_MANIFEST);
  return ck_manifest_read_file(path, out);
}

gt_status ck_manifest_read_file(const char *path, ck_manifest *out) {
  *out = (ck_manifest){0};
  unsigned char *p = NULL;
  size_t len = 0;
  GT_TRY(slurp(path, &p, &len));
  ck_rd r = {.p = p, .len = len};
  const unsigned char *magic = ck_get(&r, 8);
  uint32_t version = ck_get_u32(&r);
  (void)ck_get_u32(&r);
  uint64_t body = ck_get_u64(&r);
  gt_status s = GT_OK;
  if (r.bad || memcmp(magic, GT_CKPT_MAGIC, 8))
    s = gt_errorf(GT_EFORMAT, "%s is not a Giant checkpoint manifest (no %s magic)", path, GT_CKPT_MAGIC);
  else if (version != GT_CKPT_VERSION && version != 1)
    s = gt_errorf(GT_EFORMAT, "%s has format version %u; this build reads versions 1 and %u (use a matching giant)",
                  path, version, GT_CKPT_VERSION);
  else if (len < r.at + CK_SHA || body != len - r.at - CK_SHA)
    s = gt_errorf(GT_EFORMAT, "%s is truncated or has trailing bytes (%zu bytes, header says a %llu-byte body)", path,
                  len, (unsigned long long)body);
  unsigned char sha[CK_SHA];
  if (s == GT_OK) {
    ck_sha256(p + r.at, (size_t)body, sha);
    if (memcmp(sha, p + r.at + body, CK_SHA))
      s = gt_errorf(GT_EFORMAT, "%s fails its SHA-256 check: the manifest is corrupt", path);
  }
  if (s == GT_OK) s = decode_version(p + r.at, (size_t)body, version, path, out);
  if (s == GT_OK && (s = ck_manifest_check_cover(out, path)) != GT_OK) ck_manifest_free(out);
  free(p);
  return s;
}
