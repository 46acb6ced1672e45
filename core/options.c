/* Flag parsing with range checks. */
#include "giant/options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prog_name(const char *argv0) {
  const char *s = strrchr(argv0, '/');
  return s ? s + 1 : argv0;
}

static int bad(const char *prog, const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "%s: ", prog);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(run %s --help for the list of flags)\n", prog);
  return 2;
}

static int set_value(const char *prog, const gt_opt_spec *s, const char *v) {
  char *end = NULL;
  errno = 0;
  switch (s->kind) {
    case GT_OPT_STR: *(const char **)s->dst = v; return -1;
    case GT_OPT_FLAG: return -1;
    case GT_OPT_INT: {
      long x = strtol(v, &end, 10);
      if (errno || end == v || *end) return bad(prog, "%s wants an integer, got '%s'", s->name, v);
      if (x < s->min || x > s->max) {
        char range[64];
        snprintf(range, sizeof range, "'%s' is outside [%.0f, %.0f]", v, s->min, s->max);
        return bad(prog, "%s: %s", s->name, range);
      }
      *(int *)s->dst = (int)x;
      return -1;
    }
    case GT_OPT_U64: {
      if (*v == '-') return bad(prog, "%s wants a non-negative integer, got '%s'", s->name, v);
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || end == v || *end) return bad(prog, "%s wants a non-negative integer, got '%s'", s->name, v);
      *(uint64_t *)s->dst = (uint64_t)x;
      return -1;
    }
    case GT_OPT_FLOAT: {
      double x = strtod(v, &end);
      if (errno || end == v || *end || !isfinite(x)) return bad(prog, "%s wants a number, got '%s'", s->name, v);
      if (x < s->min || x > s->max) {
        char range[64];
        snprintf(range, sizeof range, "'%s' is outside [%g, %g]", v, s->min, s->max);
        return bad(prog, "%s: %s", s->name, range);
      }
      *(float *)s->dst = (float)x;
      return -1;
    }
  }
  return -1;
}

int gt_opt_parse(int argc, char **argv, const gt_opt_spec *specs, int nspecs, const char *usage, int *rest) {
  const char *prog = argc > 0 ? prog_name(argv[0]) : "giant";
  if (rest) *rest = argc;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      fputs(usage, stdout);
      return 0;
    }
    if (rest && !strcmp(arg, "--")) {
      *rest = i + 1;
      return -1;
    }
    if (strncmp(arg, "--", 2) != 0) {
      if (rest) {
        *rest = i;
        return -1;
      }
      return bad(prog, "unexpected argument '%s'%s", arg, "");
    }
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const gt_opt_spec *s = NULL;
    for (int k = 0; k < nspecs; k++)
      if (strlen(specs[k].name) == len && !strncmp(specs[k].name, arg, len)) s = &specs[k];
    if (!s) {
      char flag[128];
      snprintf(flag, sizeof flag, "%.*s", (int)(len < 100 ? len : 100), arg);
      return bad(prog, "unknown flag '%s'%s", flag, "");
    }
    if (s->kind == GT_OPT_FLAG) {
      if (eq) return bad(prog, "%s takes no value%s", s->name, "");
      *(bool *)s->dst = true;
      continue;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      if (i + 1 >= argc) return bad(prog, "%s needs a value%s", s->name, "");
      v = argv[++i];
    }
    int r = set_value(prog, s, v);
    if (r >= 0) return r;
  }
  return -1;
}
