/* Command-line flags for Giant's programs: a table of specs, parsed with
 * range checks, so every tool rejects nonsense the same way (a message
 * naming the flag and exit status 2). */
#ifndef GIANT_OPTIONS_H
#define GIANT_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_opt_kind {
  GT_OPT_STR,   /* const char * */
  GT_OPT_INT,   /* int, within [min, max] */
  GT_OPT_U64,   /* uint64_t */
  GT_OPT_FLOAT, /* float, within [min, max] */
  GT_OPT_FLAG,  /* bool, set to true, takes no value */
} gt_opt_kind;

typedef struct gt_opt_spec {
  const char *name; /* "--steps" */
  gt_opt_kind kind;
  void *dst;
  double min, max; /* for GT_OPT_INT and GT_OPT_FLOAT */
} gt_opt_spec;

/* Parses argv[1..]. Accepts "--flag value" and "--flag=value". Returns -1 when
 * the program should go on, 0 after printing `usage` for --help, and 2 after
 * printing an error for an unknown flag, a missing or malformed value, a
 * value out of range, or a stray argument. When `rest` is not NULL, parsing
 * stops at the first argument that is not a flag (or after "--") and *rest
 * receives its index (launchers pass the rest to a program). */
int gt_opt_parse(int argc, char **argv, const gt_opt_spec *specs, int nspecs, const char *usage, int *rest);

GT_API_END
#endif
