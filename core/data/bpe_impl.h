/* The tables of a loaded BPE vocabulary, shared by its reader (bpe.c) and
 * its encoder (bpe_stream.c). Internal to core/data. */
#ifndef GIANT_CORE_DATA_BPE_IMPL_H
#define GIANT_CORE_DATA_BPE_IMPL_H

#include "core/data/bpe.h"

/* Added tokens are matched in the text before pre-tokenizing; a stream
 * holds back this many bytes at most to see one whole. */
#define GT_BPE_MAX_ADDED 1024

typedef struct gt_bpe_tok {
  size_t off; /* its bytes: gt_bpe.bytes[off..off+len) */
  uint32_t len, id;
} gt_bpe_tok;

typedef struct gt_bpe_merge_entry {
  uint64_t key; /* left id << 32 | right id */
  uint32_t rank, new_id;
  bool used;
} gt_bpe_merge_entry;

typedef struct gt_bpe_added {
  const unsigned char *s;
  size_t len;
  uint32_t id;
} gt_bpe_added;

struct gt_bpe {
  gt_pretok_kind kind;
  bool ignore_merges, fuse_unk;
  bool add_prefix_space; /* ByteLevel's: a space before text between added tokens that lacks one */
  int64_t unk;           /* the unknown token's id, -1 none: bytes without a token are then dropped */
  uint32_t vocab_size, eot;
  const char *eot_name;
  /* The byte-level tokens, as bytes, and a hash map from bytes to them. */
  gt_bpe_tok *toks;
  uint32_t ntok;
  size_t tokcap;
  unsigned char *bytes;
  size_t nbytes, bytecap;
  uint32_t *tokmap; /* index + 1 into toks, 0 empty */
  size_t tokmap_mask;
  size_t longest_key;
  int64_t byte_id[256]; /* the single-byte tokens, -1 where absent */
  gt_bpe_merge_entry *merges;
  size_t mmask;
  gt_bpe_added *added;
  size_t nadded, added_max;
  bool first_byte[256]; /* some added token starts with this byte */
};

uint64_t gt_bpe_hash(const unsigned char *s, size_t n);
/* The id of the token with these bytes, or -1. */
int64_t gt_bpe_find(const gt_bpe *b, const unsigned char *s, size_t n);
/* The merge of the pair (left, right): its rank and the id it makes. */
bool gt_bpe_merge(const gt_bpe *b, uint32_t left, uint32_t right, uint32_t *rank, uint32_t *new_id);

#endif
