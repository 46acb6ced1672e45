/* A small JSON reader for tokenizer.json: the whole text parsed into a tree
 * held in one arena. Bounded: nesting deeper than GT_JSON_MAX_DEPTH is an
 * error, not a deep recursion, and every failure names the line and column.
 * Internal to core/data. */
#ifndef GIANT_CORE_DATA_JSON_H
#define GIANT_CORE_DATA_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "giant/status.h"

#define GT_JSON_MAX_DEPTH 64

typedef enum gt_json_type {
  GT_JSON_NULL,
  GT_JSON_BOOL,
  GT_JSON_NUMBER,
  GT_JSON_STRING,
  GT_JSON_ARRAY,
  GT_JSON_OBJECT,
} gt_json_type;

typedef struct gt_json gt_json;
struct gt_json {
  gt_json_type type;
  bool boolean;
  double number;
  const char *str; /* STRING: its UTF-8, NUL-terminated (it may hold NULs: see len) */
  size_t len;
  const char *key; /* as a member of an object: its name (NUL-terminated), else NULL */
  size_t key_len;
  gt_json *child; /* ARRAY, OBJECT: the first element or member */
  gt_json *next;  /* the next sibling */
  size_t count;   /* ARRAY, OBJECT: how many */
};

typedef struct gt_json_doc gt_json_doc;

/* Parses text[0..len) (name in messages). *root lives as long as *doc. */
gt_status gt_json_parse(const char *text, size_t len, const char *name, gt_json_doc **doc, const gt_json **root);
void gt_json_free(gt_json_doc *doc);

/* The member `key` of an object; NULL when absent or v is no object. */
const gt_json *gt_json_get(const gt_json *v, const char *key);

const char *gt_json_type_name(gt_json_type t);

#endif
