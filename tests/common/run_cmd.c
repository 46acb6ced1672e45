/* Spawns a program in its own process group with a pipe for its output, and
 * waits with a deadline, killing the group if it runs over. */
#include "run_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

const char *build_path(const char *rel, char *buf, size_t n) {
  const char *bd = getenv("GT_BUILD_DIR");
  snprintf(buf, n, "%s/%s", bd ? bd : ".", rel);
  return buf;
}

int scratch_corpus(const char *tag, char dir[64], char text[128], char data[128]) {
  snprintf(dir, 64, "/tmp/giant-%s-XXXXXX", tag);
  if (!mkdtemp(dir)) return -1;
  snprintf(text, 128, "%s/corpus.txt", dir);
  snprintf(data, 128, "%s/corpus.tok", dir);
  FILE *f = fopen(text, "w");
  if (!f) return -1;
  for (int i = 0; i < 300; i++) fprintf(f, "a stitch in time saves nine, %d times over\n%%\n", i % 7);
  return fclose(f) == 0 ? 0 : -1;
}

int giantrun_scratch(const char *tag, char giantrun[512], char gpt[512], char dir[64], char text[128], char data[128]) {
  build_path("launch/giantrun", giantrun, 512);
  build_path("examples/gpt", gpt, 512);
  if (access("/usr/bin/etcd", X_OK) != 0 && system("command -v etcd >/dev/null 2>&1") != 0) {
    fprintf(stderr, "etcd not found: skipping\n");
    exit(77);
  }
  return scratch_corpus(tag, dir, text, data);
}

int scratch_remove(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

void run_cmd(char *const argv[], char *const env_extra[], double timeout_s, run_result *r) {
  memset(r, 0, sizeof *r);
  int fds[2];
  if (pipe(fds) != 0) {
    r->exit_code = -2;
    return;
  }
  double t0 = now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (int i = 0; env_extra && env_extra[i]; i++) putenv(env_extra[i]);
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  size_t used = 0;
  int status = 0, done = 0;
  while (!done) {
    double left = timeout_s - (now() - t0);
    if (left <= 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      r->exit_code = -1;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    poll(&p, 1, left > 0.05 ? 50 : 1);
    char buf[4096];
    ssize_t k;
    while ((k = read(fds[0], buf, sizeof buf)) > 0) {
      size_t take = (size_t)k < sizeof r->output - 1 - used ? (size_t)k : sizeof r->output - 1 - used;
      memcpy(r->output + used, buf, take);
      used += take;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      done = 1;
      while ((k = read(fds[0], buf, sizeof buf)) > 0) {
        size_t take = (size_t)k < sizeof r->output - 1 - used ? (size_t)k : sizeof r->output - 1 - used;
        memcpy(r->output + used, buf, take);
        used += take;
      }
      r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  r->output[used] = '\0';
  r->seconds = now() - t0;
  close(fds[0]);
}

void text_print(const char *what, const char *text) {
  printf("---- %s:\n", what);
  fputs(text ? text : "(none)", stdout);
  printf("\n---- end of %s\n", what);
  fflush(stdout);
}

void run_print(const char *what, const run_result *r) {
  char head[512];
  snprintf(head, sizeof head, "%s: exit %d after %.1f s; its output", what, r->exit_code, r->seconds);
  text_print(head, r->output);
}
