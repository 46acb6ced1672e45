/* Element types: the data types of parameters, activations and token ids,
 * their sizes, and bfloat16's conversions. */
#ifndef GIANT_TENSOR_H
#define GIANT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_dtype {
  GT_F32 = 0,  /* IEEE float32: parameters, activations, optimizer state */
  GT_BF16 = 1, /* bfloat16 storage: compute copies in mixed precision */
  GT_I32 = 2,  /* int32: token ids and targets */
} gt_dtype;

size_t gt_dtype_size(gt_dtype t);
const char *gt_dtype_name(gt_dtype t);

/* bfloat16 is the top half of a float32; conversion rounds to nearest even
 * and keeps NaN a NaN. */
typedef uint16_t gt_bf16;
gt_bf16 gt_f32_to_bf16(float f);
float gt_bf16_to_f32(gt_bf16 h);

GT_API_END
#endif
