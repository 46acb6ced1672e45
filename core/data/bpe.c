/* Reading a byte-level BPE tokenizer.json into lookup tables.
 *
 * Token strings in the file are in GPT-2's byte-to-unicode alphabet (each
 * byte shown as one printable character); they are turned back into bytes
 * here, so that the encoder works on the text's bytes. Merges become a
 * hash map from a pair of ids to its rank and the id it makes. Everything
 * the encoder would have to treat otherwise than Hugging Face's tokenizers
 * does (a normalizer, another pre-tokenizer, dropout...) is refused by
 * name rather than silently encoded differently.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/data/bpe_impl.h"
#include "core/data/json.h"
#include "giant/data.h"

#define MAX_FILE_BYTES (1ull << 30)
#define MAX_ID 0x7FFFFFFFu

static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

uint64_t gt_bpe_hash(const unsigned char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

/* GPT-2's byte-to-unicode alphabet, backwards: code point -> byte, -1.
 * The printable bytes stand for themselves; the other 68 (0x00-0x20,
 * 0x7F-0xA0, 0xAD), in order, are U+0100 onwards. */
static int unicode_to_byte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
  if (cp < 256 || cp >= 256 + 68) return -1;
  uint32_t n = cp - 256;
  return n < 33 ? (int)n : n < 67 ? (int)(0x7F + n - 33) : 0xAD;
}

/* A token's text in the byte alphabet -> its bytes (out has room for len);
 * false if a character is outside the alphabet. */
static bool unmap(const char *s, size_t len, unsigned char *out, size_t *out_len) {
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp;
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + n > len) return false;
    cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t j = 1; j < n; j++) cp = cp << 6 | ((unsigned char)s[i + j] & 0x3F);
    int b = unicode_to_byte(cp);
    if (b < 0) return false;
    out[k++] = (unsigned char)b;
    i += n;
  }
  *out_len = k;
  return true;
}

static gt_status grow_tokens(gt_bpe *b, size_t need_bytes) {
  if (b->ntok == b->tokcap) {
    size_t cap = b->tokcap ? 2 * b->tokcap : 1024;
    gt_bpe_tok *t = realloc(b->toks, cap * sizeof *t);
    if (!t) return gt_errorf(GT_ENOMEM, "out of memory reading the vocabulary");
    b->toks = t;
    b->tokcap = cap;
  }
  if (b->nbytes + need_bytes > b->bytecap) {
    size_t cap = b->bytecap ? 2 * b->bytecap : 65536;
    while (cap < b->nbytes + need_bytes) cap *= 2;
    unsigned char *p = realloc(b->bytes, cap);
    if (!p) return gt_errorf(GT_ENOMEM, "out of memory reading the vocabulary");
    b->bytes = p;
    b->bytecap = cap;
  }
  return GT_OK;
}

int64_t gt_bpe_find(const gt_bpe *b, const unsigned char *s, size_t n) {
  if (!b->tokmap_mask) return -1;
  for (size_t i = gt_bpe_hash(s, n) & b->tokmap_mask;; i = (i + 1) & b->tokmap_mask) {
    uint32_t t = b->tokmap[i];
    if (t == 0) return -1;
    const gt_bpe_tok *k = &b->toks[t - 1];
    if (k->len == n && memcmp(b->bytes + k->off, s, n) == 0) return k->id;
  }
}

static gt_status build_tokmap(gt_bpe *b) {
  size_t cap = 16;
  while (cap < 2 * (size_t)b->ntok + 16) cap *= 2;
  b->tokmap = calloc(cap, sizeof *b->tokmap);
  if (!b->tokmap) return gt_errorf(GT_ENOMEM, "out of memory reading the vocabulary");
  b->tokmap_mask = cap - 1;
  for (uint32_t t = 0; t < b->ntok; t++) {
    const gt_bpe_tok *k = &b->toks[t];
    size_t i = gt_bpe_hash(b->bytes + k->off, k->len) & b->tokmap_mask;
    for (;; i = (i + 1) & b->tokmap_mask) {
      uint32_t u = b->tokmap[i];
      if (u == 0) {
        b->tokmap[i] = t + 1;
        break;
      }
      const gt_bpe_tok *o = &b->toks[u - 1];
      if (o->len == k->len && memcmp(b->bytes + o->off, b->bytes + k->off, k->len) == 0) {
        b->tokmap[i] = t + 1; /* a repeated entry: the later wins, as in a map read by serde */
        break;
      }
    }
  }
  return GT_OK;
}

bool gt_bpe_merge(const gt_bpe *b, uint32_t left, uint32_t right, uint32_t *rank, uint32_t *new_id) {
  if (!b->mmask) return false;
  uint64_t key = (uint64_t)left << 32 | right;
  for (size_t i = mix(key) & b->mmask;; i = (i + 1) & b->mmask) {
    const gt_bpe_merge_entry *e = &b->merges[i];
    if (!e->used) return false;
    if (e->key == key) {
      *rank = e->rank;
      *new_id = e->new_id;
      return true;
    }
  }
}

static void merge_put(gt_bpe *b, uint64_t key, uint32_t rank, uint32_t new_id) {
  for (size_t i = mix(key) & b->mmask;; i = (i + 1) & b->mmask) {
    gt_bpe_merge_entry *e = &b->merges[i];
    if (!e->used || e->key == key) { /* a repeated pair: the later wins, as in tokenizers */
      *e = (gt_bpe_merge_entry){.key = key, .rank = rank, .new_id = new_id, .used = true};
      return;
    }
  }
}

static gt_status want(const gt_json *v, gt_json_type t, const char *name, const char *what) {
  if (!v) return gt_errorf(GT_EFORMAT, "%s: %s is missing", name, what);
  if (v->type != t)
    return gt_errorf(GT_EFORMAT, "%s: %s is %s, not %s", name, what, gt_json_type_name(v->type), gt_json_type_name(t));
  return GT_OK;
}

static bool is_null(const gt_json *v) { return !v || v->type == GT_JSON_NULL; }
static bool is_true(const gt_json *v) { return v && v->type == GT_JSON_BOOL && v->boolean; }

static gt_status read_id(const gt_json *v, const char *name, const char *what, uint32_t *out) {
  if (!v || v->type != GT_JSON_NUMBER || v->number < 0 || v->number > MAX_ID ||
      v->number != (double)(uint32_t)v->number)
    return gt_errorf(GT_EFORMAT, "%s: %s is not a token id (a whole number from 0 to 2^31-1)", name, what);
  *out = (uint32_t)v->number;
  return GT_OK;
}

/* add_prefix_space puts a space before each piece of text between added
 * tokens that lacks one: read for ByteLevel alone (GPT-2's kind, RoBERTa's);
 * after a Split it would put one before every split piece, which no
 * published vocabulary does. */
static gt_status check_bytelevel(gt_bpe *b, const gt_json *p, const char *name, bool regex) {
  if (is_true(gt_json_get(p, "add_prefix_space"))) {
    if (!regex)
      return gt_errorf(GT_EUNSUPPORTED,
                       "%s: the ByteLevel pre-tokenizer after a Split has add_prefix_space true; only false is "
                       "supported there",
                       name);
    b->add_prefix_space = true;
  }
  const gt_json *u = gt_json_get(p, "use_regex");
  bool uses = !u || is_true(u);
  if (uses != regex)
    return gt_errorf(GT_EUNSUPPORTED,
                     regex ? "%s: a ByteLevel pre-tokenizer with use_regex false alone is not supported"
                           : "%s: ByteLevel after a Split must have use_regex false (Llama 3's form)",
                     name);
  return GT_OK;
}

static bool type_is(const gt_json *v, const char *t) {
  const gt_json *ty = gt_json_get(v, "type");
  return ty && ty->type == GT_JSON_STRING && strcmp(ty->str, t) == 0;
}

static gt_status read_pretok(gt_bpe *b, const gt_json *root, const char *name) {
  const gt_json *p = gt_json_get(root, "pre_tokenizer");
  if (is_null(p)) return gt_errorf(GT_EUNSUPPORTED, "%s: no pre_tokenizer; a byte-level one is needed", name);
  GT_TRY(want(p, GT_JSON_OBJECT, name, "pre_tokenizer"));
  if (type_is(p, "ByteLevel")) {
    b->kind = GT_PRETOK_GPT2;
    return check_bytelevel(b, p, name, true);
  }
  const gt_json *seq = gt_json_get(p, "pretokenizers");
  if (type_is(p, "Sequence") && seq && seq->type == GT_JSON_ARRAY && seq->count == 2) {
    const gt_json *split = seq->child, *bl = seq->child->next;
    const gt_json *pat = gt_json_get(gt_json_get(split, "pattern"), "Regex");
    const gt_json *beh = gt_json_get(split, "behavior");
    if (type_is(split, "Split") && type_is(bl, "ByteLevel") && pat && pat->type == GT_JSON_STRING) {
      if (!beh || beh->type != GT_JSON_STRING || strcmp(beh->str, "Isolated") != 0 ||
          is_true(gt_json_get(split, "invert")))
        return gt_errorf(GT_EUNSUPPORTED, "%s: the Split pre-tokenizer must be Isolated and not inverted", name);
      if (strcmp(pat->str, llama3_pattern) == 0)
        b->kind = GT_PRETOK_LLAMA3;
      else if (strcmp(pat->str, gpt2_pattern) == 0)
        b->kind = GT_PRETOK_GPT2;
      else
        return gt_errorf(GT_EUNSUPPORTED,
                         "%s: the Split pre-tokenizer's pattern is neither GPT-2's nor Llama 3's; "
                         "no other is supported",
                         name);
      return check_bytelevel(b, bl, name, false);
    }
  }
  const gt_json *ty = gt_json_get(p, "type");
  return gt_errorf(GT_EUNSUPPORTED,
                   "%s: pre_tokenizer %s is not supported (ByteLevel, or a Sequence of a Split on "
                   "Llama 3's pattern and ByteLevel)",
                   name, ty && ty->type == GT_JSON_STRING ? ty->str : "(no type)");
}

static gt_status read_model_options(gt_bpe *b, const gt_json *model, const char *name) {
  const gt_json *v;
  if (!is_null(v = gt_json_get(model, "dropout")) && !(v->type == GT_JSON_NUMBER && v->number == 0))
    return gt_errorf(GT_EUNSUPPORTED, "%s: BPE dropout is set; it is for training, not for encoding a corpus", name);
  const char *strs[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++)
    if (!is_null(v = gt_json_get(model, strs[i])) && !(v->type == GT_JSON_STRING && v->len == 0))
      return gt_errorf(GT_EUNSUPPORTED, "%s: the BPE model's %s is set; byte-level BPE has none", name, strs[i]);
  if (is_true(gt_json_get(model, "byte_fallback")))
    return gt_errorf(GT_EUNSUPPORTED, "%s: byte_fallback is set; that is SentencePiece's kind, not byte-level", name);
  b->fuse_unk = is_true(gt_json_get(model, "fuse_unk"));
  b->ignore_merges = is_true(gt_json_get(model, "ignore_merges"));
  b->unk = -1;
  return GT_OK;
}

static gt_status read_vocab(gt_bpe *b, const gt_json *vocab, const char *name) {
  GT_TRY(want(vocab, GT_JSON_OBJECT, name, "model.vocab"));
  for (const gt_json *m = vocab->child; m; m = m->next) {
    uint32_t id = 0;
    if (read_id(m, name, "", &id) != GT_OK) /* named only now: vocabularies are large */
      return gt_errorf(GT_EFORMAT,
                       "%s: the id of vocabulary entry %.40s is not a token id (a whole number from 0 "
                       "to 2^31-1)",
                       name, m->key);
    if (id + 1 > b->vocab_size) b->vocab_size = id + 1;
    GT_TRY(grow_tokens(b, m->key_len));
    size_t n;
    if (!unmap(m->key, m->key_len, b->bytes + b->nbytes, &n)) continue; /* not byte-level: BPE never makes it */
    b->toks[b->ntok++] = (gt_bpe_tok){.off = b->nbytes, .len = (uint32_t)n, .id = id};
    b->nbytes += n;
  }
  return build_tokmap(b);
}

/* One side of a merge, as bytes, and its id. */
static gt_status merge_side(gt_bpe *b, const char *s, size_t len, const char *name, size_t rank, unsigned char *buf,
                            size_t *n, uint32_t *id) {
  int64_t found = -1;
  if (unmap(s, len, buf, n)) found = gt_bpe_find(b, buf, *n);
  if (found < 0)
    return gt_errorf(GT_EFORMAT, "%s: merge %zu names \"%.*s\", which is not in the vocabulary", name, rank,
                     (int)(len > 60 ? 60 : len), s);
  *id = (uint32_t)found;
  return GT_OK;
}

static gt_status read_merges(gt_bpe *b, const gt_json *merges, const char *name) {
  GT_TRY(want(merges, GT_JSON_ARRAY, name, "model.merges"));
  size_t cap = 16;
  while (cap < 2 * merges->count + 16) cap *= 2;
  b->merges = calloc(cap, sizeof *b->merges);
  unsigned char *buf = malloc(b->longest_key * 2 + 8);
  gt_status s = GT_OK;
  if (!b->merges || !buf) s = gt_errorf(GT_ENOMEM, "out of memory reading the merges");
  b->mmask = cap - 1;
  size_t rank = 0;
  for (const gt_json *m = merges->child; m && s == GT_OK; m = m->next, rank++) {
    const char *l, *r;
    size_t ll, rl;
    if (m->type == GT_JSON_STRING) { /* "left right" */
      const char *sp = memchr(m->str, ' ', m->len);
      if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) {
        s = gt_errorf(GT_EFORMAT, "%s: merge %zu is not two tokens separated by one space", name, rank);
        break;
      }
      l = m->str, ll = (size_t)(sp - m->str), r = sp + 1, rl = m->len - ll - 1;
    } else if (m->type == GT_JSON_ARRAY && m->count == 2 && m->child->type == GT_JSON_STRING &&
               m->child->next->type == GT_JSON_STRING) { /* ["left", "right"] */
      l = m->child->str, ll = m->child->len, r = m->child->next->str, rl = m->child->next->len;
    } else {
      s = gt_errorf(GT_EFORMAT, "%s: merge %zu is neither \"left right\" nor [\"left\", \"right\"]", name, rank);
      break;
    }
    if (ll + rl > b->longest_key) {
      s = gt_errorf(GT_EFORMAT, "%s: merge %zu makes a token longer than any in the vocabulary", name, rank);
      break;
    }
    size_t nl, nr;
    uint32_t li = 0, ri = 0;
    if ((s = merge_side(b, l, ll, name, rank, buf, &nl, &li)) != GT_OK) break;
    if ((s = merge_side(b, r, rl, name, rank, buf + nl, &nr, &ri)) != GT_OK) break;
    int64_t made = gt_bpe_find(b, buf, nl + nr);
    if (made < 0) {
      s = gt_errorf(GT_EFORMAT, "%s: merge %zu (\"%.*s\" \"%.*s\") makes a token that is not in the vocabulary", name,
                    rank, (int)(ll > 40 ? 40 : ll), l, (int)(rl > 40 ? 40 : rl), r);
      break;
    }
    merge_put(b, (uint64_t)li << 32 | ri, (uint32_t)rank, (uint32_t)made);
  }
  free(buf);
  return s;
}

static gt_status read_added(gt_bpe *b, const gt_json *root, const char *name) {
  const gt_json *added = gt_json_get(root, "added_tokens");
  if (is_null(added)) return GT_OK;
  GT_TRY(want(added, GT_JSON_ARRAY, name, "added_tokens"));
  b->added = calloc(added->count + 1, sizeof *b->added);
  if (!b->added) return gt_errorf(GT_ENOMEM, "out of memory reading added_tokens");
  for (const gt_json *a = added->child; a; a = a->next) {
    GT_TRY(want(a, GT_JSON_OBJECT, name, "an entry of added_tokens"));
    const gt_json *content = gt_json_get(a, "content");
    GT_TRY(want(content, GT_JSON_STRING, name, "an added token's content"));
    uint32_t id = 0;
    GT_TRY(read_id(gt_json_get(a, "id"), name, "an added token's id", &id));
    if (content->len == 0 || content->len > GT_BPE_MAX_ADDED)
      return gt_errorf(GT_EUNSUPPORTED, "%s: added token %u is empty or longer than %d bytes", name, id,
                       GT_BPE_MAX_ADDED);
    const char *opts[] = {"single_word", "lstrip", "rstrip"};
    for (int i = 0; i < 3; i++)
      if (is_true(gt_json_get(a, opts[i])))
        return gt_errorf(GT_EUNSUPPORTED, "%s: added token \"%.40s\" has %s set; it is not supported", name,
                         content->str, opts[i]);
    if (id + 1 > b->vocab_size) b->vocab_size = id + 1;
    gt_bpe_added *t = &b->added[b->nadded++];
    unsigned char *copy = malloc(content->len);
    if (!copy) return gt_errorf(GT_ENOMEM, "out of memory reading added_tokens");
    memcpy(copy, content->str, content->len);
    t->s = copy;
    t->len = content->len;
    t->id = id;
    b->first_byte[t->s[0]] = true;
    if (t->len > b->added_max) b->added_max = t->len;
  }
  return GT_OK;
}

/* Looks the end-of-text token up among the added tokens, then the vocabulary. */
static void find_eot(gt_bpe *b, const gt_json *vocab) {
  static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
  b->eot = GT_TOKFILE_NO_SEP;
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(names[k]);
    for (size_t i = 0; i < b->nadded; i++)
      if (b->added[i].len == n && memcmp(b->added[i].s, names[k], n) == 0) {
        b->eot = b->added[i].id;
        b->eot_name = names[k];
        return;
      }
    for (const gt_json *m = vocab->child; m; m = m->next)
      if (m->key_len == n && memcmp(m->key, names[k], n) == 0) {
        b->eot = (uint32_t)m->number;
        b->eot_name = names[k];
        return;
      }
  }
}

static gt_status load(gt_bpe *b, const gt_json *root, const char *name) {
  GT_TRY(want(root, GT_JSON_OBJECT, name, "the top level"));
  const gt_json *model = gt_json_get(root, "model");
  GT_TRY(want(model, GT_JSON_OBJECT, name, "model"));
  const gt_json *type = gt_json_get(model, "type");
  if (type && (type->type != GT_JSON_STRING || strcmp(type->str, "BPE") != 0))
    return gt_errorf(GT_EUNSUPPORTED, "%s: the model is %s, not BPE; only byte-level BPE is supported", name,
                     type->type == GT_JSON_STRING ? type->str : "of no named type");
  const gt_json *norm = gt_json_get(root, "normalizer");
  if (!is_null(norm))
    return gt_errorf(GT_EUNSUPPORTED, "%s: a normalizer is set; byte-level BPE of GPT-2's and Llama 3's kind has none",
                     name);
  GT_TRY(read_pretok(b, root, name));
  GT_TRY(read_model_options(b, model, name));
  const gt_json *vocab = gt_json_get(model, "vocab");
  GT_TRY(read_vocab(b, vocab, name));
  for (const gt_json *m = vocab->child; m; m = m->next)
    if (m->key_len > b->longest_key) b->longest_key = m->key_len;
  GT_TRY(read_merges(b, gt_json_get(model, "merges"), name));
  GT_TRY(read_added(b, root, name));
  const gt_json *unk = gt_json_get(model, "unk_token");
  if (!is_null(unk)) {
    GT_TRY(want(unk, GT_JSON_STRING, name, "model.unk_token"));
    const gt_json *u = gt_json_get(vocab, unk->str);
    if (!u) return gt_errorf(GT_EFORMAT, "%s: the unk_token \"%.40s\" is not in the vocabulary", name, unk->str);
    b->unk = (int64_t)u->number;
  }
  for (int c = 0; c < 256; c++) {
    unsigned char byte = (unsigned char)c;
    b->byte_id[c] = gt_bpe_find(b, &byte, 1);
  }
  if (b->vocab_size == 0) return gt_errorf(GT_EFORMAT, "%s: the vocabulary is empty", name);
  find_eot(b, vocab);
  return GT_OK;
}

gt_status gt_bpe_load_text(const char *text, size_t len, const char *name, gt_bpe **out) {
  *out = NULL;
  gt_json_doc *doc;
  const gt_json *root;
  GT_TRY(gt_json_parse(text, len, name, &doc, &root));
  gt_bpe *b = calloc(1, sizeof *b);
  gt_status s = b ? load(b, root, name) : gt_errorf(GT_ENOMEM, "out of memory reading %s", name);
  gt_json_free(doc);
  if (s != GT_OK) {
    gt_bpe_free(b);
    return s;
  }
  *out = b;
  return GT_OK;
}

gt_status gt_bpe_load(const char *path, gt_bpe **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return gt_errorf(errno == ENOENT ? GT_ENOTFOUND : GT_EIO, "cannot open tokenizer %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_FILE_BYTES) {
    fclose(f);
    return gt_errorf(GT_EINVAL, "tokenizer %s is not a regular file of at most 1 GiB", path);
  }
  size_t n = (size_t)st.st_size;
  char *text = malloc(n + 1);
  if (!text) {
    fclose(f);
    return gt_errorf(GT_ENOMEM, "out of memory reading tokenizer %s", path);
  }
  size_t got = fread(text, 1, n, f);
  int err = ferror(f);
  fclose(f);
  if (got != n || err) {
    free(text);
    return gt_errorf(GT_EIO, "reading tokenizer %s: %s", path, err ? strerror(errno) : "the file shrank");
  }
  gt_status s = gt_bpe_load_text(text, n, path, out);
  free(text);
  return s;
}

void gt_bpe_free(gt_bpe *b) {
  if (!b) return;
  free(b->toks);
  free(b->bytes);
  free(b->tokmap);
  free(b->merges);
  for (size_t i = 0; i < b->nadded; i++) free((void *)b->added[i].s);
  free(b->added);
  free(b);
}

uint32_t gt_bpe_vocab_size(const gt_bpe *b) { return b->vocab_size; }

uint32_t gt_bpe_eot(const gt_bpe *b, const char **name) {
  if (name) *name = b->eot_name;
  return b->eot;
}
