/* The namings' tables (hf_names.c): which tensor of a file a model's
 * parameter is, and how its layout differs from Giant's. Internal to
 * ckpt/. */
#ifndef GIANT_CKPT_HF_NAMES_H
#define GIANT_CKPT_HF_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"
#include "giant/status.h"

/* How a tensor is stored there, from Giant's row-major global shape. */
typedef enum ck_hf_layout {
  CK_HF_SAME,      /* the same shape and order */
  CK_HF_FLAT,      /* the same order, one dimension */
  CK_HF_TRANSPOSE, /* Giant's [rows..., cols] as [cols, rows] (GPT-2's Conv1D keeps [in, out]) */
} ck_hf_layout;

typedef struct ck_hf_map {
  char name[160];     /* the tensor's name in the file */
  char fallback[160]; /* where it may be instead (a tied output matrix: the embedding); "" if nowhere */
  ck_hf_layout layout;
} ck_hf_map;

typedef struct ck_hf_naming ck_hf_naming;

/* The naming called `names`, or an error listing those there are. */
gt_status ck_hf_naming_find(const char *names, const ck_hf_naming **out);
const char *ck_hf_naming_name(const ck_hf_naming *n);
/* Whether it is Hugging Face's GPT-2 (export writes a config.json). */
bool ck_hf_naming_is_gpt2(const ck_hf_naming *n);
/* Whether it is Hugging Face's Llama (export writes its config.json). */
bool ck_hf_naming_is_llama(const ck_hf_naming *n);
/* Where parameter `param` goes; an error naming it when the table has no row. */
gt_status ck_hf_map_param(const ck_hf_naming *n, const char *param, ck_hf_map *out);

/* The file's shape of a tensor of Giant's global shape. */
int ck_hf_shape(ck_hf_layout l, int ndim, const int64_t *shape, int64_t *out);
/* Moves a whole tensor between the layouts: to the file's (to_file) or back
 * to Giant's. Giant's shape is given; src and dst do not overlap. */
void ck_hf_convert(ck_hf_layout l, bool to_file, int ndim, const int64_t *shape, const float *src, float *dst);

#endif
