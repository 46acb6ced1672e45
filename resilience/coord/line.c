/* Parsing the coordinator's "key=value" lines (line.h). */
#include "resilience/coord/line.h"

#include "resilience/rdzv/rdzv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *coord_field(const char *line, size_t len, const char *key, size_t *vlen) {
  size_t klen = strlen(key);
  for (size_t i = 0; i + klen < len; i++) {
    if ((i == 0 || line[i - 1] == ' ') && !strncmp(line + i, key, klen) && line[i + klen] == '=') {
      const char *v = line + i + klen + 1;
      size_t n = 0;
      while (v + n < line + len && v[n] != ' ') n++;
      *vlen = n;
      return v;
    }
  }
  return NULL;
}

/* One number of text [v, v + n): NaN is not one. */
static int parse_one(const char *v, size_t n, double *out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  *out = strtod(buf, &end);
  return errno || *end || *out != *out ? -1 : 0;
}

gt_status coord_number(const char *line, size_t len, const char *key, double *out) {
  size_t n;
  const char *v = coord_field(line, len, key, &n);
  if (!v || n == 0 || n >= 64) return gt_errorf(GT_EFORMAT, "no %s=<number>", key);
  if (parse_one(v, n, out) != 0) return gt_errorf(GT_EFORMAT, "%s=%.*s is not a number", key, (int)n, v);
  return GT_OK;
}

gt_status coord_integer(const char *line, size_t len, const char *key, double lo, double hi, long long *out) {
  double v = 0;
  GT_TRY(coord_number(line, len, key, &v));
  if (v < lo || v > hi || v != (double)(long long)v)
    return gt_errorf(GT_EFORMAT, "%s=%g is not a whole number in %.0f..%.0f", key, v, lo, hi);
  *out = (long long)v;
  return GT_OK;
}

gt_status coord_numbers(const char *line, size_t len, const char *key, int n, double *out) {
  size_t vlen;
  const char *v = coord_field(line, len, key, &vlen);
  if (!v) return gt_errorf(GT_EFORMAT, "no %s=<%d numbers>", key, n);
  const char *end = v + vlen;
  for (int i = 0; i < n; i++) {
    const char *comma = memchr(v, ',', (size_t)(end - v));
    const char *stop = comma ? comma : end;
    if (parse_one(v, (size_t)(stop - v), &out[i]) != 0 || (i + 1 < n) != (comma != NULL))
      return gt_errorf(GT_EFORMAT, "%s=%.*s is not %d comma-separated numbers", key, (int)vlen, end - vlen, n);
    v = stop + 1;
  }
  return GT_OK;
}

gt_status coord_node(const char *line, size_t len, const char *key, char *out, size_t out_len) {
  size_t n;
  const char *v = coord_field(line, len, key, &n);
  if (!v || n == 0 || n >= out_len) return gt_errorf(GT_EFORMAT, "%s is missing or too long", key);
  memcpy(out, v, n);
  out[n] = '\0';
  if (!strcmp(out, "-")) out[0] = '\0';
  if (out[0] && !gt_rdzv_valid_id(out)) return gt_errorf(GT_EFORMAT, "%s=%s is not a node id", key, out);
  return GT_OK;
}

gt_status coord_parse_line(const char *line, size_t len, size_t max, const char *what,
                           gt_status (*parse)(const char *, size_t, void *), void *out, size_t size) {
  if (len >= max || memchr(line, '\0', len)) return gt_errorf(GT_EFORMAT, "%s: not a line of text", what);
  void *tmp = calloc(1, size);
  if (!tmp) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status s = parse(line, len, tmp);
  if (s == GT_OK)
    memcpy(out, tmp, size);
  else
    s = gt_error_context(s, "%s", what);
  free(tmp);
  return s;
}
