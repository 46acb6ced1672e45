/* Fuzz target: checkpoint manifests (docs/checkpoint-format.md).
 *
 * The input is  flags u8 | body_len u32 | body | shard bytes.
 * The body goes through ck_manifest_decode and the tiling check, and what
 * decodes must encode and decode again to the same bytes. Then it is
 * framed as a MANIFEST file (magic, version 2, or 1 when flags bit 0 is
 * set, and the right SHA-256, so that mutations reach the body's checks),
 * written with the shard bytes as shard-00000.bin into a step directory,
 * and read back by the tools' functions: gt_ckpt_describe, gt_ckpt_verify
 * (every chunk's hash) and gt_ckpt_diff of the directory with itself
 * (every tensor read whole). The whole input, unframed, is also written as
 * a MANIFEST of its own, for the framing's checks. Files live in a
 * directory made under $TMPDIR (else /tmp) and removed at exit. */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_internal.h"
#include "giant/log.h"
#include "giant/engine/checkpoint.h"

static char root[4096], step_dir[4200], raw_dir[4200];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void remove_root(void) { nftw(root, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/giant-fuzz-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) abort();
  snprintf(step_dir, sizeof step_dir, "%s/step-00000001", root);
  snprintf(raw_dir, sizeof raw_dir, "%s/raw", root);
  if (mkdir(step_dir, 0700) != 0 || mkdir(raw_dir, 0700) != 0) abort();
  atexit(remove_root);
  return 0;
}

static void write_file(const char *dir, const char *name, const void *p, size_t n) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) abort();
}

/* A manifest that decodes encodes to bytes that decode to the same. */
static void check_round_trip(const ck_manifest *m) {
  ck_buf a = {0}, b = {0};
  ck_manifest again;
  if (ck_manifest_encode(m, &a) != GT_OK) abort();
  if (ck_manifest_decode(a.p, a.len, "re-encoded", &again) != GT_OK) abort();
  if (ck_manifest_encode(&again, &b) != GT_OK || a.len != b.len || memcmp(a.p, b.p, a.len)) abort();
  ck_manifest_free(&again);
  ck_buf_free(&a);
  ck_buf_free(&b);
}

/* diff reads every tensor whole into memory: only when they are small.
 * (The volume is the library's own, wrapping as it does.) */
static bool small_tensors(const char *dir) {
  ck_manifest m;
  if (ck_manifest_read(dir, &m) != GT_OK) return false;
  uint64_t floats = 0;
  bool small = true;
  for (int i = 0; i < m.ntensors && small; i++) {
    ck_box whole = {.ndim = m.tensors[i].ndim};
    for (int d = 0; d < whole.ndim; d++) whole.hi[d] = m.tensors[i].shape[d];
    floats += ck_box_volume(&whole);
    small = floats <= (16u << 20);
  }
  ck_manifest_free(&m);
  return small;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  uint32_t version = data[0] & 1 ? 1 : GT_CKPT_VERSION;
  size_t body_len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
  if (body_len > size - 5) body_len = size - 5;
  const uint8_t *body = data + 5, *shard = body + body_len;
  size_t shard_len = size - 5 - body_len;

  ck_manifest m;
  if (ck_manifest_decode(body, body_len, "fuzz", &m) == GT_OK) {
    (void)ck_manifest_check_cover(&m, "fuzz");
    check_round_trip(&m);
    ck_manifest_free(&m);
  }

  ck_buf file = {0};
  unsigned char sha[CK_SHA];
  ck_sha256(body, body_len, sha);
  ck_put(&file, GT_CKPT_MAGIC, 8);
  ck_put_u32(&file, version);
  ck_put_u32(&file, 0);
  ck_put_u64(&file, body_len);
  ck_put(&file, body, body_len);
  ck_put(&file, sha, CK_SHA);
  if (file.oom) abort();
  write_file(step_dir, CK_MANIFEST, file.p, file.len);
  ck_buf_free(&file);
  write_file(step_dir, "shard-00000.bin", shard, shard_len);

  gt_ckpt_summary sum;
  int bad = 0;
  double rel = 0;
  if (gt_ckpt_describe(step_dir, &sum) == GT_OK) {
    (void)gt_ckpt_verify(step_dir, NULL, &bad);
    /* A checkpoint differs from itself nowhere. */
    if (small_tensors(step_dir) && gt_ckpt_diff(step_dir, step_dir, NULL, &rel) == GT_OK && rel != 0) abort();
  }

  write_file(raw_dir, CK_MANIFEST, data, size);
  (void)gt_ckpt_describe(raw_dir, &sum);
  return 0;
}
