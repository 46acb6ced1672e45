/* Runs a program to completion for a test: output captured, time bounded. */
#ifndef GIANT_TEST_RUN_CMD_H
#define GIANT_TEST_RUN_CMD_H

#include <stddef.h>

typedef struct run_result {
  int exit_code;      /* exit status, 128+signal if killed by a signal, -1 on timeout */
  char output[16384]; /* stdout and stderr together (truncated) */
  double seconds;
} run_result;

/* argv[0] is a path; env_extra (may be NULL) is a NULL-terminated list of
 * "NAME=value" added to the environment. Kills the process group after
 * timeout_s. */
void run_cmd(char *const argv[], char *const env_extra[], double timeout_s, run_result *r);
/* "$GT_BUILD_DIR/<rel>" into buf. */
const char *build_path(const char *rel, char *buf, size_t n);

#endif
