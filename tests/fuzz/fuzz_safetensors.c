/* Fuzz target: safetensors files (ckpt/safetensors.c). The input is a
 * whole file: its header goes through ck_st_parse as the length prefix
 * says (bounded by the input), then the file, held in a memfd and opened by
 * path (/proc/self/fd/N), through ck_st_open, and every tensor accepted is
 * read and widened to fp32. A tensor's range must lie inside the data and
 * agree with its shape: anything else must have been refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "giant/log.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  memfd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  if (memfd < 0) abort();
  snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
  return 0;
}

/* What an accepted header promises. */
static void check(const ck_st *st, uint64_t data_len) {
  for (int i = 0; i < ck_st_count(st); i++) {
    const ck_st_tensor *t = ck_st_at(st, i);
    if (t->end > data_len || t->end < t->begin) abort();
    if (t->end - t->begin != t->numel * (t->dtype == CK_ST_F32 ? 4u : 2u)) abort();
    if (ck_st_find(st, t->name) != t) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | data[i];
    if (n <= size - 8) {
      ck_st *st = NULL;
      if (ck_st_parse((const char *)data + 8, (size_t)n, size - 8 - n, "fuzz", &st) == GT_OK) {
        check(st, size - 8 - n);
        ck_st_close(st);
      }
    }
  }
  if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size) abort();
  ck_st *st = NULL;
  if (ck_st_open(path, &st) != GT_OK) return 0;
  for (int i = 0; i < ck_st_count(st); i++) {
    const ck_st_tensor *t = ck_st_at(st, i);
    float *x = malloc((t->numel ? t->numel : 1) * sizeof *x);
    if (!x) abort();
    if (ck_st_read(st, t, x) != GT_OK) abort(); /* the whole file is there */
    free(x);
  }
  ck_st_close(st);
  return 0;
}
