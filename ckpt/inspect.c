/* Looking at checkpoints without a trainer: a summary, a full hash check,
 * export to one file in the single-process layout, and the difference of
 * two checkpoints tensor by tensor. */
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_internal.h"
#include "giant/engine/grid.h"
#include "giant/engine/checkpoint.h"
#include "giant/group.h"

gt_status gt_ckpt_describe(const char *path, gt_ckpt_summary *out) {
  ck_manifest m;
  GT_TRY(ck_manifest_read(path, &m));
  *out = (gt_ckpt_summary){.step = (int)m.step,
                           .tensors = m.ntensors,
                           .slices = m.nslices,
                           .files = m.nfiles,
                           .blobs = m.nblobs,
                           .layout = {1, 1, 1}};
  for (int i = 0; i < m.nslices; i++) out->bytes += m.slices[i].length;
  const ck_blob *b = ck_manifest_blob(&m, "giant/trainer");
  if (b) {
    ck_rd r = {.p = b->bytes, .len = b->len};
    ck_get(&r, 4 + 8 + 4 + 8 + 8); /* version, step, optimizer kind and steps, seed */
    uint32_t plan[4];
    for (int i = 0; i < 4; i++) plan[i] = ck_get_u32(&r);
    if (!r.bad) {
      out->layout = (gt_grid_layout){(int)plan[0], (int)plan[1], (int)plan[2]};
      out->zero1 = plan[3] != 0;
      out->zero = (int)plan[3]; /* the ZeRO stage; checkpoints before stage 2 wrote 0 or 1 */
    }
  }
  ck_manifest_free(&m);
  return GT_OK;
}

static void note(FILE *report, gt_status s, gt_status *first) {
  if (report) fprintf(report, "%s\n", gt_last_error());
  if (*first == GT_OK) *first = s;
}

/* Chunk by chunk, so that every bad chunk is named, not only the first of
 * its slice; a slice its file cuts short is one failure. */
static int verify_slice(const char *path, const ck_manifest *m, const ck_slice *sl, FILE *report, gt_status *first) {
  uint64_t at, len, chunks = ck_chunks(m, sl);
  ck_chunk_span(m, sl, 0, &at, &len);
  void *buf = malloc(len ? (size_t)len : 1);
  ck_shard f = {.fd = -1};
  gt_status s = buf ? ck_shard_open(&f, path, m, sl, NULL) : gt_errorf(GT_ENOMEM, "out of memory verifying %s", path);
  struct stat st;
  if (s == GT_OK && fstat(f.fd, &st) == 0 && (uint64_t)st.st_size < sl->offset + sl->length)
    s = gt_errorf(GT_EFORMAT, "shard %s is truncated: tensor %s needs bytes %llu..%llu and the file ends at %lld",
                  f.path, m->tensors[sl->tensor].name, (unsigned long long)sl->offset,
                  (unsigned long long)(sl->offset + sl->length), (long long)st.st_size);
  int bad = s != GT_OK;
  if (s != GT_OK) note(report, s, first);
  for (uint64_t k = 0; s == GT_OK && k < chunks; k++) {
    gt_status r = ck_read_chunks(&f, m, sl, k, k + 1, buf);
    if (r != GT_OK) {
      bad++;
      note(report, r, first);
    }
    if (r == GT_EIO) break; /* the file cannot be read on */
  }
  ck_shard_close(&f);
  free(buf);
  return bad;
}

gt_status gt_ckpt_verify(const char *path, FILE *report, int *bad) {
  *bad = 0;
  ck_manifest m;
  gt_status s = ck_manifest_read(path, &m), first = s;
  if (s != GT_OK) {
    if (report) fprintf(report, "%s\n", gt_last_error());
    *bad = 1;
    return s;
  }
  for (int i = 0; i < m.nslices; i++) *bad += verify_slice(path, &m, &m.slices[i], report, &first);
  ck_manifest_free(&m);
  return first;
}

static ck_box whole(const ck_tensor *t) {
  ck_box b = {.ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++) b.hi[d] = t->shape[d];
  return b;
}

/* Tensor i of a checkpoint, whole (malloc'ed). */
static gt_status read_whole(const char *path, const ck_manifest *m, int i, float **out, size_t *n) {
  ck_box b = whole(&m->tensors[i]);
  *n = (size_t)ck_box_volume(&b);
  *out = malloc((*n ? *n : 1) * sizeof(float));
  if (!*out) return gt_errorf(GT_ENOMEM, "out of memory reading tensor %s", m->tensors[i].name);
  gt_status s = ck_fill_box(path, m, i, &b, *out, NULL);
  if (s != GT_OK) {
    free(*out);
    *out = NULL;
  }
  return s;
}

gt_status gt_ckpt_export(const char *path, const char *out_file) {
  ck_manifest m, e = {0};
  GT_TRY(ck_manifest_read(path, &m));
  e.step = m.step;
  e.chunk = GT_CKPT_CHUNK_DEFAULT; /* it has no slices */
  gt_status s = GT_OK;
  char name[CK_NAME + 8];
  for (int i = 0; i < m.ntensors && s == GT_OK; i++) {
    const ck_tensor *t = &m.tensors[i];
    int k;
    float *x = NULL;
    size_t n = 0;
    s = ck_manifest_add_tensor(&e, t->name, t->ndim, t->shape, &k);
    if (s == GT_OK) s = read_whole(path, &m, i, &x, &n);
    snprintf(name, sizeof name, "data/%s", t->name);
    /* Floats are stored little-endian, as every host Giant runs on holds them. */
    if (s == GT_OK) s = ck_manifest_add_blob(&e, name, x, n * sizeof(float));
    free(x);
  }
  for (int i = 0; i < m.nblobs && s == GT_OK; i++)
    s = ck_manifest_add_blob(&e, m.blobs[i].name, m.blobs[i].bytes, m.blobs[i].len);
  char *d = strdup(out_file), *f = strdup(out_file);
  if (s == GT_OK && (!d || !f)) s = gt_errorf(GT_ENOMEM, "out of memory");
  if (s == GT_OK) s = ck_manifest_write_as(dirname(d), basename(f), &e);
  free(d);
  free(f);
  ck_manifest_free(&m);
  ck_manifest_free(&e);
  return s;
}

static gt_status diff_tensor(const char *a, const ck_manifest *ma, int i, const char *b, const ck_manifest *mb,
                             double *rel) {
  const ck_tensor *t = &ma->tensors[i];
  int j = ck_manifest_tensor(mb, t->name);
  if (j < 0) return gt_errorf(GT_EFORMAT, "tensor %s is in %s and not in %s", t->name, a, b);
  bool same = mb->tensors[j].ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = mb->tensors[j].shape[d] == t->shape[d];
  if (!same) return gt_errorf(GT_EFORMAT, "tensor %s has different shapes in %s and %s", t->name, a, b);
  float *x = NULL, *y = NULL;
  size_t n, n2;
  gt_status s = read_whole(a, ma, i, &x, &n);
  if (s == GT_OK) s = read_whole(b, mb, j, &y, &n2);
  double diff = 0, scale = 0;
  for (size_t k = 0; s == GT_OK && k < n; k++) {
    double e = fabs((double)x[k] - y[k]);
    diff = e > diff ? e : diff;
    scale = fabs((double)x[k]) > scale ? fabs((double)x[k]) : scale;
  }
  *rel = diff == 0 ? 0 : scale > 0 ? diff / scale : INFINITY;
  free(x);
  free(y);
  return s;
}

gt_status gt_ckpt_diff(const char *a, const char *b, FILE *out, double *max_rel) {
  *max_rel = 0;
  ck_manifest ma, mb;
  GT_TRY(ck_manifest_read(a, &ma));
  gt_status s = ck_manifest_read(b, &mb);
  if (s != GT_OK) {
    ck_manifest_free(&ma);
    return s;
  }
  for (int i = 0; i < ma.ntensors && s == GT_OK; i++) {
    double rel = 0;
    s = diff_tensor(a, &ma, i, b, &mb, &rel);
    if (s == GT_OK && out) fprintf(out, "%-40s %.3e\n", ma.tensors[i].name, rel);
    if (s == GT_OK && rel > *max_rel) *max_rel = rel;
  }
  if (s == GT_OK && mb.ntensors != ma.ntensors)
    s = gt_errorf(GT_EFORMAT, "%s holds %d tensors and %s %d", a, ma.ntensors, b, mb.ntensors);
  ck_manifest_free(&ma);
  ck_manifest_free(&mb);
  return s;
}
