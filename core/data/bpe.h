/* Byte-level BPE read from a Hugging Face tokenizers tokenizer.json (GPT-2's
 * kind: ByteLevel pre-tokenizer; Llama 3's: a Split on its pattern, then
 * ByteLevel without its own), and a streaming encoder over it. Internal to
 * core/data: users reach it through gt_text_options.tokenizer. */
#ifndef GIANT_CORE_DATA_BPE_H
#define GIANT_CORE_DATA_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/data/text.h"
#include "giant/status.h"

typedef struct gt_bpe gt_bpe;

/* The pre-tokenizer patterns this reader implements (pretok.c). */
typedef enum gt_pretok_kind {
  GT_PRETOK_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
  GT_PRETOK_LLAMA3, /* (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|... */
} gt_pretok_kind;

/* Reads tokenizer.json at path, or text[0..len) (name in messages). Fails
 * (GT_EFORMAT, GT_EUNSUPPORTED) with what is wrong or not handled. */
gt_status gt_bpe_load(const char *path, gt_bpe **out);
gt_status gt_bpe_load_text(const char *text, size_t len, const char *name, gt_bpe **out);
void gt_bpe_free(gt_bpe *b);

/* One more than the largest id of the vocabulary and its added tokens. */
uint32_t gt_bpe_vocab_size(const gt_bpe *b);

/* The end-of-text token written between documents ("<|endoftext|>", else
 * "<|end_of_text|>", else "</s>"), GT_TOKFILE_NO_SEP when the vocabulary
 * has none; its text in *name. */
uint32_t gt_bpe_eot(const gt_bpe *b, const char **name);

/* The length of the pre-token at s[0..n) (valid UTF-8), or 0 when it
 * cannot be known without what follows s[n) (never when final). */
size_t gt_pretok_next(gt_pretok_kind kind, const unsigned char *s, size_t n, bool final);

/* A document stream: text bytes in (any UTF-8, invalid sequences replaced
 * by U+FFFD as Python's errors="replace" does), ids out to the writer. */
typedef struct gt_bpe_stream gt_bpe_stream;

gt_status gt_bpe_stream_open(const gt_bpe *b, gt_tokfile_writer *w, gt_bpe_stream **out);
gt_status gt_bpe_stream_feed(gt_bpe_stream *st, const unsigned char *bytes, size_t n);
/* Encodes what is held and, when end_of_text, writes the end-of-text id. */
gt_status gt_bpe_stream_end(gt_bpe_stream *st, bool end_of_text);
/* Flushes the ids held for the writer. */
gt_status gt_bpe_stream_flush(gt_bpe_stream *st);
void gt_bpe_stream_free(gt_bpe_stream *st);
/* How much text the stream gathers before pre-tokenizing (default 256 KiB):
 * tests make it tiny so that buffer ends fall everywhere. */
void gt_bpe_stream_set_chunk(gt_bpe_stream *st, size_t bytes);

#endif
