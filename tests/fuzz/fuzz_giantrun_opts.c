/* Fuzz target: giantrun's flags (agent_parse, launch/opts.c), which runs
 * gt_opt_parse (core/options.c) over giantrun's own table and then checks
 * what the flags say together. The input is argv[1..], split on NUL
 * bytes. The parser only reads: it checks files named by the flags
 * (access, the password file), prints usage, and returns. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "launch/agent.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* One copy, NUL-terminated, cut into arguments in place. */
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[MAX_ARGS + 2] = {"giantrun"};
  int argc = 1;
  for (size_t at = 0; at <= size && argc <= MAX_ARGS; at += strlen(buf + at) + 1) argv[argc++] = buf + at;
  argv[argc] = NULL;
  static agent_opts o; /* holds a PATH_MAX buffer: off the stack */
  int r = agent_parse(argc, argv, &o);
  if (r == -1) {
    /* Going on means a program to run and a sane node count. */
    if (!o.prog_argv || !o.prog_argv[0] || !o.prog_path[0]) abort();
    if (o.min_nodes < 1 || o.min_nodes > o.max_nodes || o.nproc < 1) abort();
  } else if (r != 0 && r != 2) {
    abort();
  }
  free(buf);
  return 0;
}
