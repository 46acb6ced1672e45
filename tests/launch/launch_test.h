/* Shared by the launcher test programs. */
#ifndef GIANT_TESTS_LAUNCH_TEST_H
#define GIANT_TESTS_LAUNCH_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "launch/launch_util.h"

/* Time bounds of the launcher tests. Typical values were measured on two
 * cores kept busy by other work; ASan roughly doubles them. A bound only
 * ends a wait that is going wrong: the waits return as soon as the thing
 * waited for happens, so a generous bound costs nothing when all is well.
 *
 * START_S: a job's first workers up (agents exec, meet in etcd, a round
 * closes, workers start and pass a barrier): 0.3-0.5 s, 60 s is > 100x. */
#define START_S 60
/* STOP_S: an agent exits after SIGTERM or SIGKILL (workers stopped, lease
 * revoked): 0.1-0.4 s, 30 s is > 70x (and past the 2 s --stop-grace the
 * tests give, after which workers are killed). */
#define STOP_S 30
/* GONE_S: a stopped job's processes are all gone once its agents exited:
 * milliseconds, 30 s. */
#define GONE_S 30
/* RUN_S: a short job (workers that sleep at most a few seconds, perhaps a
 * restart with its back-off of at most 1 s) runs to its end: 1-6 s,
 * 120 s is > 20x. */
#define RUN_S 120
/* LIVE_TTL: --rdzv-ttl for agents that must stay members while the machine is
 * busy. An agent renews its lease every TTL/3, so a live agent is taken for
 * gone only when its renewals stall for 2/3 of the TTL: 3.3 s here, against
 * renewals that take milliseconds (tens under load). Tests that wait for a
 * killed agent's lease to lapse pay this once. */
#define LIVE_TTL "5"
/* ETCD_CALL_MS: the tests' own etcd calls on loopback take 1-10 ms on busy
 * cores; 5 s is > 500x. */
#define ETCD_CALL_MS 5000

/* Prints an agent's log when a check about it fails. */
static inline void dump_log(const agent *a) {
  char *s = slurp(a->log);
  fprintf(stderr, "---- %s ----\n%s\n----\n", a->log, s ? s : "(unreadable)");
  free(s);
}

/* Waits for an agent's exit; on another status than code, prints its log
 * and fails. */
static inline void expect_exit(agent *a, int code, double timeout_s) {
  int got = agent_wait(a, timeout_s);
  if (got != code) {
    dump_log(a);
    fail_msg("agent exited %d, expected %d", got, code);
  }
}

/* 1 when the agent's log holds text within timeout_s. */
static inline int log_has(const agent *a, const char *text, double timeout_s) {
  for (double end = mono_now() + timeout_s;; usleep(20000)) {
    char *s = slurp(a->log);
    int found = s && strstr(s, text);
    free(s);
    if (found) return 1;
    if (mono_now() > end) return 0;
  }
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

/* Starts nodes x and y with the same flags and worker arguments, and waits
 * for both workers of generation 0; fails with both logs when they do not
 * start within timeout_s. */
static inline void start_two(agent a[2], const char *dir, const char *const *flags, const char *const *w,
                             double timeout_s) {
  assert_int_equal(node_start(&a[0], dir, "x", flags, w), 0);
  assert_int_equal(node_start(&a[1], dir, "y", flags, w), 0);
  if (!wait_gen(dir, 0, 2, timeout_s)) {
    dump_log(&a[0]);
    dump_log(&a[1]);
    fail_msg("gen0 did not start within %.0f s", timeout_s);
  }
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
