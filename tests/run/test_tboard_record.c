/* The framing of TensorBoard's event files: CRC-32C against the vectors of
 * RFC 3720 (B.4) and the usual check value, by the table and by SSE4.2's
 * instruction where this CPU has it, on every length and alignment; the
 * masked form against values TensorFlow's writer produces; and TFRecord
 * records written and read back, a file cut anywhere reading as whole
 * records then a truncated one (never as corrupt), a flipped bit reading
 * as corrupt. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "run/crc32c.h"
#include "run/tfrecord.h"

/* Both ways agree with want, and with each other on every sub-range. */
static void check_crc(const void *p, size_t n, uint32_t want) {
  assert_int_equal(run_crc32c_table(p, n), want);
  assert_int_equal(run_crc32c(p, n), want);
  uint32_t hw;
  if (run_crc32c_hw(p, n, &hw)) assert_int_equal(hw, want);
}

static void test_crc32c_vectors(void **state) {
  (void)state;
  unsigned char b[32];
  check_crc("123456789", 9, 0xe3069283u);
  check_crc("", 0, 0);
  memset(b, 0, 32);
  check_crc(b, 32, 0x8a9136aau);
  memset(b, 0xff, 32);
  check_crc(b, 32, 0x62a8ab43u);
  for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
  check_crc(b, 32, 0x46dd794eu);
  for (int i = 0; i < 32; i++) b[i] = (unsigned char)(31 - i);
  check_crc(b, 32, 0x113fdb5cu);
}

/* The instruction's 8-byte steps and the bytes before and after them. */
static void test_crc32c_lengths_and_alignments(void **state) {
  (void)state;
  unsigned char b[256];
  for (int i = 0; i < 256; i++) b[i] = (unsigned char)(i * 37 + 11);
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n + off <= 200; n++) {
      uint32_t t = run_crc32c_table(b + off, n), hw;
      assert_int_equal(run_crc32c(b + off, n), t);
      if (run_crc32c_hw(b + off, n, &hw)) assert_int_equal(hw, t);
    }
}

/* TFRecord's mask, against TensorBoard's own masked_crc32c: on the
 * check string, on the length prefix of an 8-byte record, on nothing. */
static void test_crc32c_masked(void **state) {
  (void)state;
  unsigned char len[8] = {8, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(run_crc32c_masked("123456789", 9), 0xc78ab0e5u);
  assert_int_equal(run_crc32c_masked(len, 8), 0x0f2486ffu);
  assert_int_equal(run_crc32c_masked("", 0), 0xa282ead8u);
}

static char dir[64], path[128];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/giant-tfrec-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  snprintf(path, sizeof path, "%s/records", dir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(path);
  return rmdir(dir);
}

static unsigned char *read_all(size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char *buf = malloc(1 << 16);
  assert_non_null(buf);
  *n = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

enum { NREC = 5 };

static void test_records_round_trip_and_cut(void **state) {
  (void)state;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  assert_true(fd >= 0);
  char rec[NREC][64];
  for (int i = 0; i < NREC; i++) {
    snprintf(rec[i], sizeof rec[i], "record %d%.*s", i, i * 7, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    assert_int_equal(run_tfrecord_append(fd, rec[i], strlen(rec[i])), GT_OK);
  }
  close(fd);
  size_t len;
  unsigned char *buf = read_all(&len);
  size_t want_len = 0, ends[NREC];
  for (int i = 0; i < NREC; i++) ends[i] = want_len += strlen(rec[i]) + 16;
  assert_int_equal(len, want_len);
  size_t off = 0, n;
  const unsigned char *data;
  for (int i = 0; i < NREC; i++) {
    assert_int_equal(run_tfrecord_next(buf, len, &off, &data, &n), RUN_TFRECORD_OK);
    assert_int_equal(n, strlen(rec[i]));
    assert_memory_equal(data, rec[i], n);
  }
  assert_int_equal(run_tfrecord_next(buf, len, &off, &data, &n), RUN_TFRECORD_END);
  /* Cut anywhere: the whole records before the cut, then a truncated one. */
  for (size_t cut = 0; cut < len; cut++) {
    int whole = 0;
    while (whole < NREC && ends[whole] <= cut) whole++;
    off = 0;
    int got = 0;
    run_tfrecord_read rd;
    while ((rd = run_tfrecord_next(buf, cut, &off, &data, &n)) == RUN_TFRECORD_OK) got++;
    assert_int_equal(got, whole);
    bool boundary = cut == 0 || (whole > 0 && cut == ends[whole - 1]);
    assert_int_equal(rd, boundary ? RUN_TFRECORD_END : RUN_TFRECORD_TRUNCATED);
  }
  /* A flipped bit, in the length or in the data, is corrupt. */
  for (size_t at = 0; at < ends[0]; at++) {
    buf[at] ^= 0x10;
    off = 0;
    assert_int_not_equal(run_tfrecord_next(buf, len, &off, &data, &n), RUN_TFRECORD_OK);
    buf[at] ^= 0x10;
  }
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_vectors),
      cmocka_unit_test(test_crc32c_lengths_and_alignments),
      cmocka_unit_test(test_crc32c_masked),
      cmocka_unit_test(test_records_round_trip_and_cut),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
