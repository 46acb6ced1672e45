/* Slices are hashed in chunks, and a load reads only the chunks that hold
 * what it needs. A 4x6 tensor stored as one 96-byte slice in 64-byte
 * chunks: its last row (bytes 72..96) is read from chunk 1 alone, 32 bytes,
 * and a flipped bit in chunk 0 goes unseen by that read and is caught by a
 * read of row 0, naming the chunk. A version 1 manifest (one SHA-256 per
 * slice) still loads, and its hash still catches a flipped bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/ckpt_run.h"
#include "giant/engine/checkpoint.h"

static char dir[] = "/tmp/giant-ckpt-chunks-XXXXXX";
static float data[24];

static int setup(void **state) {
  (void)state;
  for (int i = 0; i < 24; i++) data[i] = (float)i + 0.5f;
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  cr_rmtree(dir);
  return 0;
}

/* The tensor param/w, one slice in shard-00000.bin, hashed in `chunk`-byte
 * chunks (0: one hash for the slice, as version 1 did). */
static void describe(ck_manifest *m, uint64_t chunk) {
  *m = (ck_manifest){.step = 3, .chunk = chunk};
  int64_t shape[2] = {4, 6};
  int t, f;
  assert_int_equal(ck_manifest_add_tensor(m, "param/w", 2, shape, &t), GT_OK);
  assert_int_equal(ck_manifest_add_file(m, "shard-00000.bin", &f), GT_OK);
  ck_slice s = {.tensor = t, .file = f, .box = {.ndim = 2, .lo = {0, 0}, .hi = {4, 6}}, .length = sizeof data};
  assert_int_equal(ck_manifest_add_slice(m, &s, NULL), GT_OK);
}

static void flip(const char *name, long at) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, at, SEEK_SET), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, at, SEEK_SET), 0);
  fputc(c ^ 0x10, f);
  fclose(f);
}

/* Reads row `row` of the stored tensor into out[6]. */
static gt_status read_row(const ck_manifest *m, int row, float *out, uint64_t *bytes) {
  ck_box want = {.ndim = 2, .lo = {row, 0}, .hi = {row + 1, 6}};
  *bytes = 0;
  return ck_fill_box(dir, m, 0, &want, out, bytes);
}

static void test_reads_only_the_chunks_needed(void **state) {
  (void)state;
  ck_manifest part;
  describe(&part, 64);
  const ck_src src[1] = {{.p = data}};
  assert_int_equal(ck_write_shard(dir, "shard-00000.bin", &part, src), GT_OK);
  assert_int_equal(ck_chunks(&part, &part.slices[0]), 2); /* 64 + 32 bytes */
  assert_int_equal(ck_manifest_write(dir, &part), GT_OK);
  ck_manifest_free(&part);

  ck_manifest m;
  assert_int_equal(ck_manifest_read(dir, &m), GT_OK);
  assert_int_equal(m.chunk, 64);
  float row[6];
  uint64_t bytes;
  assert_int_equal(read_row(&m, 3, row, &bytes), GT_OK);
  assert_memory_equal(row, data + 18, sizeof row);
  assert_int_equal(bytes, 32); /* chunk 1 only */
  assert_int_equal(read_row(&m, 0, row, &bytes), GT_OK);
  assert_memory_equal(row, data, sizeof row);
  assert_int_equal(bytes, 64);                           /* chunk 0 only */
  assert_int_equal(read_row(&m, 2, row, &bytes), GT_OK); /* bytes 48..72: across the boundary */
  assert_memory_equal(row, data + 12, sizeof row);
  assert_int_equal(bytes, 96);

  flip("shard-00000.bin", 5); /* in chunk 0 */
  assert_int_equal(read_row(&m, 3, row, &bytes), GT_OK);
  assert_memory_equal(row, data + 18, sizeof row);
  assert_int_equal(read_row(&m, 0, row, &bytes), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "chunk 0"));
  assert_non_null(strstr(gt_last_error(), "param/w"));
  int bad = -1;
  assert_int_equal(gt_ckpt_verify(dir, NULL, &bad), GT_EFORMAT);
  assert_int_equal(bad, 1);
  ck_manifest_free(&m);
}

/* The frame of a version 1 manifest around a body encoded without the
 * chunk size (which follows the step in version 2). */
static void write_version1(const ck_manifest *m) {
  ck_buf body = {0}, file = {0};
  assert_int_equal(ck_manifest_encode(m, &body), GT_OK);
  memmove(body.p + 8, body.p + 16, body.len - 16);
  body.len -= 8;
  unsigned char sha[CK_SHA];
  ck_sha256(body.p, body.len, sha);
  ck_put(&file, GT_CKPT_MAGIC, 8);
  ck_put_u32(&file, 1);
  ck_put_u32(&file, 0);
  ck_put_u64(&file, body.len);
  ck_put(&file, body.p, body.len);
  ck_put(&file, sha, CK_SHA);
  assert_int_equal(ck_write_durable(dir, CK_MANIFEST, file.p, file.len), GT_OK);
  ck_buf_free(&body);
  ck_buf_free(&file);
}

static void test_version1_still_loads(void **state) {
  (void)state;
  ck_manifest part;
  describe(&part, 0);
  ck_sha256(data, sizeof data, part.hashes[0]);
  assert_int_equal(ck_write_durable(dir, "shard-00000.bin", data, sizeof data), GT_OK);
  write_version1(&part);
  ck_manifest_free(&part);

  ck_manifest m;
  assert_int_equal(ck_manifest_read(dir, &m), GT_OK);
  assert_int_equal(m.chunk, 0);
  assert_int_equal(m.step, 3);
  float row[6];
  uint64_t bytes;
  assert_int_equal(read_row(&m, 3, row, &bytes), GT_OK);
  assert_memory_equal(row, data + 18, sizeof row);
  assert_int_equal(bytes, sizeof data); /* one hash: the whole slice is read to check it */
  flip("shard-00000.bin", 5);
  assert_int_equal(read_row(&m, 3, row, &bytes), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "SHA-256"));
  ck_manifest_free(&m);
}

static void test_bad_chunk_size_refused(void **state) {
  (void)state;
  ck_manifest part;
  describe(&part, 100); /* not a multiple of 64 */
  const ck_src src[1] = {{.p = data}};
  assert_int_equal(ck_write_shard(dir, "shard-00001.bin", &part, src), GT_EINVAL);
  assert_int_equal(ck_manifest_write(dir, &part), GT_OK);
  ck_manifest_free(&part);
  ck_manifest m;
  assert_int_equal(ck_manifest_read(dir, &m), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "chunk size 100"));
}

/* A slice whose bytes are in a file (optimizer state kept on disk) is
 * written as from memory: the same file bytes, the same chunk hashes. A
 * file shorter than the slice fails the write and leaves no shard. */
static void test_slice_from_a_file(void **state) {
  (void)state;
  char sub[300], path[320], shard[340];
  snprintf(sub, sizeof sub, "%s/from-file", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(path, sizeof path, "%s/state", sub);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, data, sizeof data, 100), (ssize_t)sizeof data); /* at an odd offset */

  ck_manifest mem, file;
  describe(&mem, 64);
  describe(&file, 64);
  assert_int_equal(ck_write_shard(sub, "shard-00000.bin", &mem, (const ck_src[]){{.p = data}}), GT_OK);
  snprintf(shard, sizeof shard, "%s/shard-00000.bin", sub);
  float back[24];
  FILE *f = fopen(shard, "rb");
  assert_non_null(f);
  assert_int_equal(fread(back, 1, sizeof back, f), sizeof back);
  fclose(f);
  assert_int_equal(ck_write_shard(sub, "shard-00000.bin", &file, (const ck_src[]){{.fd = fd, .at = 100}}), GT_OK);
  float again[24];
  f = fopen(shard, "rb");
  assert_non_null(f);
  assert_int_equal(fread(again, 1, sizeof again, f), sizeof again);
  fclose(f);
  assert_memory_equal(back, data, sizeof data);
  assert_memory_equal(again, data, sizeof data);
  assert_int_equal(file.nhashes, 2);
  assert_memory_equal(file.hashes, mem.hashes, file.nhashes * sizeof *file.hashes);
  ck_manifest_free(&mem);
  ck_manifest_free(&file);

  ck_manifest short_file;
  describe(&short_file, 64);
  assert_int_equal(ck_write_shard(sub, "shard-00001.bin", &short_file, (const ck_src[]){{.fd = fd, .at = 120}}),
                   GT_EIO);
  snprintf(shard, sizeof shard, "%s/shard-00001.bin", sub);
  assert_int_equal(access(shard, F_OK), -1);
  ck_manifest_free(&short_file);
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_only_the_chunks_needed), cmocka_unit_test(test_version1_still_loads),
      cmocka_unit_test(test_bad_chunk_size_refused), cmocka_unit_test(test_slice_from_a_file)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
