/* TFRecord records: framed and checksummed in memory, written whole. */
#include "tfrecord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint32_t get_le32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

gt_status run_tfrecord_append(int fd, const void *data, size_t n) {
  size_t total = n + 16;
  unsigned char *buf = malloc(total);
  if (!buf) return gt_errorf(GT_ENOMEM, "out of memory framing a %zu-byte event record", n);
  put_le64(buf, n);
  put_le32(buf + 8, run_crc32c_masked(buf, 8));
  if (n) memcpy(buf + 12, data, n);
  put_le32(buf + 12 + n, run_crc32c_masked(buf + 12, n));
  off_t end = lseek(fd, 0, SEEK_END); /* where a short write is cut back to */
  ssize_t w;
  do w = write(fd, buf, total);
  while (w < 0 && errno == EINTR);
  int e = errno;
  free(buf);
  if (w == (ssize_t)total) return GT_OK;
  if (w > 0 && end >= 0 && ftruncate(fd, end) != 0) e = errno;
  return gt_errorf(GT_EIO, "writing an event record failed: %s", w < 0 ? strerror(e) : "short write (disk full?)");
}

run_tfrecord_read run_tfrecord_next(const unsigned char *buf, size_t len, size_t *off, const unsigned char **data,
                                    size_t *n) {
  size_t left = len - *off;
  const unsigned char *p = buf + *off;
  if (left == 0) return RUN_TFRECORD_END;
  if (left < 12) return RUN_TFRECORD_TRUNCATED;
  if (get_le32(p + 8) != run_crc32c_masked(p, 8)) return RUN_TFRECORD_CORRUPT;
  uint64_t m = get_le64(p);
  if (m > left - 12 || left - 12 - m < 4) return RUN_TFRECORD_TRUNCATED;
  if (get_le32(p + 12 + m) != run_crc32c_masked(p + 12, (size_t)m)) return RUN_TFRECORD_CORRUPT;
  *data = p + 12;
  *n = (size_t)m;
  *off += 16 + (size_t)m;
  return RUN_TFRECORD_OK;
}
