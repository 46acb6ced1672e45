/* safetensors files (Hugging Face's format): an 8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the tensors' bytes. The reader takes F32, F16 and BF16 (converted to
 * fp32) and refuses anything else by name; every lie a header can tell
 * about sizes and ranges is an error naming the tensor. The writer writes
 * F32. Shared with the run library (--init-from). */
#ifndef GIANT_CKPT_SAFETENSORS_H
#define GIANT_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

#define CK_ST_MAXDIM 8
/* The header's largest size, as Hugging Face's reader has it. */
#define CK_ST_MAX_HEADER (100u << 20)

typedef enum ck_st_dtype { CK_ST_F32, CK_ST_F16, CK_ST_BF16 } ck_st_dtype;

typedef struct ck_st_tensor {
  const char *name;
  ck_st_dtype dtype;
  int ndim;
  int64_t shape[CK_ST_MAXDIM];
  uint64_t begin, end; /* bytes, from the start of the data */
  uint64_t numel;
} ck_st_tensor;

typedef struct ck_st ck_st;

/* Parses a header of len bytes (what follows the length) in front of
 * data_len bytes of data; name is for messages. The fuzzers' entry. */
gt_status ck_st_parse(const char *header, size_t len, uint64_t data_len, const char *name, ck_st **out);
/* Opens and checks a file; its tensors are read on demand. */
gt_status ck_st_open(const char *path, ck_st **out);
void ck_st_close(ck_st *st);

int ck_st_count(const ck_st *st);
const ck_st_tensor *ck_st_at(const ck_st *st, int i);
/* The tensor named `name`, or NULL. */
const ck_st_tensor *ck_st_find(const ck_st *st, const char *name);
/* Reads tensor t (of an opened file) into dst, t->numel floats. */
gt_status ck_st_read(ck_st *st, const ck_st_tensor *t, float *dst);

/* One tensor to write: fp32, row-major. */
typedef struct ck_st_out {
  const char *name;
  int ndim;
  int64_t shape[CK_ST_MAXDIM];
  const float *data;
} ck_st_out;

/* Writes n tensors to dir/name, durably (a temporary file renamed into
 * place). */
gt_status ck_st_write(const char *dir, const char *name, const ck_st_out *t, int n);

#endif
