/* See harness.h. */
#include "comm/harness.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

int harness_rank = -1;
static int store_port;

void *harness_shared(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    abort();
  }
  memset(p, 0, bytes);
  return p;
}

gt_store *harness_store(void) {
  gt_store_tcp_config cfg = {.host = "127.0.0.1", .port = store_port, .secret = HARNESS_SECRET,
                             .timeout_ms = 10000};
  gt_store *s = NULL;
  CHECK_OK(gt_store_tcp_open(&cfg, &s));
  return s;
}

gt_comm *harness_comm(gt_store *s, const char *prefix, int rank, int n, gt_comm_transport t,
                      int op_timeout_ms) {
  gt_comm_config cfg = {.store = s, .prefix = prefix, .rank = rank, .size = n,
                        .secret = HARNESS_SECRET, .host = "127.0.0.1", .transport = t,
                        .init_timeout_ms = 20000, .op_timeout_ms = op_timeout_ms};
  gt_comm *c = NULL;
  CHECK_OK(gt_comm_init(&cfg, &c));
  return c;
}

int harness_run(int n, harness_fn fn, void *arg, double timeout_s, int *codes) {
  if (n < 1 || n > HARNESS_MAX) return n;
  gt_store_tcp_config cfg = {.host = "127.0.0.1", .port = 0, .is_host = true,
                             .secret = HARNESS_SECRET, .timeout_ms = 5000};
  gt_store *server = NULL;
  if (gt_store_tcp_open(&cfg, &server) != GT_OK) {
    fprintf(stderr, "harness: cannot start the store: %s\n", gt_last_error());
    return n;
  }
  store_port = gt_store_tcp_port(server);
  pid_t pids[HARNESS_MAX];
  fflush(stdout), fflush(stderr);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      harness_rank = r;
      gt_log_set_rank(r);
      int code = fn(r, n, arg);
      fflush(stdout), fflush(stderr);
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
          is_stopped[r] = true, stopped++;
          continue;
        }
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : RANK_KILLED_BY(WTERMSIG(status));
        pids[r] = 0, left--;
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
  gt_store_destroy(server);
  int bad = 0;
  for (int r = 0; r < n; r++) bad += codes[r] != RANK_OK;
  return bad;
}
