/* The JSON reader (RFC 8259). Recursive descent whose depth is counted and
 * capped, so a hostile "[[[[..." fails cleanly; strings must be valid UTF-8
 * and \u escapes proper surrogate pairs, as serde_json (which writes and
 * reads tokenizer.json) demands. Nodes and strings come from an arena freed
 * at once. */
#include "core/data/json.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK (256u << 10)

typedef struct block {
  struct block *next;
  size_t used, cap;
  _Alignas(max_align_t) unsigned char data[];
} block;

struct gt_json_doc {
  block *blocks;
};

typedef struct parser {
  const char *s;
  size_t len, pos;
  const char *name;
  gt_json_doc *doc;
  int depth;
} parser;

static void *arena_alloc(gt_json_doc *d, size_t n) {
  n = (n + 15) & ~(size_t)15;
  block *b = d->blocks;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
    b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->used = 0;
    b->cap = cap;
    b->next = d->blocks;
    d->blocks = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  return p;
}

void gt_json_free(gt_json_doc *d) {
  if (!d) return;
  for (block *b = d->blocks, *n; b; b = n) {
    n = b->next;
    free(b);
  }
  free(d);
}

static gt_status fail(const parser *p, const char *what) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < p->pos && i < p->len; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  return gt_errorf(GT_EFORMAT, "%s: not valid JSON at line %zu, column %zu: %s", p->name, line, col, what);
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static gt_status oom(const parser *p) { return gt_errorf(GT_ENOMEM, "%s: out of memory reading JSON", p->name); }

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(parser *p, uint32_t *out) {
  if (p->len - p->pos < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p->s[p->pos + i]);
    if (h < 0) return false;
    v = v << 4 | (uint32_t)h;
  }
  p->pos += 4;
  *out = v;
  return true;
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t k;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    k = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    k = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < k || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return k;
}

/* At the opening quote; the decoded string is never longer than the raw. */
static gt_status parse_string(parser *p, const char **out, size_t *out_len) {
  p->pos++;
  size_t start = p->pos, end = start;
  while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) {
    p->pos = p->len;
    return fail(p, "a string is not closed");
  }
  unsigned char *o = arena_alloc(p->doc, end - start + 1);
  if (!o) return oom(p);
  size_t k = 0;
  while (p->s[p->pos] != '"') {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c < 0x20) return fail(p, "a control character inside a string (escape it)");
    if (c != '\\') {
      size_t n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
      if (!n) return fail(p, "a string is not valid UTF-8");
      memcpy(o + k, p->s + p->pos, n);
      k += n;
      p->pos += n;
      continue;
    }
    p->pos++;
    char e = p->s[p->pos++];
    switch (e) {
      case '"': o[k++] = '"'; break;
      case '\\': o[k++] = '\\'; break;
      case '/': o[k++] = '/'; break;
      case 'b': o[k++] = '\b'; break;
      case 'f': o[k++] = '\f'; break;
      case 'n': o[k++] = '\n'; break;
      case 'r': o[k++] = '\r'; break;
      case 't': o[k++] = '\t'; break;
      case 'u': {
        uint32_t cp, lo;
        if (!read_hex4(p, &cp)) return fail(p, "a \\u escape needs four hex digits");
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "a lone low surrogate in a \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, "a high surrogate \\u escape without its low half");
          p->pos += 2;
          if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return fail(p, "a high surrogate \\u escape without its low half");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        k += put_utf8(o + k, cp);
        break;
      }
      default: p->pos--; return fail(p, "an unknown escape in a string");
    }
  }
  p->pos++;
  o[k] = '\0';
  *out = (const char *)o;
  *out_len = k;
  return GT_OK;
}

static gt_status parse_number(parser *p, double *out) {
  size_t i = p->pos;
  const char *s = p->s;
  if (i < p->len && s[i] == '-') i++;
  if (i >= p->len || s[i] < '0' || s[i] > '9') return fail(p, "a malformed number");
  if (s[i] == '0')
    i++;
  else
    while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
  if (i < p->len && s[i] == '.') {
    i++;
    if (i >= p->len || s[i] < '0' || s[i] > '9') return fail(p, "a malformed number");
    while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= p->len || s[i] < '0' || s[i] > '9') return fail(p, "a malformed number");
    while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
  }
  char buf[64];
  size_t n = i - p->pos;
  if (n >= sizeof buf) return fail(p, "a number too long to read");
  memcpy(buf, s + p->pos, n);
  buf[n] = '\0';
  *out = strtod(buf, NULL);
  p->pos = i;
  return GT_OK;
}

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return false;
  p->pos += n;
  return true;
}

static gt_status parse_value(parser *p, gt_json *v);

/* Arrays and objects: elements parsed into nodes linked in order. */
static gt_status parse_container(parser *p, gt_json *v, bool object) {
  if (++p->depth > GT_JSON_MAX_DEPTH) return fail(p, "nested too deeply (more than 64 levels)");
  char close = object ? '}' : ']';
  p->pos++;
  v->type = object ? GT_JSON_OBJECT : GT_JSON_ARRAY;
  gt_json **tail = &v->child;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    p->depth--;
    return GT_OK;
  }
  for (;;) {
    gt_json *e = arena_alloc(p->doc, sizeof *e);
    if (!e) return oom(p);
    memset(e, 0, sizeof *e);
    skip_ws(p);
    if (object) {
      if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a member name in quotes");
      GT_TRY(parse_string(p, &e->key, &e->key_len));
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':' after a member name");
      p->pos++;
    }
    GT_TRY(parse_value(p, e));
    *tail = e;
    tail = &e->next;
    v->count++;
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, object ? "an object is not closed" : "an array is not closed");
    char c = p->s[p->pos++];
    if (c == close) break;
    if (c != ',') {
      p->pos--;
      return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  p->depth--;
  return GT_OK;
}

static gt_status parse_value(parser *p, gt_json *v) {
  skip_ws(p);
  if (p->pos >= p->len) return fail(p, "the text ends where a value should be");
  char c = p->s[p->pos];
  switch (c) {
    case '{': return parse_container(p, v, true);
    case '[': return parse_container(p, v, false);
    case '"': v->type = GT_JSON_STRING; return parse_string(p, &v->str, &v->len);
    case 't':
    case 'f':
    case 'n':
      if (literal(p, "true") || literal(p, "false")) {
        v->type = GT_JSON_BOOL;
        v->boolean = c == 't';
        return GT_OK;
      }
      if (literal(p, "null")) {
        v->type = GT_JSON_NULL;
        return GT_OK;
      }
      return fail(p, "an unknown word (true, false and null are JSON's)");
    default: v->type = GT_JSON_NUMBER; return parse_number(p, &v->number);
  }
}

gt_status gt_json_parse(const char *text, size_t len, const char *name, gt_json_doc **doc, const gt_json **root) {
  *doc = NULL;
  *root = NULL;
  gt_json_doc *d = calloc(1, sizeof *d);
  if (!d) return gt_errorf(GT_ENOMEM, "%s: out of memory reading JSON", name);
  parser p = {.s = text, .len = len, .name = name, .doc = d};
  gt_json *v = arena_alloc(d, sizeof *v);
  gt_status s = v ? GT_OK : oom(&p);
  if (s == GT_OK) {
    memset(v, 0, sizeof *v);
    s = parse_value(&p, v);
  }
  if (s == GT_OK) {
    skip_ws(&p);
    if (p.pos != p.len) s = fail(&p, "text after the end of the JSON value");
  }
  if (s != GT_OK) {
    gt_json_free(d);
    return s;
  }
  *doc = d;
  *root = v;
  return GT_OK;
}

const gt_json *gt_json_get(const gt_json *v, const char *key) {
  if (!v || v->type != GT_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (const gt_json *m = v->child; m; m = m->next)
    if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
  return NULL;
}

const char *gt_json_type_name(gt_json_type t) {
  static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}
