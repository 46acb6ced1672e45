/* Little-endian encoding of manifests: a growable buffer to write into and
 * a bounds-checked reader whose failures are sticky, so a decoder reads a
 * whole record and checks once. */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

void ck_put(ck_buf *b, const void *p, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}

void ck_put_u32(ck_buf *b, uint32_t v) {
  unsigned char x[4];
  for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
  ck_put(b, x, 4);
}

void ck_put_u64(ck_buf *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
  ck_put(b, x, 8);
}

void ck_put_str(ck_buf *b, const char *s) {
  size_t n = strlen(s);
  ck_put_u32(b, (uint32_t)n);
  ck_put(b, s, n);
}

void ck_buf_free(ck_buf *b) {
  free(b->p);
  *b = (ck_buf){0};
}

const unsigned char *ck_get(ck_rd *r, size_t n) {
  if (r->bad || n > r->len - r->at) {
    r->bad = true;
    return NULL;
  }
  const unsigned char *p = r->p + r->at;
  r->at += n;
  return p;
}

uint32_t ck_get_u32(ck_rd *r) {
  const unsigned char *p = ck_get(r, 4);
  uint32_t v = 0;
  for (int i = 0; p && i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}

uint64_t ck_get_u64(ck_rd *r) {
  const unsigned char *p = ck_get(r, 8);
  uint64_t v = 0;
  for (int i = 0; p && i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void ck_get_str(ck_rd *r, char *out, size_t cap) {
  uint32_t n = ck_get_u32(r);
  if (n >= cap) r->bad = true;
  const unsigned char *p = r->bad ? NULL : ck_get(r, n);
  if (!p) {
    out[0] = 0;
    return;
  }
  memcpy(out, p, n);
  out[n] = 0;
}
