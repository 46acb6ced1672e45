/* The keeper (keeper.h). It shares nothing with the agent but one pipe:
 * every other descriptor is closed, its output goes to /dev/null, and it
 * leads a session of its own, so that a signal to the agent's group or
 * terminal does not take it before it has done its work. Messages are 8
 * bytes, written whole (a pipe write of at most PIPE_BUF is atomic). */
#include "launch/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEEPER_MAX_GROUPS 1024

typedef struct msg {
  int32_t op; /* 'a' add, 'r' remove */
  int32_t pgid;
} msg;

static int keeper_fd = -1;

static void keeper_main(int fd) {
  static pid_t groups[KEEPER_MAX_GROUPS];
  int n = 0;
  for (;;) {
    msg m;
    ssize_t r = read(fd, &m, sizeof m);
    if (r < 0 && errno == EINTR) continue;
    if (r != (ssize_t)sizeof m) break; /* the agent is gone */
    if (m.op == 'a' && n < KEEPER_MAX_GROUPS && m.pgid > 1) groups[n++] = m.pgid;
    for (int i = 0; m.op == 'r' && i < n; i++)
      if (groups[i] == m.pgid) groups[i--] = groups[--n];
  }
  for (int i = 0; i < n; i++) kill(-groups[i], SIGKILL);
  _exit(0);
}

gt_status keeper_start(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return gt_errorf(GT_EIO, "keeper: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return gt_errorf(GT_EIO, "keeper: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    setsid();
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    if (dup2(p[0], 3) != 3) _exit(1);
    syscall(SYS_close_range, 4u, ~0u, 0u);
    keeper_main(3);
  }
  close(p[0]);
  keeper_fd = p[1];
  return GT_OK;
}

static void send_msg(int op, pid_t pgid) {
  if (keeper_fd < 0) return;
  msg m = {op, (int32_t)pgid};
  ssize_t r;
  do r = write(keeper_fd, &m, sizeof m);
  while (r < 0 && errno == EINTR);
}

void keeper_add(pid_t pgid) { send_msg('a', pgid); }
void keeper_remove(pid_t pgid) { send_msg('r', pgid); }
