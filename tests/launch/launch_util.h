/* Helpers for the launcher tests: agents run in the background with their
 * output in a file, bounded waits for files and exits, and a check that no
 * recorded process is left. */
#ifndef GIANT_TESTS_LAUNCH_UTIL_H
#define GIANT_TESTS_LAUNCH_UTIL_H

#include <stddef.h>
#include <sys/types.h>

typedef struct agent {
  pid_t pid;
  int code;      /* exit status, 128+signal, -1 while running or on timeout */
  char log[512]; /* its stdout and stderr */
} agent;

/* "$GT_BUILD_DIR/launch/giantrun" and the test worker. */
const char *giantrun_bin(void);
const char *worker_bin(void);
/* Starts `giantrun ARGS...` (args NULL-terminated, without argv[0]) in its
 * own process group, output to log. Returns 0 or -1. */
int agent_start(agent *a, const char *log, const char *const *args);
/* Starts `giantrun FLAGS... --node-id NODE launch_worker WARGS...` with its
 * output in dir/agent-NODE.log (flags and wargs NULL-terminated). */
int node_start(agent *a, const char *dir, const char *node, const char *const *flags, const char *const *wargs);
/* Waits up to timeout_s; on timeout kills it (SIGKILL) and returns -1. */
int agent_wait(agent *a, double timeout_s);
/* 1 when every file exists within timeout_s. */
int wait_files(const char *const *paths, int n, double timeout_s);
/* The value of KEY in a KEY=VALUE file into out; 0 or -1. */
int env_get(const char *path, const char *key, char *out, size_t n);
/* The whole file, malloc'ed (NULL if unreadable). */
char *slurp(const char *path);
/* Processes listed in dir/pids that still run (zombies count as gone). */
int alive_count(const char *dir, double wait_s);
/* Process pid's state letter from /proc/PID/stat ('R', 'S', 'T', 'Z'...),
 * 0 when it is gone. */
char proc_state(long pid);
/* A fresh temp dir in buf; rm -rf. */
int temp_dir(char *buf, size_t n, const char *tag);
void rm_rf(const char *dir);
double mono_now(void);

#endif
