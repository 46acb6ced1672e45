/* The pre-tokenizers' patterns, as state machines rather than a regex
 * engine. Each function below is one alternative of the pattern, tried in
 * order as a backtracking engine would (leftmost alternative first, greedy
 * repetitions), and returns the length it matches at the start of the text.
 * The text is valid UTF-8 (the stream replaced what was not).
 *
 * A stream sees a document in pieces, so every look at a character reports
 * when it falls at the end of text that is not final: the match could then
 * change with what follows, and the caller reads more before deciding.
 * That is what keeps the output independent of where buffers end. */
#include "core/data/bpe.h"
#include "core/data/unicode.h"

typedef struct scan {
  const unsigned char *s;
  size_t n;
  bool final;
  bool more; /* a look fell past the end of text that is not final */
} scan;

/* The code point at i (its byte length in *len), or -1 at the end. */
static int32_t at(scan *sc, size_t i, size_t *len) {
  if (i >= sc->n) {
    if (!sc->final) sc->more = true;
    *len = 0;
    return -1;
  }
  const unsigned char *p = sc->s + i;
  if (p[0] < 0x80) {
    *len = 1;
    return p[0];
  }
  size_t k = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : 2;
  if (i + k > sc->n) { /* a character cut by the end of what is known */
    if (!sc->final) {
      sc->more = true;
      *len = 0;
      return -1;
    }
    *len = 1; /* cannot happen on valid UTF-8: read as one byte */
    return 0xFFFD;
  }
  uint32_t cp = p[0] & (0x7F >> k);
  for (size_t j = 1; j < k; j++) cp = cp << 6 | (p[j] & 0x3F);
  *len = k;
  return (int32_t)cp;
}

static bool is_l(int32_t c) { return c >= 0 && gt_uni_is_letter((uint32_t)c); }
static bool is_n(int32_t c) { return c >= 0 && gt_uni_is_number((uint32_t)c); }
static bool is_s(int32_t c) { return c >= 0 && gt_uni_is_space((uint32_t)c); }
static bool is_other(int32_t c) { return c >= 0 && !is_s(c) && !is_l(c) && !is_n(c); }
static bool is_crlf(int32_t c) { return c == '\r' || c == '\n'; }

/* The end of a run of characters of one class starting at i. */
static size_t run(scan *sc, size_t i, bool (*cls)(int32_t)) {
  size_t k;
  for (int32_t c = at(sc, i, &k); cls(c); c = at(sc, i, &k)) i += k;
  return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d, case-insensitively for Llama 3 (where U+017F,
 * long s, folds to s). */
static size_t contraction(scan *sc, bool fold) {
  size_t k, k2;
  if (at(sc, 0, &k) != '\'') return 0;
  int32_t a = at(sc, 1, &k);
  if (a < 0) return 0;
  if (fold && a == 0x17F) return 1 + k;
  if (fold && a < 0x80) a = a >= 'A' && a <= 'Z' ? a + 32 : a;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  int32_t want = a == 'r' || a == 'v' ? 'e' : a == 'l' ? 'l' : 0;
  if (!want) return 0;
  int32_t b = at(sc, 2, &k2);
  if (fold && b >= 'A' && b <= 'Z') b += 32;
  return b == want ? 3 : 0;
}

/* " ?" then a run of the class (at least one). */
static size_t space_then_run(scan *sc, bool (*cls)(int32_t)) {
  size_t k, i = 0;
  if (at(sc, 0, &k) == ' ') {
    size_t k2;
    if (cls(at(sc, 1, &k2))) i = 1;
  }
  if (!cls(at(sc, i, &k))) return 0;
  return run(sc, i, cls);
}

/* \s+(?!\S) then, failing it, \s+. */
static size_t spaces(scan *sc) {
  size_t k, end = run(sc, 0, is_s);
  if (end == 0) return 0;
  if (at(sc, end, &k) < 0) return end; /* the text's end: (?!\S) holds */
  /* Give back the last space so that a non-space follows none; with only
   * one, \s+(?!\S) fails and \s+ takes it. */
  size_t last = 0, i = 0;
  while (i < end) {
    last = i;
    at(sc, i, &k);
    i += k;
  }
  return last > 0 ? last : end;
}

static size_t gpt2(scan *sc) {
  size_t m;
  if ((m = contraction(sc, false))) return m;
  if ((m = space_then_run(sc, is_l))) return m;
  if ((m = space_then_run(sc, is_n))) return m;
  if ((m = space_then_run(sc, is_other))) return m;
  return spaces(sc);
}

static bool not_crlf_l_n(int32_t c) { return c >= 0 && !is_crlf(c) && !is_l(c) && !is_n(c); }

static size_t llama3(scan *sc) {
  size_t m, k, k1;
  if ((m = contraction(sc, true))) return m;
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  int32_t c = at(sc, 0, &k);
  if (not_crlf_l_n(c) && is_l(at(sc, k, &k1))) return run(sc, k, is_l);
  if (is_l(c)) return run(sc, 0, is_l);
  /* \p{N}{1,3} */
  if (is_n(c)) {
    size_t i = k;
    for (int j = 1; j < 3 && is_n(at(sc, i, &k1)); j++) i += k1;
    return i;
  }
  /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
  if ((m = space_then_run(sc, is_other))) return run(sc, m, is_crlf);
  /* \s*[\r\n]+ : the whitespace run up to its last \r or \n. */
  if (is_s(c)) {
    size_t end = run(sc, 0, is_s), i = 0, upto = 0;
    while (i < end) {
      int32_t d = at(sc, i, &k1);
      i += k1;
      if (is_crlf(d)) upto = i;
    }
    if (upto) return upto;
  }
  return spaces(sc);
}

size_t gt_pretok_next(gt_pretok_kind kind, const unsigned char *s, size_t n, bool final) {
  if (n == 0) return 0;
  scan sc = {.s = s, .n = n, .final = final};
  size_t m = kind == GT_PRETOK_LLAMA3 ? llama3(&sc) : gpt2(&sc);
  if (sc.more) return 0;
  if (m == 0) { /* every character matches some alternative; should one not, it stands alone */
    size_t k;
    at(&sc, 0, &k);
    m = k ? k : 1;
  }
  return m;
}
