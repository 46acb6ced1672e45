/* Lines of "key=value" words, the text form of the coordinator's records
 * (health.c, mitigation.c): readable with any etcd client. Internal. */
#ifndef GIANT_COORD_LINE_H
#define GIANT_COORD_LINE_H

#include <stddef.h>

#include "giant/status.h"

/* The value of key in line, or NULL when absent; *vlen gets its length. */
const char *coord_field(const char *line, size_t len, const char *key, size_t *vlen);
/* The value of key as a number: GT_EFORMAT naming the key when absent or not one. */
gt_status coord_number(const char *line, size_t len, const char *key, double *out);
/* ... as a whole number in [lo, hi]. */
gt_status coord_integer(const char *line, size_t len, const char *key, double lo, double hi, long long *out);
/* The value of key as n comma-separated numbers. */
gt_status coord_numbers(const char *line, size_t len, const char *key, int n, double *out);

/* The value of key as a node id ("-" for none, read as "") into out. */
gt_status coord_node(const char *line, size_t len, const char *key, char *out, size_t out_len);
/* Parses a whole line with parse(line, len, out) into out (size bytes,
 * written only on success); `what` names it in errors. */
gt_status coord_parse_line(const char *line, size_t len, size_t max, const char *what,
                           gt_status (*parse)(const char *, size_t, void *), void *out, size_t size);

#endif
