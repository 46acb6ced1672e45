/* Fuzz target: token files (docs/token-format.md). The input is a whole
 * file: its header goes through gt_tokfile_parse_header, then the file,
 * held in a memfd and opened by path (/proc/self/fd/N), through
 * gt_loader_open in both modes, and a few batches are read, seeked and
 * reshared. Nothing touches the disk. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "giant/data.h"
#include "giant/log.h"
#include "core/data/loader_engine.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  memfd = memfd_create("fuzz_tokfile", MFD_CLOEXEC);
  if (memfd < 0) abort();
  snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
  return 0;
}

/* Reads a few batches. Every id handed out was checked against the file's
 * vocabulary, against the model's when one is given (vocab_limit), and
 * fits the batch's int32 (the loader refuses an id of 2^31 or more). */
static void read_batches(gt_loader *l, uint32_t vocab_limit) {
  const gt_loader_config *c = gt_loader_get_config(l);
  uint32_t vocab = gt_loader_header(l)->vocab_size;
  gt_batch b;
  for (int i = 0; i < 3; i++) {
    if (gt_loader_next(l, &b) != GT_OK) return;
    for (int64_t k = 0; k < (int64_t)b.B * b.T; k++) {
      if (b.inputs[k] < 0 || (uint32_t)b.inputs[k] >= vocab) abort();
      if (vocab_limit && (uint32_t)b.inputs[k] >= vocab_limit) abort();
    }
    if (b.T < 1 || b.T > c->T_max) abort();
  }
  if (gt_loader_seek(l, 1) == GT_OK) (void)gt_loader_next(l, &b);
  if (gt_loader_reshare(l, 1, 0, 2) == GT_OK) (void)gt_loader_next(l, &b);
  if (gt_loader_restart_at(l, gt_loader_rows_per_epoch(l) + 1) == GT_OK) (void)gt_loader_next(l, &b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gt_tokfile_header h;
  (void)gt_tokfile_parse_header(data, size, "fuzz", &h);
  if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size) abort();
  static const gt_loader_config cfgs[] = {
      {.B = 2, .T_max = 4, .mode = GT_LOADER_FIXED, .nshards = 1},
      {.B = 3, .T_max = 2, .mode = GT_LOADER_FIXED, .shard = 1, .nshards = 2, .seed = 7},
      {.B = 2, .T_max = 8, .mode = GT_LOADER_DOCUMENTS, .nshards = 1, .seed = 1},
      {.B = 1, .T_max = 3, .mode = GT_LOADER_DOCUMENTS, .shard = 2, .nshards = 3, .offset = 1, .total = 4},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    gt_loader_config cfg = cfgs[i];
    cfg.path = path;
    gt_loader *l = NULL;
    uint32_t vocab_limit = i % 2 ? GT_BYTE_VOCAB : 0;
    if (gt_loader_open(&cfg, vocab_limit, &l) != GT_OK) continue;
    read_batches(l, vocab_limit);
    gt_loader_close(l);
  }
  return 0;
}
