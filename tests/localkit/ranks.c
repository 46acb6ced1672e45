/* See ranks.h. */
#include "localkit/ranks.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include "giant/engine/store.h"
#include "giant/engine/comm.h"

int harness_rank = -1;

/* Present when built with the leak sanitizer: ranks end with _exit, which
 * skips the at-exit leak check, so each rank runs it itself. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
static int store_port;
static char store_host[64] = "127.0.0.1";

void harness_store_host(const char *host) { snprintf(store_host, sizeof store_host, "%s", host); }

void *harness_shared(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    abort();
  }
  memset(p, 0, bytes);
  return p;
}

int harness_cuda_devices(int most) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    char why[256] = "";
    if (!gt_backend_available(GT_DEVICE_CUDA, why, sizeof why)) {
      printf("skipped: %s\n", why);
      fflush(stdout);
      _exit(0);
    }
    int n = 0;
    for (; n < most && n < 100; n++) {
      gt_backend *be = NULL;
      if (gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CUDA, .device = n}, &be) != GT_OK) break;
      gt_backend_destroy(be);
    }
    _exit(n);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

gt_store *harness_store(void) {
  gt_store_tcp_config cfg = {.host = store_host, .port = store_port, .secret = HARNESS_SECRET, .timeout_ms = 10000};
  gt_store *s = NULL;
  CHECK_OK(gt_store_tcp_open(&cfg, &s));
  return s;
}

gt_comm *harness_comm(gt_store *s, const char *prefix, int rank, int n, gt_comm_transport t, int op_timeout_ms) {
  gt_comm_config cfg = {.store = s,
                        .prefix = prefix,
                        .rank = rank,
                        .size = n,
                        .secret = HARNESS_SECRET,
                        .host = "127.0.0.1",
                        .transport = t,
                        .init_timeout_ms = 20000,
                        .op_timeout_ms = op_timeout_ms};
  gt_comm *c = NULL;
  CHECK_OK(gt_comm_init(&cfg, &c));
  return c;
}

/* The store lives in a process of its own, forked before anything else:
 * forking ranks from a process with running threads could hand a child a
 * lock some thread held (the sanitizers' allocator lock, for one). */
static pid_t start_store(int *ctl) {
  int port_pipe[2], ctl_pipe[2];
  if (pipe(port_pipe) || pipe(ctl_pipe)) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(port_pipe[0]);
    close(ctl_pipe[1]);
    gt_store_tcp_config cfg = {
        .host = store_host, .port = 0, .is_host = true, .secret = HARNESS_SECRET, .timeout_ms = 5000};
    gt_store *server = NULL;
    int port = -1;
    if (gt_store_tcp_open(&cfg, &server) == GT_OK)
      port = gt_store_tcp_port(server);
    else
      fprintf(stderr, "harness: cannot start the store: %s\n", gt_last_error());
    if (write(port_pipe[1], &port, sizeof port) != sizeof port) _exit(1);
    char b;
    while (read(ctl_pipe[0], &b, 1) > 0) {}
    gt_store_destroy(server);
    _exit(0);
  }
  close(port_pipe[1]);
  close(ctl_pipe[0]);
  int port = -1;
  if (pid < 0 || read(port_pipe[0], &port, sizeof port) != sizeof port || port <= 0) {
    close(port_pipe[0]);
    close(ctl_pipe[1]);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    return -1;
  }
  close(port_pipe[0]);
  store_port = port;
  *ctl = ctl_pipe[1];
  return pid;
}

int harness_run(int n, harness_fn fn, void *arg, double timeout_s, int *codes) {
  if (n < 1 || n > HARNESS_MAX) return n;
  int ctl = -1;
  pid_t store_pid = start_store(&ctl);
  if (store_pid < 0) return n;
  pid_t pids[HARNESS_MAX];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(ctl);
      harness_rank = r;
      gt_log_set_rank(r);
      int code = fn(r, n, arg);
      if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() && code == RANK_OK) code = RANK_FAIL;
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    codes[r] = RANK_STRAGGLER;
  }
  double deadline = gt_now() + timeout_s;
  int left = n, stopped = 0;
  bool is_stopped[HARNESS_MAX] = {0};
  while (left > stopped && gt_now() < deadline) {
    for (int r = 0; r < n; r++) {
      int status;
      if (pids[r] > 0 && !is_stopped[r] && waitpid(pids[r], &status, WNOHANG | WUNTRACED) == pids[r]) {
        if (WIFSTOPPED(status)) {
          is_stopped[r] = true;
          stopped++;
          continue;
        }
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : RANK_KILLED_BY(WTERMSIG(status));
        pids[r] = 0;
        left--;
      }
    }
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  for (int r = 0; r < n; r++) {
    if (pids[r] > 0 && is_stopped[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
      codes[r] = RANK_STOPPED;
    } else if (pids[r] > 0) {
      fprintf(stderr, "harness: rank %d still running after %.0f s: killing it\n", r, timeout_s);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
  }
  close(ctl);
  double until = gt_now() + 5;
  while (waitpid(store_pid, NULL, WNOHANG) == 0) {
    if (gt_now() > until) {
      kill(store_pid, SIGKILL);
      waitpid(store_pid, NULL, 0);
      break;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  int bad = 0;
  for (int r = 0; r < n; r++) bad += codes[r] != RANK_OK;
  return bad;
}
