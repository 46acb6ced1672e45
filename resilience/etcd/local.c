/* An etcd server run by this process (resilience/etcd/local.h): the one starter
 * of giantrun --standalone, tests/localkit and the chaos suite.
 *
 * Waiting for a server to serve is waiting on two events: its log growing
 * (inotify; the log is scanned from where it stood at the start for etcd's
 * "ready to serve client requests") and its exit (a pidfd). Where either is
 * not to be had, the same loop polls every 20 ms instead. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resilience/etcd/local.h"
#include "giant/log.h"
#include "giant/engine/etcd.h"

#define READY_LINE "ready to serve client requests"
/* How long gt_etcd_local_signal waits for every thread of a server to stop
 * after SIGSTOP: they stop as each is scheduled, in ms on loaded cores. */
#define STOP_WAIT_S 15
/* The poll period where an event source is missing, and the longest wait
 * on the events (a safety net for file systems whose inotify is silent). */
#define POLL_MS 20
#define EVENT_POLL_MAX_MS 250

extern char **environ;

gt_status gt_etcd_local_find(char *path, size_t cap) {
  if (!path || cap < sizeof "/usr/bin/etcd")
    return gt_errorf(GT_EINVAL, "gt_etcd_local_find: give a buffer of at least %zu bytes", sizeof "/usr/bin/etcd");
  const char *env = getenv("PATH");
  for (const char *p = env ? env : ""; *p;) {
    const char *colon = strchr(p, ':');
    size_t k = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(path, cap, "%.*s/etcd", (int)k, p);
    if (k && access(path, X_OK) == 0) return GT_OK;
    p = colon ? colon + 1 : p + k;
  }
  snprintf(path, cap, "/usr/bin/etcd");
  if (access(path, X_OK) == 0) return GT_OK;
  return gt_errorf(GT_ENOTFOUND, "no etcd server on PATH nor at /usr/bin/etcd: install Debian's etcd-server");
}

int gt_etcd_local_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* ---- the command line ------------------------------------------------------ */

enum { MAX_ARGS = 96 };

typedef struct argv_builder {
  char *v[MAX_ARGS + 1];
  int n;
  bool failed;
} argv_builder;

static void add_arg(argv_builder *b, const char *flag, const char *value) {
  if (b->failed) return;
  if (b->n == MAX_ARGS) {
    b->failed = true;
    return;
  }
  char *s = NULL;
  if (value) {
    if (asprintf(&s, "%s=%s", flag, value) < 0) s = NULL;
  } else {
    s = strdup(flag);
  }
  if (!s) {
    b->failed = true;
    return;
  }
  b->v[b->n] = s;
  b->n++;
  b->v[b->n] = NULL;
}

static void free_args(argv_builder *b) {
  for (int i = 0; i < b->n; i++) free(b->v[i]);
  b->n = 0;
}

static gt_status build_args(const gt_etcd_local_config *c, const char *bin, argv_builder *b) {
  memset(b, 0, sizeof *b);
  if (c->netns) {
    add_arg(b, "ip", NULL);
    add_arg(b, "netns", NULL);
    add_arg(b, "exec", NULL);
    add_arg(b, c->netns, NULL);
    add_arg(b, bin, NULL);
  } else {
    add_arg(b, "etcd", NULL);
  }
  const char *peers = c->advertise_peer_urls ? c->advertise_peer_urls : c->listen_peer_urls;
  char *alone = NULL;
  if (!c->initial_cluster && asprintf(&alone, "%s=%s", c->name, peers) < 0) {
    free_args(b);
    return gt_errorf(GT_ENOMEM, "out of memory building etcd's command line");
  }
  add_arg(b, "--name", c->name);
  add_arg(b, "--data-dir", c->data_dir);
  add_arg(b, "--listen-client-urls", c->listen_client_urls);
  add_arg(b, "--advertise-client-urls", c->advertise_client_urls ? c->advertise_client_urls : c->listen_client_urls);
  add_arg(b, "--listen-peer-urls", c->listen_peer_urls);
  add_arg(b, "--initial-advertise-peer-urls", peers);
  add_arg(b, "--initial-cluster", c->initial_cluster ? c->initial_cluster : alone);
  free(alone);
  if (c->initial_cluster_token) add_arg(b, "--initial-cluster-token", c->initial_cluster_token);
  if (c->initial_cluster_state) add_arg(b, "--initial-cluster-state", c->initial_cluster_state);
  if (c->cert_file) {
    add_arg(b, "--cert-file", c->cert_file);
    add_arg(b, "--key-file", c->key_file);
  }
  if (c->trusted_ca_file) {
    add_arg(b, "--trusted-ca-file", c->trusted_ca_file);
    add_arg(b, "--client-cert-auth", NULL);
  }
  if (c->peer_cert_file) {
    add_arg(b, "--peer-cert-file", c->peer_cert_file);
    add_arg(b, "--peer-key-file", c->peer_key_file);
  }
  if (c->peer_trusted_ca_file) {
    add_arg(b, "--peer-trusted-ca-file", c->peer_trusted_ca_file);
    add_arg(b, "--peer-client-cert-auth", NULL);
  }
  for (int i = 0; c->extra_args && c->extra_args[i]; i++) add_arg(b, c->extra_args[i], NULL);
  if (b->failed) {
    free_args(b);
    return gt_errorf(GT_ENOMEM, "etcd's command line: out of memory, or more than %d words", MAX_ARGS);
  }
  return GT_OK;
}

static gt_status check_config(const gt_etcd_local_config *c) {
  if (!c) return gt_errorf(GT_EINVAL, "etcd server: no configuration");
  const char *missing = !c->name                 ? "a name"
                        : !c->data_dir           ? "a data directory"
                        : !c->log_path           ? "a log file"
                        : !c->listen_client_urls ? "client URLs"
                        : !c->listen_peer_urls   ? "peer URLs"
                                                 : NULL;
  if (missing) return gt_errorf(GT_EINVAL, "etcd server: the configuration lacks %s", missing);
  if (!c->cert_file != !c->key_file || !c->peer_cert_file != !c->peer_key_file)
    return gt_errorf(GT_EINVAL, "etcd server %s: a certificate needs its key, and a key its certificate", c->name);
  if ((c->trusted_ca_file && !c->cert_file) || (c->peer_trusted_ca_file && !c->peer_cert_file))
    return gt_errorf(GT_EINVAL, "etcd server %s: checking certificates of a CA needs TLS (a certificate and key)",
                     c->name);
  return GT_OK;
}

/* ---- waiting --------------------------------------------------------------- */

static int pidfd_of(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  return -1;
#endif
}

/* Reads what the log gained since the last call and looks for the ready
 * line; `carry` keeps the end of the last read, in case the line straddles
 * two. 1 when found. */
typedef struct log_scan {
  int fd;
  char carry[sizeof READY_LINE];
  size_t ncarry;
} log_scan;

static int scan_log(log_scan *s) {
  char buf[sizeof READY_LINE + 8192];
  for (;;) {
    memcpy(buf, s->carry, s->ncarry);
    ssize_t got = read(s->fd, buf + s->ncarry, sizeof buf - s->ncarry);
    if (got <= 0) return 0;
    size_t n = s->ncarry + (size_t)got;
    if (memmem(buf, n, READY_LINE, sizeof READY_LINE - 1)) return 1;
    s->ncarry = n < sizeof READY_LINE - 1 ? n : sizeof READY_LINE - 1;
    memcpy(s->carry, buf + n - s->ncarry, s->ncarry);
  }
}

static void drain(int fd) {
  char buf[4096];
  while (fd >= 0 && read(fd, buf, sizeof buf) > 0) continue;
}

/* Waits at most timeout_s for an event on fd1 or fd2 (-1: none). Without
 * every source of events the caller needs (`complete` false), at most
 * POLL_MS: the caller then polls. */
static void wait_events(int fd1, int fd2, bool complete, double timeout_s) {
  struct pollfd p[2];
  nfds_t n = 0;
  if (fd1 >= 0) {
    p[n] = (struct pollfd){.fd = fd1, .events = POLLIN};
    n++;
  }
  if (fd2 >= 0) {
    p[n] = (struct pollfd){.fd = fd2, .events = POLLIN};
    n++;
  }
  int cap = complete ? EVENT_POLL_MAX_MS : POLL_MS;
  double ms = timeout_s * 1e3;
  int t = ms < cap ? (int)ms + 1 : cap;
  poll(p, n, t);
}

static gt_status exited(gt_etcd_local *srv, int status, const char *log_path) {
  srv->pid = 0;
  srv->exited = true;
  srv->exit_status = status;
  if (WIFSIGNALED(status))
    return gt_errorf(GT_EIO, "etcd was killed by signal %d while starting (its log: %s)", WTERMSIG(status), log_path);
  return gt_errorf(GT_EIO, "etcd exited with status %d while starting (its log: %s)",
                   WIFEXITED(status) ? WEXITSTATUS(status) : status, log_path);
}

static gt_status wait_ready(gt_etcd_local *srv, const gt_etcd_local_config *c, off_t offset, int ifd) {
  log_scan s = {.fd = open(c->log_path, O_RDONLY | O_CLOEXEC)};
  if (s.fd >= 0 && lseek(s.fd, offset, SEEK_SET) < 0) {
    close(s.fd);
    s.fd = -1;
  }
  int pfd = pidfd_of(srv->pid);
  gt_status st = GT_ETIMEDOUT;
  double deadline = gt_now() + c->ready_timeout_s;
  for (;;) {
    drain(ifd);
    if (s.fd >= 0 && scan_log(&s)) {
      st = GT_OK;
      break;
    }
    int status;
    if (waitpid(srv->pid, &status, WNOHANG) == srv->pid) {
      st = exited(srv, status, c->log_path);
      break;
    }
    double left = deadline - gt_now();
    if (left <= 0) break;
    wait_events(s.fd >= 0 ? ifd : -1, pfd, s.fd >= 0 && ifd >= 0 && pfd >= 0, left);
  }
  if (s.fd >= 0) close(s.fd);
  if (pfd >= 0) close(pfd);
  if (st == GT_ETIMEDOUT) {
    kill(srv->pid, SIGKILL);
    waitpid(srv->pid, NULL, 0);
    srv->pid = 0;
    st = gt_errorf(GT_ETIMEDOUT, "etcd did not serve within %.0f s (its log: %s)", c->ready_timeout_s, c->log_path);
  }
  return st;
}

/* ---- starting and stopping ------------------------------------------------- */

gt_status gt_etcd_local_start(const gt_etcd_local_config *c, gt_etcd_local *srv) {
  srv->pid = 0;
  srv->exited = false;
  srv->exit_status = 0;
  GT_TRY(check_config(c));
  char found[PATH_MAX];
  const char *bin = c->bin;
  if (!bin) {
    GT_TRY(gt_etcd_local_find(found, sizeof found));
    bin = found;
  }
  argv_builder args;
  GT_TRY(build_args(c, bin, &args));
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (c->log_truncate ? O_TRUNC : 0);
  int fd = open(c->log_path, flags, 0644);
  if (fd < 0) {
    gt_status st =
        gt_errorf(GT_EIO, "etcd server %s: cannot write its log %s: %s", c->name, c->log_path, strerror(errno));
    free_args(&args);
    return st;
  }
  struct stat lst;
  off_t offset = fstat(fd, &lst) == 0 ? lst.st_size : 0;
  /* Watched before the fork, so that no line of the server's is missed. */
  int ifd = c->ready_timeout_s > 0 ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
  if (ifd >= 0 && inotify_add_watch(ifd, c->log_path, IN_MODIFY) < 0) {
    close(ifd);
    ifd = -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    gt_status st = gt_errorf(GT_EIO, "etcd server %s: fork: %s", c->name, strerror(errno));
    close(fd);
    if (ifd >= 0) close(ifd);
    free_args(&args);
    return st;
  }
  if (pid == 0) {
    if (c->own_process_group) setpgid(0, 0);
    if (c->die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127); /* the parent is already gone */
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(fd, 1);
    dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    if (c->netns)
      execvp("ip", args.v);
    else
      execve(bin, args.v, environ);
    dprintf(2, "cannot run %s: %s\n", c->netns ? "ip netns exec" : bin, strerror(errno));
    _exit(127);
  }
  close(fd);
  free_args(&args);
  srv->pid = pid;
  gt_status st = GT_OK;
  if (c->ready_timeout_s > 0) st = wait_ready(srv, c, offset, ifd);
  if (ifd >= 0) close(ifd);
  return st;
}

gt_status gt_etcd_local_signal(gt_etcd_local *srv, int sig) {
  if (srv->pid <= 0) return gt_errorf(GT_EINVAL, "etcd is not running");
  if (kill(srv->pid, sig) != 0)
    return gt_errorf(GT_EIO, "cannot signal etcd (pid %d): %s", (int)srv->pid, strerror(errno));
  if (sig == SIGKILL) {
    waitpid(srv->pid, NULL, 0);
    srv->pid = 0;
  } else if (sig == SIGSTOP) {
    /* kill() only queues the stop: etcd's threads stop one after another
     * as each is scheduled, and one still running can answer a request
     * meanwhile. The parent hears of the stop once every thread is; no
     * event says so sooner than a poll of waitpid. */
    double deadline = gt_now() + STOP_WAIT_S;
    int status;
    for (;;) {
      pid_t w = waitpid(srv->pid, &status, WNOHANG | WUNTRACED);
      if (w == srv->pid && WIFSTOPPED(status)) break;
      if (w == srv->pid) {
        srv->pid = 0;
        return gt_errorf(GT_EIO, "etcd exited instead of stopping");
      }
      if (gt_now() > deadline) return gt_errorf(GT_ETIMEDOUT, "etcd did not stop within %d s of SIGSTOP", STOP_WAIT_S);
      poll(NULL, 0, 2);
    }
  }
  return GT_OK;
}

void gt_etcd_local_stop(gt_etcd_local *srv, double grace_s) {
  if (srv->pid <= 0) return;
  pid_t pid = srv->pid;
  kill(pid, SIGCONT); /* a stopped server would hold SIGTERM pending */
  bool reaped = false;
  if (grace_s > 0) {
    int pfd = pidfd_of(pid);
    kill(pid, SIGTERM);
    double deadline = gt_now() + grace_s;
    for (;;) {
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        reaped = true;
        break;
      }
      double left = deadline - gt_now();
      if (left <= 0) break;
      wait_events(pfd, -1, pfd >= 0, left);
    }
    if (pfd >= 0) close(pfd);
  }
  if (!reaped) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  srv->pid = 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

gt_status gt_etcd_local_remove(const char *dir) {
  struct stat st;
  if (!dir || !*dir || (lstat(dir, &st) != 0 && errno == ENOENT)) return GT_OK;
  if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    return gt_errorf(GT_EIO, "cannot remove %s: %s", dir, strerror(errno));
  return GT_OK;
}

gt_status gt_etcd_local_wait_serving(const gt_etcd_config *cfg, double timeout_s) {
  gt_etcd_config c = *cfg;
  if (c.timeout_ms <= 0) c.timeout_ms = 1000;
  gt_etcd_client *client = NULL;
  GT_TRY(gt_etcd_connect(&c, &client));
  bool ok = false;
  for (double end = gt_now() + timeout_s; !ok && gt_now() < end;) {
    gt_etcd_kvs kvs;
    /* A linearizable read needs a leader and a quorum. A try that fails
     * fast (a refused connection) is tried again 100 ms on. */
    if (gt_etcd_get(client, "/gt-etcd-local/serving", NULL, &kvs) == GT_OK) {
      ok = true;
      gt_etcd_kvs_free(&kvs);
    } else {
      poll(NULL, 0, 100);
    }
  }
  gt_etcd_close(client);
  if (!ok) return gt_errorf(GT_ETIMEDOUT, "etcd at %s did not serve within %.0f s", cfg->endpoints, timeout_s);
  return GT_OK;
}

size_t gt_etcd_local_log_tail(const char *path, char *out, size_t cap) {
  if (cap == 0) return 0;
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = 0;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    long from = size > (long)(cap - 1) ? size - (long)(cap - 1) : 0;
    if (size >= 0 && fseek(f, from, SEEK_SET) == 0) n = fread(out, 1, cap - 1, f);
  }
  out[n] = '\0';
  fclose(f);
  return n;
}
