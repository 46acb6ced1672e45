/* Shared by the launcher test programs. */
#ifndef GIANT_TESTS_LAUNCH_TEST_H
#define GIANT_TESTS_LAUNCH_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "launch/launch_util.h"

/* Prints an agent's log when a check about it fails. */
static inline void dump_log(const agent *a) {
  char *s = slurp(a->log);
  fprintf(stderr, "---- %s ----\n%s\n----\n", a->log, s ? s : "(unreadable)");
  free(s);
}

/* dir/gen<g>.rank<r>.env */
static inline const char *env_path(char *buf, size_t n, const char *dir, int gen, int rank) {
  snprintf(buf, n, "%s/gen%d.rank%d.env", dir, gen, rank);
  return buf;
}

/* Waits for the env files of ranks 0..world-1 of generation gen. */
static inline int wait_gen(const char *dir, int gen, int world, double timeout_s) {
  char paths[16][600];
  const char *p[16];
  for (int r = 0; r < world && r < 16; r++) p[r] = env_path(paths[r], sizeof paths[r], dir, gen, r);
  return wait_files(p, world, timeout_s);
}

static inline long env_long(const char *dir, int gen, int rank, const char *key) {
  char path[600], v[256];
  if (env_get(env_path(path, sizeof path, dir, gen, rank), key, v, sizeof v) != 0) return -999;
  return strtol(v, NULL, 10);
}

static inline double env_double(const char *dir, int gen, int rank, const char *key) {
  char path[600], v[256];
  if (env_get(env_path(path, sizeof path, dir, gen, rank), key, v, sizeof v) != 0) return -1;
  return strtod(v, NULL);
}

static inline void env_str(const char *dir, int gen, int rank, const char *key, char *out, size_t n) {
  char path[600];
  if (env_get(env_path(path, sizeof path, dir, gen, rank), key, out, n) != 0) out[0] = 0;
}

#endif
