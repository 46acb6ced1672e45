/* The byte-level tokenizer.
 *
 * Text is streamed through a small state machine, so memory use does not
 * grow with the file or with its longest line. A separator line, together
 * with the newline that ends the line before it, becomes one GT_BYTE_DOC_SEP;
 * the end of the file ends a document the same way. Empty documents emit
 * nothing, so a token stream never starts with a separator nor holds two in
 * a row, and "A\n%\nB\n%\n" round-trips exactly through gt_detokenize_bytes.
 * The same machine cuts paragraphs (the separator is the empty line); lines
 * as records skip it: each newline ends a document.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/data/bpe.h"
#include "core/data/text.h"
#include "giant/data.h"

#define OUT_TOKENS 4096
#define IN_BYTES 65536

typedef struct tk {
  gt_text_sink *sink;
  const char *sep; /* NULL: no separator lines */
  size_t seplen;
  bool each_line;  /* every line a document; sep unused */
  size_t matched;  /* bytes of this line held back because they match sep so far */
  bool in_prefix;  /* this line so far equals sep[0..matched) */
  bool pending_nl; /* the previous line's '\n', not yet known to be text */
  uint64_t doc_len;
  size_t n;
  uint32_t out[OUT_TOKENS];
  unsigned char text[OUT_TOKENS]; /* out's bytes, for a BPE stream */
  unsigned char in[IN_BYTES];
} tk;

/* The byte tokens gathered go to the file, or as text to the BPE stream
 * (a separator there ends a document). */
static gt_status flush_out(tk *t) {
  gt_text_sink *k = t->sink;
  if (!k->bpe) {
    if (t->n) GT_TRY(gt_tokfile_writer_append(k->w, t->out, t->n));
    t->n = 0;
    return GT_OK;
  }
  unsigned char *text = t->text;
  size_t m = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (t->out[i] != GT_BYTE_DOC_SEP) {
      text[m++] = (unsigned char)t->out[i];
      continue;
    }
    GT_TRY(gt_bpe_stream_feed(k->bpe, text, m));
    m = 0;
    GT_TRY(gt_bpe_stream_end(k->bpe, true));
  }
  GT_TRY(gt_bpe_stream_feed(k->bpe, text, m));
  t->n = 0;
  return GT_OK;
}

static gt_status emit(tk *t, uint32_t id) {
  if (t->n == OUT_TOKENS) GT_TRY(flush_out(t));
  t->out[t->n++] = id;
  if (id != GT_BYTE_DOC_SEP) t->doc_len++;
  return GT_OK;
}

/* The current line turned out to be text: release what was held back. */
static gt_status flush_held(tk *t) {
  if (t->pending_nl) GT_TRY(emit(t, '\n'));
  t->pending_nl = false;
  for (size_t i = 0; i < t->matched; i++) GT_TRY(emit(t, (unsigned char)t->sep[i]));
  t->matched = 0;
  t->in_prefix = false;
  return GT_OK;
}

static gt_status end_document(tk *t) {
  t->pending_nl = false;
  if (t->doc_len > 0) GT_TRY(emit(t, GT_BYTE_DOC_SEP));
  t->doc_len = 0;
  return GT_OK;
}

static gt_status feed(tk *t, unsigned char c) {
  if (t->each_line) return c == '\n' ? end_document(t) : emit(t, c);
  if (!t->sep) {
    if (t->pending_nl) GT_TRY(emit(t, '\n'));
    t->pending_nl = c == '\n';
    return t->pending_nl ? GT_OK : emit(t, c);
  }
  if (!t->in_prefix) {
    if (c != '\n') return emit(t, c);
    t->pending_nl = true;
    t->in_prefix = true;
    t->matched = 0;
    return GT_OK;
  }
  if (c == '\n') {
    if (t->matched == t->seplen) {
      GT_TRY(end_document(t));
    } else {
      GT_TRY(flush_held(t));
      t->pending_nl = true;
    }
    t->in_prefix = true;
    t->matched = 0;
    return GT_OK;
  }
  if (t->matched < t->seplen && c == (unsigned char)t->sep[t->matched]) {
    t->matched++;
    return GT_OK;
  }
  GT_TRY(flush_held(t));
  return emit(t, c);
}

static gt_status tokenize_stream(tk *t, FILE *fp, const char *path) {
  unsigned char *in = t->in;
  size_t got;
  gt_text_sink *k = t->sink;
  while ((got = fread(in, 1, IN_BYTES, fp)) > 0) {
    for (size_t i = 0; i < got; i++) GT_TRY(feed(t, in[i]));
    k->done += got;
    if (k->progress) k->progress(k->progress_user, k->done, k->total);
  }
  if (ferror(fp)) return gt_errorf(GT_EIO, "reading %s: %s", path, strerror(errno));
  /* A last line cut short of the separator is text; an empty one is no line. */
  if (t->sep && t->in_prefix && t->matched > 0 && t->matched != t->seplen) GT_TRY(flush_held(t));
  GT_TRY(end_document(t));
  return flush_out(t);
}

gt_status gt_text_tokenize_file(gt_text_sink *sink, const char *text_path, const char *separator_line, bool each_line) {
  if (each_line) separator_line = NULL;
  if (separator_line && strchr(separator_line, '\n'))
    return gt_errorf(GT_EINVAL, "the document separator line must not contain a newline");
  struct stat st;
  if (stat(text_path, &st) != 0)
    return gt_errorf(errno == ENOENT ? GT_ENOTFOUND : GT_EIO, "cannot read text file %s: %s", text_path,
                     strerror(errno));
  if (S_ISDIR(st.st_mode)) return gt_errorf(GT_EINVAL, "%s is a directory, not a text file", text_path);
  FILE *fp = fopen(text_path, "rb");
  if (!fp) return gt_errorf(GT_EIO, "cannot open text file %s: %s", text_path, strerror(errno));
  tk *t = calloc(1, sizeof *t);
  if (!t) {
    fclose(fp);
    return gt_errorf(GT_ENOMEM, "out of memory tokenizing %s", text_path);
  }
  t->sink = sink;
  t->sep = separator_line;
  t->seplen = separator_line ? strlen(separator_line) : 0;
  t->each_line = each_line;
  t->in_prefix = true;
  gt_status s = tokenize_stream(t, fp, text_path);
  fclose(fp);
  free(t);
  return s;
}

gt_status gt_tokenize_bytes_into(gt_tokfile_writer *w, const char *text_path, const char *separator_line) {
  gt_text_sink sink = {.w = w};
  return gt_text_tokenize_file(&sink, text_path, separator_line, false);
}

gt_status gt_tokenize_bytes(const char *text_path, const char *separator_line, const char *out_path,
                            uint64_t *ntokens) {
  gt_tokfile_writer *w;
  GT_TRY(gt_tokfile_writer_open(out_path, GT_BYTE_VOCAB, GT_BYTE_DOC_SEP, &w));
  gt_status s = gt_tokenize_bytes_into(w, text_path, separator_line);
  uint64_t n = gt_tokfile_writer_count(w);
  if (s != GT_OK) {
    gt_tokfile_writer_abort(w);
    return s;
  }
  GT_TRY(gt_tokfile_writer_commit(w));
  if (ntokens) *ntokens = n;
  return GT_OK;
}

size_t gt_detokenize_bytes(const int32_t *tokens, size_t n, char *out, size_t out_len) {
  static const char sep[] = "\n%\n";
  if (out_len == 0) return 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = tokens[i];
    if (id < 0) continue; /* padding */
    if (id == GT_BYTE_DOC_SEP) {
      if (k + 3 > out_len - 1) break;
      memcpy(out + k, sep, 3);
      k += 3;
      continue;
    }
    if (k + 1 > out_len - 1) break;
    out[k++] = id < 256 ? (char)(unsigned char)id : '?';
  }
  out[k] = '\0';
  return k;
}
