/* Encoding a stream of documents with a byte-level BPE vocabulary.
 *
 * Bytes come in as the text reader cuts them; invalid UTF-8 is replaced by
 * U+FFFD (one for each maximal invalid subpart, as Python's
 * bytes.decode("utf-8", errors="replace") does), since tokenizers encodes
 * text, not bytes. The valid text gathers in a buffer; once it is large,
 * the pre-tokenizer cuts off the pieces it can be sure of (pretok.c says
 * when it needs to see further), so where a buffer ends never changes the
 * output, and memory stays bounded by the longest piece. Added tokens
 * (<|endoftext|> and the like) are cut out of the text first, as
 * tokenizers does, the text between them pre-tokenized as a whole.
 *
 * Each piece is merged as tokenizers' BPE does: the pair of lowest rank
 * first, the leftmost among equals, with a heap; a cache keeps the ids of
 * short pieces seen before.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/bpe_impl.h"
#include "giant/data.h"

#define CHUNK (256u << 10) /* text held before pre-tokenizing, by default */
#define OUT_IDS 4096
#define CACHE_SLOTS (1u << 18)
#define CACHE_BYTES (16u << 20)
#define CACHE_MAX_PIECE 64

typedef struct sym {
  uint32_t id;
  int32_t prev, next;
  bool dead;
} sym;

typedef struct cand {
  uint32_t rank, new_id;
  int32_t pos;
} cand;

typedef struct cache_slot {
  uint64_t hash;
  uint32_t off, len, nids; /* piece bytes then ids (4-aligned) at arena[off] */
} cache_slot;

struct gt_bpe_stream {
  const gt_bpe *b;
  gt_tokfile_writer *w;
  /* The UTF-8 repair: a sequence begun, the range its next byte must be in. */
  unsigned char seq[4];
  int nseq, seqlen;
  unsigned char lo, hi;
  /* Repaired text not yet encoded. */
  unsigned char *buf;
  size_t len, cap, next_at, chunk;
  bool piece_start; /* buf[0] begins a piece of text between added tokens */
  uint32_t out[OUT_IDS];
  size_t nout;
  sym *syms;
  cand *heap;
  size_t symcap, heapcap, nheap;
  cache_slot *cache;
  unsigned char *arena;
  size_t arena_used, cache_used;
};

static gt_status oom(void) { return gt_errorf(GT_ENOMEM, "out of memory encoding with the BPE vocabulary"); }

gt_status gt_bpe_stream_flush(gt_bpe_stream *st) {
  if (st->nout) GT_TRY(gt_tokfile_writer_append(st->w, st->out, st->nout));
  st->nout = 0;
  return GT_OK;
}

static gt_status put_id(gt_bpe_stream *st, uint32_t id) {
  if (st->nout == OUT_IDS) GT_TRY(gt_bpe_stream_flush(st));
  st->out[st->nout++] = id;
  return GT_OK;
}

static bool cand_less(const cand *a, const cand *b) { return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos; }

static void heap_push(gt_bpe_stream *st, cand c) {
  size_t i = st->nheap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&c, &st->heap[p])) break;
    st->heap[i] = st->heap[p];
    i = p;
  }
  st->heap[i] = c;
}

static cand heap_pop(gt_bpe_stream *st) {
  cand top = st->heap[0], last = st->heap[--st->nheap];
  size_t i = 0, n = st->nheap;
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    const cand *best = &last;
    if (l < n && cand_less(&st->heap[l], best)) m = l, best = &st->heap[l];
    if (l + 1 < n && cand_less(&st->heap[l + 1], best)) m = l + 1;
    if (m == i) break;
    st->heap[i] = st->heap[m];
    i = m;
  }
  if (n) st->heap[i] = last;
  return top;
}

static void push_pair(gt_bpe_stream *st, int32_t left) {
  int32_t right = st->syms[left].next;
  uint32_t rank, id;
  if (right >= 0 && gt_bpe_merge(st->b, st->syms[left].id, st->syms[right].id, &rank, &id))
    heap_push(st, (cand){.rank = rank, .new_id = id, .pos = left});
}

static gt_status reserve(gt_bpe_stream *st, size_t n) {
  if (n <= st->symcap) return GT_OK;
  size_t cap = st->symcap ? st->symcap : 256;
  while (cap < n) cap *= 2;
  sym *s = realloc(st->syms, cap * sizeof *s);
  if (s) st->syms = s;
  cand *h = realloc(st->heap, 3 * cap * sizeof *h);
  if (h) st->heap = h;
  if (!s || !h) return oom();
  st->symcap = cap;
  return GT_OK;
}

static cache_slot *cache_find(gt_bpe_stream *st, const unsigned char *s, size_t n, uint64_t h) {
  for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
    cache_slot *c = &st->cache[i];
    if (c->len == 0 || (c->hash == h && c->len == n && memcmp(st->arena + c->off, s, n) == 0)) return c;
  }
}

static void cache_put(gt_bpe_stream *st, cache_slot *c, const unsigned char *s, size_t n, uint64_t h, size_t first,
                      size_t nids) {
  size_t need = ((n + 3) & ~(size_t)3) + 4 * nids;
  if (st->cache_used + 1 > CACHE_SLOTS / 2 || st->arena_used + need > CACHE_BYTES) {
    memset(st->cache, 0, CACHE_SLOTS * sizeof *st->cache); /* full: start over */
    st->cache_used = st->arena_used = 0;
    c = cache_find(st, s, n, h);
  }
  c->hash = h;
  c->off = (uint32_t)st->arena_used;
  c->len = (uint32_t)n;
  c->nids = (uint32_t)nids;
  memcpy(st->arena + c->off, s, n);
  memcpy(st->arena + c->off + ((n + 3) & ~(size_t)3), st->out + first, 4 * nids);
  st->arena_used += need;
  st->cache_used++;
}

/* One pre-token's bytes to ids. */
static gt_status encode_piece(gt_bpe_stream *st, const unsigned char *s, size_t n) {
  const gt_bpe *b = st->b;
  if (b->ignore_merges) {
    int64_t whole = gt_bpe_find(b, s, n);
    if (whole >= 0) return put_id(st, (uint32_t)whole);
  }
  uint64_t h = 0;
  cache_slot *c = NULL;
  if (n <= CACHE_MAX_PIECE) {
    h = gt_bpe_hash(s, n);
    c = cache_find(st, s, n, h);
    if (c->len) {
      const unsigned char *ids = st->arena + c->off + ((n + 3) & ~(size_t)3);
      for (uint32_t i = 0; i < c->nids; i++) {
        uint32_t id;
        memcpy(&id, ids + 4 * i, 4);
        GT_TRY(put_id(st, id));
      }
      return GT_OK;
    }
  }
  if (n > INT32_MAX)
    return gt_errorf(GT_EUNSUPPORTED, "a piece of text of %zu bytes (one run of letters, spaces...) is too long", n);
  GT_TRY(reserve(st, n));
  int32_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t id = b->byte_id[s[i]];
    if (id < 0) {
      if (b->unk < 0) continue; /* tokenizers drops a byte it has no token for */
      if (b->fuse_unk && m > 0 && st->syms[m - 1].id == (uint32_t)b->unk) continue;
      id = b->unk;
    }
    st->syms[m] = (sym){.id = (uint32_t)id, .prev = m - 1, .next = m + 1};
    m++;
  }
  if (m == 0) return GT_OK;
  st->syms[m - 1].next = -1;
  st->nheap = 0;
  for (int32_t i = 0; i + 1 < m; i++) push_pair(st, i);
  while (st->nheap) {
    cand top = heap_pop(st);
    sym *l = &st->syms[top.pos];
    if (l->dead || l->next < 0) continue;
    uint32_t rank, id;
    /* The pair may have changed since it was pushed: merge only what is there. */
    if (!gt_bpe_merge(b, l->id, st->syms[l->next].id, &rank, &id) || id != top.new_id) continue;
    sym *r = &st->syms[l->next];
    l->id = top.new_id;
    r->dead = true;
    l->next = r->next;
    if (r->next >= 0) st->syms[r->next].prev = top.pos;
    if (l->prev >= 0) push_pair(st, l->prev);
    push_pair(st, top.pos);
  }
  if (!c) { /* long: no cache, and perhaps more ids than the out buffer holds */
    for (int32_t i = 0; i >= 0; i = st->syms[i].next) GT_TRY(put_id(st, st->syms[i].id));
    return GT_OK;
  }
  if (st->nout + (size_t)m > OUT_IDS) GT_TRY(gt_bpe_stream_flush(st));
  size_t first = st->nout;
  for (int32_t i = 0; i >= 0; i = st->syms[i].next) st->out[st->nout++] = st->syms[i].id;
  cache_put(st, c, s, n, h, first, st->nout - first);
  return GT_OK;
}

/* The earliest added token in buf[from..len), the longest there. */
static const gt_bpe_added *find_added(const gt_bpe *b, const unsigned char *buf, size_t from, size_t len, size_t *at) {
  for (size_t i = from; i < len; i++) {
    if (!b->first_byte[buf[i]]) continue;
    const gt_bpe_added *best = NULL;
    for (size_t k = 0; k < b->nadded; k++) {
      const gt_bpe_added *a = &b->added[k];
      if (a->len <= len - i && memcmp(buf + i, a->s, a->len) == 0 && (!best || a->len > best->len)) best = a;
    }
    if (best) {
      *at = i;
      return best;
    }
  }
  return NULL;
}

static gt_status grow(gt_bpe_stream *st, size_t n) {
  if (st->len + n <= st->cap) return GT_OK;
  size_t cap = st->cap ? st->cap : CHUNK;
  while (cap < st->len + n) cap *= 2;
  unsigned char *p = realloc(st->buf, cap);
  if (!p) return oom();
  st->buf = p;
  st->cap = cap;
  return GT_OK;
}

static gt_status put_text(gt_bpe_stream *st, const unsigned char *s, size_t n) {
  GT_TRY(grow(st, n));
  memcpy(st->buf + st->len, s, n);
  st->len += n;
  return GT_OK;
}

/* add_prefix_space's space, before the piece at pos (once per piece: the
 * copy is bounded by the text held). */
static gt_status insert_space(gt_bpe_stream *st, size_t pos) {
  GT_TRY(grow(st, 1));
  memmove(st->buf + pos + 1, st->buf + pos, st->len - pos);
  st->buf[pos] = ' ';
  st->len++;
  return GT_OK;
}

/* Encodes what can be known of buf; all of it when final. */
static gt_status process(gt_bpe_stream *st, bool final) {
  const gt_bpe *b = st->b;
  size_t pos = 0;
  while (pos < st->len) {
    size_t end = st->len, at = 0;
    bool end_final = final;
    const gt_bpe_added *a = b->nadded ? find_added(b, st->buf, pos, st->len, &at) : NULL;
    if (a && (final || at + b->added_max <= st->len)) {
      end = at;
      end_final = true;
    } else if (b->nadded && !final) {
      /* An added token may begin in the last bytes, cut off by the end of
       * what is known: a longer one where one was found, or an earlier. */
      size_t hold = b->added_max - 1;
      a = NULL;
      end = st->len - pos > hold ? st->len - hold : pos;
      end_final = false;
    }
    if (st->piece_start && b->add_prefix_space) {
      if (pos < end) { /* the piece's first byte is known */
        if (st->buf[pos] != ' ') {
          GT_TRY(insert_space(st, pos));
          end++, at++;
        }
        st->piece_start = false;
      } else if (end_final) { /* an empty piece */
        st->piece_start = false;
      }
    }
    while (pos < end) {
      size_t m = gt_pretok_next(b->kind, st->buf + pos, end - pos, end_final);
      if (m == 0) break;
      GT_TRY(encode_piece(st, st->buf + pos, m));
      pos += m;
    }
    if (pos < end || !end_final) break;
    if (a) {
      GT_TRY(put_id(st, a->id));
      pos += a->len;
      st->piece_start = true;
    }
  }
  memmove(st->buf, st->buf + pos, st->len - pos);
  st->len -= pos;
  /* Pre-tokenize again only once the buffer has doubled, so that one long
   * piece is not rescanned at every byte. */
  st->next_at = st->len * 2 > st->chunk ? st->len * 2 : st->chunk;
  return GT_OK;
}

static const unsigned char replacement[3] = {0xEF, 0xBF, 0xBD};

/* One byte through the UTF-8 repair. */
static gt_status repair(gt_bpe_stream *st, unsigned char c) {
  if (st->nseq) {
    if (c >= st->lo && c <= st->hi) {
      st->seq[st->nseq++] = c;
      st->lo = 0x80, st->hi = 0xBF;
      if (st->nseq == st->seqlen) {
        GT_TRY(put_text(st, st->seq, (size_t)st->nseq));
        st->nseq = 0;
      }
      return GT_OK;
    }
    st->nseq = 0; /* the sequence broke off: one U+FFFD, and c starts afresh */
    GT_TRY(put_text(st, replacement, 3));
  }
  if (c < 0x80) return put_text(st, &c, 1);
  st->lo = 0x80, st->hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    st->seqlen = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    st->seqlen = 3;
    if (c == 0xE0) st->lo = 0xA0;
    if (c == 0xED) st->hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    st->seqlen = 4;
    if (c == 0xF0) st->lo = 0x90;
    if (c == 0xF4) st->hi = 0x8F; /* nothing past U+10FFFF */
  } else
    return put_text(st, replacement, 3);
  st->seq[0] = c;
  st->nseq = 1;
  return GT_OK;
}

gt_status gt_bpe_stream_feed(gt_bpe_stream *st, const unsigned char *bytes, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (bytes[i] < 0x80 && !st->nseq) { /* ASCII, the common case */
      if (st->len == st->cap)
        GT_TRY(put_text(st, bytes + i, 1));
      else
        st->buf[st->len++] = bytes[i];
    } else {
      GT_TRY(repair(st, bytes[i]));
    }
    if (st->len >= st->next_at) GT_TRY(process(st, false));
  }
  return GT_OK;
}

gt_status gt_bpe_stream_end(gt_bpe_stream *st, bool end_of_text) {
  if (st->nseq) {
    st->nseq = 0;
    GT_TRY(put_text(st, replacement, 3));
  }
  GT_TRY(process(st, true));
  st->piece_start = true;
  if (end_of_text && st->b->eot != GT_TOKFILE_NO_SEP) GT_TRY(put_id(st, st->b->eot));
  return GT_OK;
}

gt_status gt_bpe_stream_open(const gt_bpe *b, gt_tokfile_writer *w, gt_bpe_stream **out) {
  *out = NULL;
  gt_bpe_stream *st = calloc(1, sizeof *st);
  if (!st) return oom();
  st->b = b;
  st->w = w;
  st->next_at = st->chunk = CHUNK;
  st->piece_start = true;
  st->cache = calloc(CACHE_SLOTS, sizeof *st->cache);
  st->arena = malloc(CACHE_BYTES);
  if (!st->cache || !st->arena) {
    gt_bpe_stream_free(st);
    return oom();
  }
  *out = st;
  return GT_OK;
}

void gt_bpe_stream_set_chunk(gt_bpe_stream *st, size_t bytes) { st->chunk = st->next_at = bytes ? bytes : 1; }

void gt_bpe_stream_free(gt_bpe_stream *st) {
  if (!st) return;
  free(st->buf);
  free(st->syms);
  free(st->heap);
  free(st->cache);
  free(st->arena);
  free(st);
}
