/* TFRecord framing, the container of TensorBoard's event files: each record
 * is its length (uint64, little-endian), the masked CRC-32C of those 8
 * bytes, the data, and the masked CRC-32C of the data. */
#ifndef GIANT_RUN_TFRECORD_H
#define GIANT_RUN_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

/* Appends one record of n bytes to fd (opened O_APPEND) with one write(),
 * so that a process killed at any moment leaves whole records and at most
 * a truncated last one, which readers stop at. A short write (a full disk)
 * is cut back off the file before the error returns. */
gt_status run_tfrecord_append(int fd, const void *data, size_t n);

typedef enum run_tfrecord_read {
  RUN_TFRECORD_END = 0,       /* no bytes left */
  RUN_TFRECORD_OK = 1,        /* a record: *data, *n */
  RUN_TFRECORD_TRUNCATED = 2, /* the bytes left are the start of a record, cut short */
  RUN_TFRECORD_CORRUPT = 3,   /* a checksum does not match */
} run_tfrecord_read;

/* The record at *off of buf[0, len), *off moved past it. */
run_tfrecord_read run_tfrecord_next(const unsigned char *buf, size_t len, size_t *off, const unsigned char **data,
                                    size_t *n);

#endif
