/* A python3 peer of a benchmark that stays up between measurements, so
 * that its start-up (importing torch, building its state) is never timed
 * and its measurements can alternate with Giant's round by round.
 *
 * The script prints any lines of its configuration, then "ready"; then it
 * answers each command line on its stdin with one line, and exits at EOF.
 * It exits 3 when torch is not installed. */
#ifndef GIANT_BENCH_PEER_H
#define GIANT_BENCH_PEER_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "giant/giant.h"

typedef struct bench_peer bench_peer;

/* Starts bench_python() on GIANT_BENCH_DIR/script with args (NULL-terminated)
 * and waits for its "ready", copying the lines before it to echo (NULL:
 * dropped). Fails with GT_EUNSUPPORTED, saying why, when python3 or torch
 * is missing or the script ends first. */
gt_status bench_peer_start(const char *script, const char *const *args, FILE *echo, bench_peer **out);
/* The same, with the variables env ("NAME=VALUE", NULL-terminated) added to
 * the script's environment (thread counts, for one). */
gt_status bench_peer_start_env(const char *script, const char *const *args, const char *const *env, FILE *echo,
                               bench_peer **out);
/* Sends the line cmd and reads the answer's line into line[cap], without
 * its newline. */
gt_status bench_peer_ask(bench_peer *p, const char *cmd, char *line, size_t cap);
/* Reads the next line of an answer that spans several, without its newline. */
gt_status bench_peer_read(bench_peer *p, char *line, size_t cap);
/* The peer's process id (for its threads' CPU times). */
pid_t bench_peer_pid(const bench_peer *p);
/* Closes its stdin and waits for it (a few seconds at most, then kills it). */
void bench_peer_stop(bench_peer *p);

#endif
