/* A persistent python3 peer over two pipes (bench_peer.h). */
#include "bench_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_torch.h"

enum { MAX_ARGS = 16 };

struct bench_peer {
  pid_t pid;
  FILE *to, *from;
};

/* Ends the peer; returns its exit code (-1: killed or not started). */
static int reap(bench_peer *p) {
  int code = -1, st;
  if (p->to) fclose(p->to); /* EOF ends the script's loop */
  if (p->from) fclose(p->from);
  for (int i = 0; p->pid > 0 && i < 100; i++) {
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
      code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      p->pid = 0;
      break;
    }
    usleep(50000);
  }
  if (p->pid > 0) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
  }
  free(p);
  return code;
}

extern char **environ;

gt_status bench_peer_start(const char *script, const char *const *args, FILE *echo, bench_peer **out) {
  return bench_peer_start_env(script, args, NULL, echo, out);
}

gt_status bench_peer_start_env(const char *script, const char *const *args, const char *const *env, FILE *echo,
                               bench_peer **out) {
  *out = NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", GIANT_BENCH_DIR, script);
  /* argv is built before fork: a rank may have threads, and the child runs
   * only async-signal-safe calls until exec. */
  const char *argv[MAX_ARGS + 3] = {bench_python(), path};
  int argc = 2;
  for (; args && args[argc - 2]; argc++) {
    if (argc - 2 >= MAX_ARGS) return gt_errorf(GT_EINVAL, "bench_peer: more than %d arguments", MAX_ARGS);
    argv[argc] = args[argc - 2];
  }
  argv[argc] = NULL;
  /* The environment too: this process's, less the names env sets, then env. */
  int nenv = 0, nover = 0;
  while (environ[nenv]) nenv++;
  while (env && env[nover]) nover++;
  const char **envp = calloc((size_t)(nenv + nover + 1), sizeof *envp);
  if (!envp) return gt_errorf(GT_ENOMEM, "out of memory");
  int k = 0;
  for (int i = 0; i < nenv; i++) {
    bool replaced = false;
    for (int j = 0; j < nover && !replaced; j++) {
      size_t len = strcspn(env[j], "=");
      replaced = !strncmp(environ[i], env[j], len) && environ[i][len] == '=';
    }
    if (!replaced) envp[k++] = environ[i];
  }
  for (int j = 0; j < nover; j++) envp[k++] = env[j];
  envp[k] = NULL;
  int in[2], outp[2];
  if (pipe(in)) {
    free(envp);
    return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  }
  if (pipe(outp)) {
    close(in[0]);
    close(in[1]);
    free(envp);
    return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  }
  /* Not inherited by other children of this process (dup2 clears it). */
  for (int i = 0; i < 2; i++) {
    fcntl(in[i], F_SETFD, FD_CLOEXEC);
    fcntl(outp[i], F_SETFD, FD_CLOEXEC);
  }
  bench_peer *p = calloc(1, sizeof *p);
  pid_t pid = p ? fork() : -1;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(outp[1], 1);
    execvpe(argv[0], (char *const *)argv, (char *const *)envp);
    _exit(127);
  }
  free(envp);
  close(in[0]);
  close(outp[1]);
  if (pid < 0) {
    const char *why = p ? strerror(errno) : "out of memory";
    close(in[1]);
    close(outp[0]);
    free(p);
    return gt_errorf(GT_EIO, "cannot start %s: %s", argv[0], why);
  }
  p->pid = pid;
  p->to = fdopen(in[1], "w");
  p->from = fdopen(outp[0], "r");
  if (!p->to || !p->from) {
    reap(p);
    return gt_errorf(GT_ENOMEM, "out of memory opening the pipes to %s", script);
  }
  char line[1024];
  while (fgets(line, sizeof line, p->from)) {
    if (!strcmp(line, "ready\n")) {
      *out = p;
      return GT_OK;
    }
    if (echo) fputs(line, echo);
  }
  int code = reap(p);
  return gt_errorf(GT_EUNSUPPORTED, "%s %s did not start: %s", argv[0], script,
                   code == 3     ? "python3-torch is not installed"
                   : code == 127 ? "python3 cannot be run"
                                 : "it ended before it was ready (its error is above)");
}

gt_status bench_peer_ask(bench_peer *p, const char *cmd, char *line, size_t cap) {
  if (fprintf(p->to, "%s\n", cmd) < 0 || fflush(p->to) != 0)
    return gt_errorf(GT_EIO, "the python peer no longer reads its commands");
  if (!fgets(line, (int)cap, p->from)) return gt_errorf(GT_EIO, "the python peer exited at '%s'", cmd);
  line[strcspn(line, "\n")] = '\0';
  return GT_OK;
}

gt_status bench_peer_read(bench_peer *p, char *line, size_t cap) {
  if (!fgets(line, (int)cap, p->from)) return gt_errorf(GT_EIO, "the python peer exited mid-answer");
  line[strcspn(line, "\n")] = '\0';
  return GT_OK;
}

pid_t bench_peer_pid(const bench_peer *p) { return p->pid; }

void bench_peer_stop(bench_peer *p) {
  if (p) reap(p);
}
