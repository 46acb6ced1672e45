/* Fuzz target: tokenizer.json (docs/interop.md). The input goes through
 * the JSON reader and the BPE vocabulary's reader; one that is accepted
 * then encodes a fixed text with tricky UTF-8, and the input itself, with
 * a stream whose buffer ends fall everywhere, each id checked against the
 * vocabulary. The token file is written to a directory under $TMPDIR and
 * abandoned, never committed; the directory is removed at exit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/data/bpe.h"
#include "giant/data.h"
#include "giant/log.h"

static char dir[512], out[600];

static void remove_dir(void) { rmdir(dir); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fuzz_tokenizer_json_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) abort();
  snprintf(out, sizeof out, "%s/out.tok", dir);
  atexit(remove_dir);
  return 0;
}

static const char sample[] =
    "Hello world's 12345 \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac<|endoftext|>  \r\n\n"
    "\xff\xfe\xed\xa0\x80\xf0\x9f\x98 \xc2\x85\x1c'LL 'S\xc5\xbf x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gt_bpe *b;
  if (gt_bpe_load_text((const char *)data, size, "fuzz", &b) != GT_OK) return 0;
  uint32_t vocab = gt_bpe_vocab_size(b), eot = gt_bpe_eot(b, NULL);
  if (vocab == 0 || (eot != GT_TOKFILE_NO_SEP && eot >= vocab)) abort();
  gt_tokfile_writer *w;
  gt_bpe_stream *st;
  if (gt_tokfile_writer_open(out, vocab, eot, &w) != GT_OK) abort();
  if (gt_bpe_stream_open(b, w, &st) != GT_OK) abort();
  gt_bpe_stream_set_chunk(st, 3);
  /* The writer refuses an id >= vocab: an encoder bug fails here. */
  if (gt_bpe_stream_feed(st, (const unsigned char *)sample, sizeof sample - 1) != GT_OK) abort();
  if (gt_bpe_stream_end(st, true) != GT_OK) abort();
  if (gt_bpe_stream_feed(st, data, size > 4096 ? 4096 : size) != GT_OK) abort();
  if (gt_bpe_stream_end(st, true) != GT_OK) abort();
  if (gt_bpe_stream_flush(st) != GT_OK) abort();
  gt_bpe_stream_free(st);
  gt_tokfile_writer_abort(w);
  gt_bpe_free(b);
  return 0;
}
