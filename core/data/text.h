/* Token files written a piece at a time, and the byte tokenizer's reading
 * of one text file, cut into records as the text reader (paths.c) asks.
 * Internal to core/data: users write token files whole (gt_tokfile_write)
 * or from text (gt_tokenize_text, gt_tokenize_paths). */
#ifndef GIANT_CORE_DATA_TEXT_H
#define GIANT_CORE_DATA_TEXT_H

#include <stdbool.h>

#include "giant/data.h"

/* A token file written in pieces, for inputs too large to hold whole.
 * Tokens go to path.tmp; commit writes the header, fsyncs and renames it to
 * path, abort removes it. Both free the writer. */
typedef struct gt_tokfile_writer gt_tokfile_writer;

gt_status gt_tokfile_writer_open(const char *path, uint32_t vocab_size, uint32_t doc_sep, gt_tokfile_writer **out);

/* Fails with GT_EINVAL (writing nothing) if a token is >= vocab_size. */
gt_status gt_tokfile_writer_append(gt_tokfile_writer *w, const uint32_t *tokens, size_t n);

uint64_t gt_tokfile_writer_count(const gt_tokfile_writer *w);

gt_status gt_tokfile_writer_commit(gt_tokfile_writer *w);

void gt_tokfile_writer_abort(gt_tokfile_writer *w);

typedef struct gt_bpe_stream gt_bpe_stream;

/* Where a text file's tokens go: bytes to the writer, or through a BPE
 * stream (bpe.h) to it; and who hears of the bytes read. */
typedef struct gt_text_sink {
  gt_tokfile_writer *w;
  gt_bpe_stream *bpe; /* NULL: byte tokens */
  void (*progress)(void *user, uint64_t done, uint64_t total);
  void *progress_user;
  uint64_t done, total; /* bytes read so far, and of all inputs */
} gt_text_sink;

/* Tokenizes a text file byte by byte. If `separator_line` is non-NULL, a
 * line consisting of exactly that text (e.g. "%" in fortune files) ends a
 * document: it is replaced by GT_BYTE_DOC_SEP. Writes a token file. */
gt_status gt_tokenize_bytes(const char *text_path, const char *separator_line, const char *out_path, uint64_t *ntokens);

/* Appends one text file's byte tokens to `w` (as gt_tokenize_bytes does,
 * the file ending a document). `w` must have vocabulary GT_BYTE_VOCAB. */
gt_status gt_tokenize_bytes_into(gt_tokfile_writer *w, const char *text_path, const char *separator_line);

/* Appends the tokens of the text file at path to the sink, each record
 * ended by GT_BYTE_DOC_SEP (with BPE: the vocabulary's end-of-text token,
 * if any), the file's end ending one too. With each_line every
 * line is a record; otherwise a line reading exactly separator_line ends
 * one ("" : an empty line; NULL: none, the file is one record). */
gt_status gt_text_tokenize_file(gt_text_sink *sink, const char *path, const char *separator_line, bool each_line);

#endif
