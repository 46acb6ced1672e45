/* Training data: the token-file format, a byte-level tokenizer, and a
 * loader that yields (B, T) micro-batches.
 *
 * Token file format (all integers little-endian), documented in
 * docs/token-format.md:
 *
 *   offset size  field
 *   0      8     magic "GIANTTOK"
 *   8      4     version (1)
 *   12     4     token width in bytes (1, 2 or 4)
 *   16     8     token count
 *   24     4     vocabulary size (every token id < this)
 *   28     4     document separator id, or 0xFFFFFFFF for none
 *   32     32    reserved, zero
 *   64     ...   tokens, `count` of `width` bytes each
 */
#ifndef GIANT_DATA_H
#define GIANT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

GT_API_BEGIN

#define GT_TOKFILE_MAGIC "GIANTTOK"
#define GT_TOKFILE_VERSION 1u
#define GT_TOKFILE_HEADER_BYTES 64u
#define GT_TOKFILE_NO_SEP 0xFFFFFFFFu

/* The byte-level tokenizer: ids 0..255 are bytes, 256 separates documents. */
#define GT_BYTE_VOCAB 257
#define GT_BYTE_DOC_SEP 256

typedef struct gt_tokfile_header {
  uint32_t version;
  uint32_t width;
  uint64_t count;
  uint32_t vocab_size;
  uint32_t doc_sep; /* GT_TOKFILE_NO_SEP if none */
} gt_tokfile_header;

/* Writes a token file atomically (to path.tmp, then renamed). */
gt_status gt_tokfile_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                           uint32_t doc_sep);

/* ---- the text reader: files and directories, cut into records ----
 *
 * Each record of the text becomes one document of the token file (its
 * bytes, then GT_BYTE_DOC_SEP); a record with no bytes gives nothing. An
 * input directory stands for its regular files (not subdirectories),
 * sorted by name; the output and its .tmp are never read as input. How the
 * text is cut into records is an option: */
typedef enum gt_text_records {
  /* Each file is one record (a final newline dropped). */
  GT_RECORDS_FILE = 0,
  /* Each line is one record (its newline dropped); empty lines give none. */
  GT_RECORDS_LINE,
  /* Records are separated by empty lines (one or more; a line of spaces is
   * text), as paragraphs are. */
  GT_RECORDS_PARAGRAPH,
  /* A line reading exactly `separator` ends a record. */
  GT_RECORDS_SEPARATOR,
  /* Fortune files (Debian's /usr/share/games/fortunes): a line reading "%"
   * ends a record, and a directory's fortune index files (names ending in
   * ".dat" or ".u8") are left out. */
  GT_RECORDS_FORTUNE,
} gt_text_records;

typedef struct gt_text_options {
  gt_text_records records;
  const char *separator; /* GT_RECORDS_SEPARATOR's line: no newline in it */
  /* A Hugging Face tokenizers tokenizer.json holding a byte-level BPE
   * vocabulary (GPT-2's or Llama 3's kind) to encode with; NULL: bytes.
   * Records are then separated by the vocabulary's end-of-text token
   * ("<|endoftext|>", else "<|end_of_text|>", else "</s>"; none if it has
   * none of them), which is the token file's document separator; invalid
   * UTF-8 is read as U+FFFD, as Python's errors="replace" does
   * (docs/interop.md). */
  const char *tokenizer;
  /* Called after each block read, with the bytes read so far and the
   * inputs' total size (NULL: none). */
  void (*progress)(void *user, uint64_t done, uint64_t total);
  void *progress_user;
} gt_text_options;

/* The names of gt_text_records, as giant-tokenize's --records takes them:
 * "file", "line", "paragraph", "separator", "fortune". Parsing anything
 * else is GT_EINVAL with a message that lists them. */
const char *gt_text_records_name(gt_text_records r);
gt_status gt_text_records_parse(const char *name, gt_text_records *out);

/* Tokenizes the inputs, in the order given, into one token file cut into
 * records as `opts` says (NULL: GT_RECORDS_FILE). Fails (GT_EINVAL) for a
 * bad option and when no input file is found, leaving any old output
 * whole. */
gt_status gt_tokenize_text(const char *const *inputs, int ninputs, const gt_text_options *opts, const char *out_path,
                           uint64_t *ntokens);

/* The text reader for fortune-style corpora, as it was before the record
 * options: a directory's fortune index files (".dat", ".u8") are always
 * left out, and a line reading exactly `separator_line` ends a record
 * (NULL: none, each file is one). With "%" it is gt_tokenize_text's
 * GT_RECORDS_FORTUNE, byte for byte. */
gt_status gt_tokenize_paths(const char *const *inputs, int ninputs, const char *separator_line, const char *out_path,
                            uint64_t *ntokens);

/* What an example program does at start: a token file made from a corpus
 * on first use. When out_path exists, nothing (*made false). Otherwise the
 * corpus (a text file or directory of fortune-style records, "%" lines
 * between them) is checked first, so that a typo leaves no directory
 * behind, out_path's directory is made, and the corpus tokenized into it
 * (*made true, *ntokens its tokens). Errors name both paths. */
gt_status gt_tokenize_if_missing(const char *corpus, const char *out_path, bool *made, uint64_t *ntokens);

/* Turns byte-level tokens back into text (separator shown as "\n%\n",
 * negative ids (padding) skipped, ids above 256 shown as '?'). Writes whole
 * tokens while they fit, always NUL-terminates when out_len > 0, and returns
 * the bytes written without the NUL. */
size_t gt_detokenize_bytes(const int32_t *tokens, size_t n, char *out, size_t out_len);

typedef struct gt_loader gt_loader;

typedef enum gt_loader_mode {
  /* Every micro-batch is B rows of exactly T_max consecutive tokens. */
  GT_LOADER_FIXED = 0,
  /* Rows start at document starts; a micro-batch's T is the longest of its
   * B documents (capped at T_max), shorter rows are padded and their
   * padding targets set to -1 (ignored by the loss). T varies from batch to
   * batch, without reallocation. Needs a file with a document separator. */
  GT_LOADER_DOCUMENTS = 1,
} gt_loader_mode;

/* Rows from the program instead of a token file: rows fixed-length rows
 * of T_max + 1 tokens (inputs, and the targets one later), row `index`
 * (0 <= index < rows) written into tokens by read. The loader shards,
 * shuffles, wraps and resumes them as it does a file's FIXED rows, and
 * checks every id against vocab_size. read runs on the training thread,
 * may be called for any row in any order, and must give a row the same
 * tokens every time (a resumed or reshaped run reads them again). */
typedef struct gt_loader_source {
  uint64_t rows;
  uint32_t vocab_size;
  gt_status (*read)(void *user, uint64_t index, int32_t *tokens, int n);
  void *user;
  const char *name; /* in messages; NULL: "the program's rows" */
} gt_loader_source;

typedef struct gt_loader_config {
  const char *path;
  const gt_loader_source *source; /* instead of path (FIXED mode only); the caller keeps it alive */
  int B, T_max;
  gt_loader_mode mode;
  /* Data-parallel sharding: this replica reads shard `shard` of `nshards`
   * (micro-batch k of the replica is global micro-batch k*nshards+shard). */
  int shard, nshards;
  /* Uneven shares (replicas of different speeds): of every group micro-
   * batch of `total` rows this replica takes its B rows at `offset` (the sum
   * of the shares before it). total = 0 means even shares: offset =
   * shard*B, total = nshards*B. */
  int offset, total;
  uint64_t seed; /* 0 = sequential order; else batch order shuffled per epoch */
} gt_loader_config;

typedef struct gt_batch {
  int B, T;         /* this micro-batch's shape, T <= T_max */
  int32_t *inputs;  /* B*T, row-major, host memory owned by the loader */
  int32_t *targets; /* B*T, next token, or -1 for padding */
  int64_t ntargets; /* targets that are not -1 */
  uint64_t epoch;   /* how many times the data has wrapped */
  uint64_t row;     /* the global sample index of the first row (the rest follow) */
} gt_batch;

/* Opens and validates the file (magic, version, width, size, every id <
 * vocab_size and < `vocab_limit` when that is non-zero). Errors name the
 * file and the problem. */
gt_status gt_loader_open(const gt_loader_config *cfg, uint32_t vocab_limit, gt_loader **out);
void gt_loader_close(gt_loader *l);
const gt_tokfile_header *gt_loader_header(const gt_loader *l);
/* Fills *batch with the next micro-batch (buffers reused; valid until the
 * next call). Wraps around at the end of the data. */
gt_status gt_loader_next(gt_loader *l, gt_batch *batch);

GT_API_END
#endif
