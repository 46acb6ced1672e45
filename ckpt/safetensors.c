/* safetensors: the header checked whole before any tensor is read, so a
 * file that lies about its sizes fails at open, naming the tensor and what
 * is wrong, and never leads a read out of the file. As Hugging Face's own
 * reader, the tensors' byte ranges must tile the data exactly: no overlap,
 * no gap, nothing past the end and nothing left over. */
#include "ckpt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "core/data/json.h"
#include "giant/tensor.h"

struct ck_st {
  char *path; /* for messages */
  int fd;     /* -1 when parsed from memory */
  uint64_t data_at;
  char *header; /* the JSON text the tensor names point into (via doc) */
  gt_json_doc *doc;
  ck_st_tensor *t;
  int n;
};

static const struct {
  const char *name;
  int size; /* 0: a dtype of the format Giant does not take */
} dtypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 0}, {"I64", 0},  {"I32", 0},     {"I16", 0},    {"I8", 0},
              {"U8", 0},  {"U16", 0}, {"U32", 0},  {"U64", 0}, {"BOOL", 0}, {"F8_E4M3", 0}, {"F8_E5M2", 0}};

static size_t dtype_size(ck_st_dtype d) { return d == CK_ST_F32 ? 4 : 2; }

static gt_status parse_dtype(const char *file, const char *tensor, const gt_json *v, ck_st_dtype *out) {
  if (!v || v->type != GT_JSON_STRING) return gt_errorf(GT_EFORMAT, "%s: tensor %s has no dtype string", file, tensor);
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    if (strcmp(v->str, dtypes[i].name) != 0) continue;
    if (!dtypes[i].size)
      return gt_errorf(GT_EUNSUPPORTED,
                       "%s: tensor %s is of dtype %s, which Giant does not read: it takes F32, F16 and BF16 "
                       "(save the model in one of those)",
                       file, tensor, v->str);
    *out = (ck_st_dtype)i;
    return GT_OK;
  }
  return gt_errorf(GT_EFORMAT, "%s: tensor %s has an unknown dtype '%.32s'", file, tensor, v->str);
}

/* A whole number in [0, 2^53): what a JSON double holds exactly. */
static bool whole_number(const gt_json *v, uint64_t *out) {
  if (!v || v->type != GT_JSON_NUMBER || !(v->number >= 0) || v->number >= 9007199254740992.0 ||
      v->number != floor(v->number))
    return false;
  *out = (uint64_t)v->number;
  return true;
}

static gt_status parse_tensor(const char *file, const gt_json *e, ck_st_tensor *t) {
  const char *name = e->key;
  if (e->type != GT_JSON_OBJECT) return gt_errorf(GT_EFORMAT, "%s: the entry of tensor %s is no object", file, name);
  for (const gt_json *m = e->child; m; m = m->next)
    if (strcmp(m->key, "dtype") && strcmp(m->key, "shape") && strcmp(m->key, "data_offsets"))
      return gt_errorf(GT_EFORMAT, "%s: tensor %s has an unknown field '%.64s'", file, name, m->key);
  t->name = name;
  GT_TRY(parse_dtype(file, name, gt_json_get(e, "dtype"), &t->dtype));
  const gt_json *shape = gt_json_get(e, "shape"), *off = gt_json_get(e, "data_offsets");
  if (!shape || shape->type != GT_JSON_ARRAY || shape->count > CK_ST_MAXDIM)
    return gt_errorf(GT_EFORMAT, "%s: tensor %s needs a shape, an array of at most %d sizes", file, name, CK_ST_MAXDIM);
  t->ndim = (int)shape->count;
  /* numel * size stays below 2^64: each factor is checked against what is left. */
  uint64_t numel = 1, limit = UINT64_MAX / 8;
  int d = 0;
  for (const gt_json *s = shape->child; s; s = s->next, d++) {
    uint64_t v;
    if (!whole_number(s, &v)) return gt_errorf(GT_EFORMAT, "%s: tensor %s: shape[%d] is no size", file, name, d);
    if (v && numel > limit / v) return gt_errorf(GT_EFORMAT, "%s: tensor %s: its shape is too large", file, name);
    numel *= v;
    t->shape[d] = (int64_t)v;
  }
  t->numel = numel;
  if (!off || off->type != GT_JSON_ARRAY || off->count != 2 || !whole_number(off->child, &t->begin) ||
      !whole_number(off->child->next, &t->end))
    return gt_errorf(GT_EFORMAT, "%s: tensor %s needs data_offsets, [begin, end] in bytes", file, name);
  if (t->end < t->begin || t->end - t->begin != numel * dtype_size(t->dtype))
    return gt_errorf(GT_EFORMAT,
                     "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes where its dtype and shape need "
                     "%llu",
                     file, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)(t->end - t->begin), (unsigned long long)(numel * dtype_size(t->dtype)));
  return GT_OK;
}

static int by_begin(const void *a, const void *b) {
  const ck_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const ck_st_tensor *)a)->name, ((const ck_st_tensor *)b)->name);
}

/* The ranges tile [0, data_len); names are unique. */
static gt_status check_layout(const char *file, ck_st_tensor *t, int n, uint64_t data_len) {
  qsort(t, (size_t)n, sizeof *t, by_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(t[i - 1].name, t[i].name))
      return gt_errorf(GT_EFORMAT, "%s: tensor %s is named twice", file, t[i].name);
  qsort(t, (size_t)n, sizeof *t, by_begin);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].end > data_len)
      return gt_errorf(GT_EFORMAT, "%s: tensor %s ends at byte %llu of the data, and the file holds %llu", file,
                       t[i].name, (unsigned long long)t[i].end, (unsigned long long)data_len);
    if (t[i].begin < at)
      return gt_errorf(GT_EFORMAT, "%s: tensor %s (bytes %llu..%llu) overlaps tensor %s", file, t[i].name,
                       (unsigned long long)t[i].begin, (unsigned long long)t[i].end, t[i - 1].name);
    if (t[i].begin > at)
      return gt_errorf(GT_EFORMAT, "%s: bytes %llu..%llu of the data belong to no tensor", file, (unsigned long long)at,
                       (unsigned long long)t[i].begin);
    at = t[i].end;
  }
  if (at != data_len)
    return gt_errorf(GT_EFORMAT, "%s: the tensors end at byte %llu of the data and the file goes on to %llu", file,
                     (unsigned long long)at, (unsigned long long)data_len);
  qsort(t, (size_t)n, sizeof *t, by_name);
  return GT_OK;
}

static gt_status parse_into(ck_st *st, const char *header, size_t len, uint64_t data_len, const char *name) {
  if (len == 0 || header[0] != '{')
    return gt_errorf(GT_EFORMAT, "%s: the header is no JSON object: is it a safetensors file?", name);
  const gt_json *root;
  GT_TRY(gt_json_parse(header, len, name, &st->doc, &root));
  if (root->type != GT_JSON_OBJECT) return gt_errorf(GT_EFORMAT, "%s: the header is no JSON object", name);
  st->t = calloc(root->count ? root->count : 1, sizeof *st->t);
  if (!st->t) return gt_errorf(GT_ENOMEM, "%s: out of memory for %zu tensors", name, root->count);
  for (const gt_json *e = root->child; e; e = e->next) {
    if (strlen(e->key) != e->key_len) return gt_errorf(GT_EFORMAT, "%s: a tensor's name holds a NUL byte", name);
    if (!strcmp(e->key, "__metadata__")) {
      /* Free text for its writer: a map of strings, read by no one here. */
      if (e->type != GT_JSON_OBJECT) return gt_errorf(GT_EFORMAT, "%s: __metadata__ is no object", name);
      for (const gt_json *m = e->child; m; m = m->next)
        if (m->type != GT_JSON_STRING)
          return gt_errorf(GT_EFORMAT, "%s: __metadata__'s %.64s is no string", name, m->key);
      continue;
    }
    GT_TRY(parse_tensor(name, e, &st->t[st->n]));
    st->n++;
  }
  return check_layout(name, st->t, st->n, data_len);
}

static ck_st *st_new(const char *name) {
  ck_st *st = calloc(1, sizeof *st);
  if (st) st->path = strdup(name);
  if (st && !st->path) {
    free(st);
    return NULL;
  }
  if (st) st->fd = -1;
  return st;
}

gt_status ck_st_parse(const char *header, size_t len, uint64_t data_len, const char *name, ck_st **out) {
  *out = NULL;
  ck_st *st = st_new(name);
  if (!st) return gt_errorf(GT_ENOMEM, "out of memory reading %s", name);
  gt_status s = parse_into(st, header, len, data_len, name);
  if (s != GT_OK) {
    ck_st_close(st);
    return s;
  }
  *out = st;
  return GT_OK;
}

gt_status ck_st_open(const char *path, ck_st **out) {
  *out = NULL;
  ck_st *st = st_new(path);
  if (!st) return gt_errorf(GT_ENOMEM, "out of memory reading %s", path);
  gt_status s = GT_OK;
  struct stat sb;
  unsigned char len8[8];
  uint64_t hlen = 0;
  st->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (st->fd < 0) s = gt_errorf(errno == ENOENT ? GT_ENOTFOUND : GT_EIO, "cannot open %s: %s", path, strerror(errno));
  if (s == GT_OK && (fstat(st->fd, &sb) != 0 || !S_ISREG(sb.st_mode)))
    s = gt_errorf(GT_EIO, "%s is not a readable file", path);
  if (s == GT_OK && (sb.st_size < 8 || ck_transfer(st->fd, false, len8, 8, 0) != 0))
    s = gt_errorf(GT_EFORMAT, "%s is too short for a safetensors file (%lld bytes)", path, (long long)sb.st_size);
  for (int i = 7; s == GT_OK && i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (s == GT_OK && (hlen > CK_ST_MAX_HEADER || hlen > (uint64_t)sb.st_size - 8))
    s = gt_errorf(GT_EFORMAT, "%s: the header claims %llu bytes and the file holds %lld after the length (at most %u)",
                  path, (unsigned long long)hlen, (long long)sb.st_size - 8, CK_ST_MAX_HEADER);
  if (s == GT_OK && !(st->header = malloc(hlen ? hlen : 1))) s = gt_errorf(GT_ENOMEM, "out of memory reading %s", path);
  int e = s == GT_OK ? ck_transfer(st->fd, false, st->header, hlen, 8) : 0;
  if (e) s = gt_errorf(GT_EIO, "reading the header of %s: %s", path, strerror(e));
  st->data_at = 8 + hlen;
  if (s == GT_OK) s = parse_into(st, st->header, hlen, (uint64_t)sb.st_size - st->data_at, path);
  if (s != GT_OK) {
    ck_st_close(st);
    return s;
  }
  *out = st;
  return GT_OK;
}

void ck_st_close(ck_st *st) {
  if (!st) return;
  if (st->fd >= 0) close(st->fd);
  gt_json_free(st->doc);
  free(st->header);
  free(st->t);
  free(st->path);
  free(st);
}

int ck_st_count(const ck_st *st) { return st->n; }
const ck_st_tensor *ck_st_at(const ck_st *st, int i) { return i >= 0 && i < st->n ? &st->t[i] : NULL; }

const ck_st_tensor *ck_st_find(const ck_st *st, const char *name) {
  ck_st_tensor key = {.name = name};
  return bsearch(&key, st->t, (size_t)st->n, sizeof key, by_name);
}

/* IEEE half to float, subnormals, infinities and NaNs included. */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(m | 1024), (int)e - 25);
  return sign ? -v : v;
}

gt_status ck_st_read(ck_st *st, const ck_st_tensor *t, float *dst) {
  if (st->fd < 0) return gt_errorf(GT_EINVAL, "%s was parsed from memory: it has no data to read", st->path);
  size_t bytes = (size_t)(t->end - t->begin);
  /* Half-width data goes to the second half of dst, and widens from the front. */
  void *raw = t->dtype == CK_ST_F32 ? (void *)dst : (void *)(dst + t->numel / 2);
  int e = ck_transfer(st->fd, false, raw, bytes, st->data_at + t->begin);
  if (e) return gt_errorf(GT_EIO, "reading tensor %s of %s: %s", t->name, st->path, strerror(e));
  if (t->dtype == CK_ST_F32) return GT_OK;
  const uint16_t *h = raw;
  for (uint64_t i = 0; i < t->numel; i++) {
    uint16_t v = h[i]; /* read before dst[i] may overwrite it */
    dst[i] = t->dtype == CK_ST_BF16 ? gt_bf16_to_f32(v) : f16_to_f32(v);
  }
  return GT_OK;
}

/* ---- the writer ---- */

static void put_json_string(ck_buf *b, const char *s) {
  ck_put(b, "\"", 1);
  for (; *s; s++) {
    char esc[8];
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      ck_put(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      ck_put(b, esc, 6);
    } else {
      ck_put(b, s, 1);
    }
  }
  ck_put(b, "\"", 1);
}

static void put_text(ck_buf *b, const char *s) { ck_put(b, s, strlen(s)); }

gt_status ck_st_write(const char *dir, const char *name, const ck_st_out *t, int n) {
  ck_buf h = {0};
  char num[64];
  uint64_t at = 0;
  put_text(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < n; i++) {
    uint64_t numel = 1;
    put_text(&h, ",");
    put_json_string(&h, t[i].name);
    put_text(&h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
      put_text(&h, num);
      numel *= (uint64_t)t[i].shape[d];
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
             (unsigned long long)(at + 4 * numel));
    put_text(&h, num);
    at += 4 * numel;
  }
  put_text(&h, "}");
  while (h.len % 8) put_text(&h, " "); /* the data then starts 8-byte aligned, as Hugging Face pads it */
  if (h.oom) {
    ck_buf_free(&h);
    return gt_errorf(GT_ENOMEM, "out of memory writing %s/%s", dir, name);
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
  ck_file f;
  gt_status s = ck_file_open(&f, dir, name);
  if (s == GT_OK) {
    ck_file_write(&f, len8, 8);
    ck_file_write(&f, h.p, h.len);
    for (int i = 0; i < n; i++) {
      size_t numel = 1;
      for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
      /* Floats are little-endian on every host Giant runs on, as the format's are. */
      ck_file_write(&f, t[i].data, numel * sizeof(float));
    }
    s = ck_file_commit(&f);
  }
  ck_buf_free(&h);
  return s;
}
