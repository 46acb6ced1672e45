/* See launch_util.h. */
#include "launch/launch_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static const char *bin(const char *rel, char *buf, size_t n) {
  const char *bd = getenv("GT_BUILD_DIR");
  snprintf(buf, n, "%s/%s", bd ? bd : ".", rel);
  return buf;
}

const char *giantrun_bin(void) {
  static char b[1024];
  return bin("launch/giantrun", b, sizeof b);
}

const char *worker_bin(void) {
  static char b[1024];
  return bin("tests/launch/launch_worker", b, sizeof b);
}

int agent_start(agent *a, const char *log, const char *const *args) {
  memset(a, 0, sizeof *a);
  a->code = -1;
  snprintf(a->log, sizeof a->log, "%s", log);
  const char *argv[64];
  int n = 0;
  argv[n++] = giantrun_bin();
  for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid);
  a->pid = pid;
  return 0;
}

int node_start(agent *a, const char *dir, const char *node, const char *const *flags, const char *const *wargs) {
  char log[512];
  snprintf(log, sizeof log, "%s/agent-%s.log", dir, node);
  const char *args[64];
  int n = 0;
  for (int i = 0; flags[i] && n < 56; i++) args[n++] = flags[i];
  args[n++] = "--node-id";
  args[n++] = node;
  args[n++] = worker_bin();
  for (int i = 0; wargs[i] && n < 63; i++) args[n++] = wargs[i];
  args[n] = NULL;
  return agent_start(a, log, args);
}

int agent_wait(agent *a, double timeout_s) {
  if (a->pid <= 0) return a->code;
  double end = mono_now() + timeout_s;
  int status;
  for (;;) {
    pid_t p = waitpid(a->pid, &status, WNOHANG);
    if (p == a->pid) break;
    if (mono_now() > end) {
      kill(-a->pid, SIGKILL);
      kill(a->pid, SIGKILL);
      waitpid(a->pid, NULL, 0);
      a->pid = 0;
      a->code = -1;
      return -1;
    }
    nap(0.02);
  }
  a->pid = 0;
  a->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return a->code;
}

int wait_files(const char *const *paths, int n, double timeout_s) {
  double end = mono_now() + timeout_s;
  for (;;) {
    int all = 1;
    for (int i = 0; i < n && all; i++) all = access(paths[i], F_OK) == 0;
    if (all) return 1;
    if (mono_now() > end) return 0;
    nap(0.02);
  }
}

char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)sz + 1);
  if (!buf) {
    fclose(f);
    return NULL;
  }
  size_t n = fread(buf, 1, (size_t)sz, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

int env_get(const char *path, const char *key, char *out, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  size_t kl = strlen(key);
  int found = -1;
  while (found < 0 && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, kl) == 0 && line[kl] == '=') {
      line[strcspn(line, "\n")] = 0;
      snprintf(out, n, "%s", line + kl + 1);
      found = 0;
    }
  }
  fclose(f);
  return found;
}

char proc_state(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return rp && rp[1] == ' ' ? rp[2] : '?';
}

static int running(long pid) {
  if (kill((pid_t)pid, 0) != 0) return 0;
  char st = proc_state(pid);
  return st && st != 'Z' && st != 'X';
}

int alive_count(const char *dir, double wait_s) {
  char path[512];
  snprintf(path, sizeof path, "%s/pids", dir);
  double end = mono_now() + wait_s;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int alive = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) alive += running(pid);
    fclose(f);
    if (alive == 0 || mono_now() > end) return alive;
    nap(0.05);
  }
}

int temp_dir(char *buf, size_t n, const char *tag) {
  snprintf(buf, n, "/tmp/giant-%s-XXXXXX", tag);
  return mkdtemp(buf) ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void rm_rf(const char *dir) {
  if (dir && dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
