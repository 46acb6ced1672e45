/* Runs a program to completion for a test: output captured, time bounded. */
#ifndef GIANT_TEST_RUN_CMD_H
#define GIANT_TEST_RUN_CMD_H

#include <stddef.h>

typedef struct run_result {
  int exit_code;        /* exit status, 128+signal if killed by a signal, -1 on timeout */
  char output[1 << 20]; /* stdout and stderr together (the first MiB) */
  double seconds;
} run_result;

/* argv[0] is a path; env_extra (may be NULL) is a NULL-terminated list of
 * "NAME=value" added to the environment. Kills the process group after
 * timeout_s. */
void run_cmd(char *const argv[], char *const env_extra[], double timeout_s, run_result *r);
/* The whole output on stdout, between two marker lines naming `what`:
 * CMocka cuts a failure's message at 1 KiB, where a failed run's cause is
 * usually further down. */
void run_print(const char *what, const run_result *r);
/* The same for any text (a log read back, a plan printed). */
void text_print(const char *what, const char *text);
/* Fails the test (fail_msg, printf-style) after printing the whole of
 * `text`, named `what`. */
#define text_fail(what, text, ...) \
  do {                             \
    text_print((what), (text));    \
    fail_msg(__VA_ARGS__);         \
  } while (0)
/* Fails the test (CMocka's fail_msg, printf-style) after printing the whole
 * output of the run r that shows why. */
#define run_fail(r, ...)                            \
  do {                                              \
    run_print("the run that failed the test", (r)); \
    fail_msg(__VA_ARGS__);                          \
  } while (0)
/* "$GT_BUILD_DIR/<rel>" into buf. */
const char *build_path(const char *rel, char *buf, size_t n);

/* A fresh directory /tmp/giant-<tag>-XXXXXX (into dir, 64 bytes) holding
 * corpus.txt, 300 short documents separated by '%' lines as in fortune
 * files; text and data (128 bytes each) get the paths of corpus.txt and of
 * corpus.tok, which the test makes from it. 0 on success. */
int scratch_corpus(const char *tag, char dir[64], char text[128], char data[128]);
/* For tests that run examples/gpt under giantrun: their paths into
 * giantrun and gpt (512 bytes each) and a scratch corpus as above. Exits
 * 77 (skipped) when there is no etcd for giantrun --standalone. */
int giantrun_scratch(const char *tag, char giantrun[512], char gpt[512], char dir[64], char text[128], char data[128]);
/* rm -rf dir; 0 on success. */
int scratch_remove(const char *dir);

#endif
