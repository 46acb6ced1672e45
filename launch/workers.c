/* The workers of one round: spawned in their own process groups (so a
 * terminal's Ctrl-C reaches the agent, which stops them in order), killed
 * with the agent (PR_SET_PDEATHSIG), their output prefixed with the rank. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "giant/protocol.h"
#include "launch/agent.h"
#include "launch/keeper.h"
#include "resilience/rdzv/rdzv.h"

/* Here, in the agent's layer, not in giantrun's main(): the parts of the
 * agent that wait (the Slurm etcd's hand-over, the workers) read it, and
 * programs other than giantrun link them (the option parser's fuzzer). */
volatile sig_atomic_t agent_stop_signal = 0;

extern char **environ;

#define LINE_MAX_BYTES 65536

static const char *const our_vars[] = {GT_ENV_RANK "=",
                                       GT_ENV_LOCAL_RANK "=",
                                       GT_ENV_WORLD_SIZE "=",
                                       GT_ENV_LOCAL_WORLD_SIZE "=",
                                       GT_ENV_NODE_RANK "=",
                                       GT_ENV_NNODES "=",
                                       GT_ENV_GENERATION "=",
                                       GT_ENV_RESTART_COUNT "=",
                                       GT_ENV_JOB_ID "=",
                                       GT_ENV_STORE "=",
                                       GT_ENV_STORE_CACERT "=",
                                       GT_ENV_STORE_CERT "=",
                                       GT_ENV_STORE_KEY "=",
                                       GT_ENV_STORE_USER "=",
                                       GT_ENV_STORE_PASSWORD_FILE "=",
                                       GT_ENV_JOB_SECRET "=",
                                       GT_ENV_PLAN "=",
                                       GT_ENV_COMM_INTEGRITY "=",
                                       GT_ENV_COMM_PORTS "=",
                                       GT_ENV_COMM_ENCRYPT "=",
                                       GT_ENV_NODE_ID "=",
                                       GT_ENV_COMM_HOST "=",
                                       GT_ENV_PROGRESS_FD "=",
                                       GT_ENV_CKPT_DIR "=",
                                       GT_ENV_CKPT_EVERY "=",
                                       GT_ENV_CKPT_KEEP "=",
                                       GT_ENV_COORD "=",
                                       GT_ENV_RESHAPE "=",
                                       GT_ENV_JOIN "=",
                                       NULL};

static int ours(const char *e) {
  for (int i = 0; our_vars[i]; i++)
    if (!strncmp(e, our_vars[i], strlen(our_vars[i]))) return 1;
  return 0;
}

/* "NAME=value" strings; the last NULL. Built before fork: the child of a
 * threaded process may only make async-signal-safe calls before exec. */
typedef struct env_list {
  char **v;
  int n, cap;
} env_list;

static int env_add(env_list *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int env_add(env_list *e, const char *fmt, ...) {
  if (e->n + 2 > e->cap) {
    int cap = e->cap ? 2 * e->cap : 64;
    char **v = realloc(e->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    e->v = v;
    e->cap = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  int r = vasprintf(&e->v[e->n], fmt, ap);
  va_end(ap);
  if (r < 0) return -1;
  e->v[++e->n] = NULL;
  return 0;
}

static void env_free(env_list *e) {
  for (int i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
}

static int make_env(env_list *e, const agent_opts *o, const gt_rdzv_round *r, int local, int progress_fd) {
  int bad = 0;
  for (char **p = environ; *p; p++)
    if (!ours(*p)) bad |= env_add(e, "%s", *p);
  char eps[1024];
  /* GT_STORE lists plain HOST:PORT; "etcds://" says TLS, as https:// did. */
  int tls = strstr(o->endpoint, "https://") != NULL;
  size_t k = 0;
  for (const char *s = o->endpoint; *s && k + 1 < sizeof eps;) {
    if (!strncmp(s, "http://", 7))
      s += 7;
    else if (!strncmp(s, "https://", 8))
      s += 8;
    while (*s && *s != ',' && k + 1 < sizeof eps) eps[k++] = *s++;
    if (*s == ',' && k + 1 < sizeof eps) eps[k++] = *s++;
  }
  eps[k] = 0;
  bad |= env_add(e, GT_ENV_RANK "=%d", r->rank_base + local);
  bad |= env_add(e, GT_ENV_LOCAL_RANK "=%d", local);
  bad |= env_add(e, GT_ENV_WORLD_SIZE "=%d", r->world_size);
  bad |= env_add(e, GT_ENV_LOCAL_WORLD_SIZE "=%d", r->nproc);
  bad |= env_add(e, GT_ENV_NODE_RANK "=%d", r->node_rank);
  bad |= env_add(e, GT_ENV_NNODES "=%d", r->nnodes);
  bad |= env_add(e, GT_ENV_GENERATION "=%ld", r->generation);
  bad |= env_add(e, GT_ENV_RESTART_COUNT "=%d", r->restarts);
  bad |= env_add(e, GT_ENV_JOB_ID "=%s", o->job_id);
  bad |= env_add(e, GT_ENV_NODE_ID "=%s", o->node_id);
  bad |= env_add(e, GT_ENV_STORE "=%s://%s%s", tls ? "etcds" : "etcd", eps, r->store_prefix);
  bad |= env_add(e, GT_ENV_JOB_SECRET "=%s", r->secret);
  if (o->cacert) bad |= env_add(e, GT_ENV_STORE_CACERT "=%s", o->cacert);
  if (o->cert) bad |= env_add(e, GT_ENV_STORE_CERT "=%s", o->cert);
  if (o->key) bad |= env_add(e, GT_ENV_STORE_KEY "=%s", o->key);
  /* The password's file, not the password: the environment is easier to
   * leak (a core dump, a debugger, a child's error report) than a file of
   * mode 0600. */
  if (o->user) bad |= env_add(e, GT_ENV_STORE_USER "=%s", o->user);
  if (o->password_file) bad |= env_add(e, GT_ENV_STORE_PASSWORD_FILE "=%s", o->password_file);
  if (o->plan) bad |= env_add(e, GT_ENV_PLAN "=%s", o->plan);
  if (o->comm_integrity) bad |= env_add(e, GT_ENV_COMM_INTEGRITY "=%s", o->comm_integrity);
  if (o->comm_ports) bad |= env_add(e, GT_ENV_COMM_PORTS "=%d-%d", o->ports.lo, o->ports.hi);
  if (o->comm_encrypt) bad |= env_add(e, GT_ENV_COMM_ENCRYPT "=1");
  /* The node's address (agent_comm_addr), in place of one inherited. */
  if (o->comm_addr[0]) bad |= env_add(e, GT_ENV_COMM_HOST "=%s", o->comm_addr);
  if (o->reshape) bad |= env_add(e, GT_ENV_RESHAPE "=1");
  bad |= env_add(e, GT_ENV_PROGRESS_FD "=%d", progress_fd);
  bad |= env_add(e, GT_ENV_COORD "=" GT_COORD_LEADER); /* the agents campaign: a leader decides mitigation */
  if (o->ckpt_dir) bad |= env_add(e, GT_ENV_CKPT_DIR "=%s", o->ckpt_dir);
  if (o->ckpt_every) bad |= env_add(e, GT_ENV_CKPT_EVERY "=%d", o->ckpt_every);
  if (o->ckpt_keep) bad |= env_add(e, GT_ENV_CKPT_KEEP "=%d", o->ckpt_keep);
  return bad;
}

static int mkdirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int r = mkdir(path, 0755);
    *p = '/';
    if (r != 0 && errno != EEXIST) return -1;
  }
  return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static gt_status open_log(worker *w, const agent_opts *o, long gen) {
  if (!o->log_dir) return GT_OK;
  char dir[PATH_MAX], path[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s/%s/gen%ld", o->log_dir, o->job_id, gen);
  if (mkdirs(dir) != 0) return gt_errorf(GT_EIO, "cannot make log directory %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/rank%d.log", dir, w->rank);
  w->log = fopen(path, "w");
  if (!w->log) return gt_errorf(GT_EIO, "cannot write log file %s: %s", path, strerror(errno));
  return GT_OK;
}

/* prog[1] is the write end of the progress pipe, which the worker keeps
 * (its number is in GT_PROGRESS_FD); every other pipe end is close-on-exec. */
static gt_status spawn(worker *w, const agent_opts *o, char **envp, int prog[2]) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  }
  pid_t agent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    return gt_errorf(GT_EIO, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    /* Die with the agent, even when it is killed with SIGKILL. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    dup2(out[1], 1);
    dup2(err[1], 2);
    fcntl(prog[1], F_SETFD, 0);
    execve(o->prog_path, o->prog_argv, envp);
    static const char msg[] = "giantrun: exec of the worker program failed\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(127);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no race with a signal sent right away */
  keeper_add(pid);
  close(out[1]);
  close(err[1]);
  w->pid = pid;
  w->fd[0] = out[0];
  w->fd[1] = err[0];
  w->fd[2] = prog[0];
  prog[0] = -1;
  for (int s = 0; s < 3; s++) fcntl(w->fd[s], F_SETFL, O_NONBLOCK);
  return GT_OK;
}

gt_status workers_start(worker_group *g, const agent_opts *o, const gt_rdzv_round *r) {
  memset(g, 0, sizeof *g);
  g->generation = r->generation;
  g->w = calloc((size_t)r->nproc, sizeof *g->w);
  if (!g->w) return gt_errorf(GT_ENOMEM, "out of memory");
  for (int i = 0; i < r->nproc; i++) {
    worker *w = &g->w[i];
    w->rank = r->rank_base + i;
    w->fd[0] = w->fd[1] = w->fd[2] = -1;
    w->exited = 1; /* until spawned */
    g->n = i + 1;
    int prog[2];
    if (pipe2(prog, O_CLOEXEC) != 0) return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
    env_list e = {0};
    /* A node rejoining a running round: its workers ask to join it. */
    gt_status st = make_env(&e, o, r, i, prog[1]) || (r->rejoin && env_add(&e, GT_ENV_JOIN "=1"))
                       ? gt_errorf(GT_ENOMEM, "out of memory")
                       : GT_OK;
    if (st == GT_OK) st = open_log(w, o, r->generation);
    if (st == GT_OK) st = spawn(w, o, e.v, prog);
    env_free(&e);
    if (prog[0] >= 0) close(prog[0]);
    close(prog[1]);
    if (st != GT_OK) return st; /* the caller stops what started */
    w->exited = 0;
  }
  return GT_OK;
}

static void close_stream(worker *w, int s);

gt_status workers_respawn(worker_group *g, int i, const agent_opts *o, const gt_rdzv_round *r) {
  worker *w = &g->w[i];
  if (!w->exited) return gt_errorf(GT_ESTATE, "worker rank %d still runs", w->rank);
  for (int s = 0; s < 3; s++)
    if (w->fd[s] >= 0) close_stream(w, s);
  FILE *log = w->log;
  int rank = w->rank;
  *w = (worker){.rank = rank, .fd = {-1, -1, -1}, .exited = 1, .log = log};
  int prog[2];
  if (pipe2(prog, O_CLOEXEC) != 0) return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  env_list e = {0};
  gt_status st =
      make_env(&e, o, r, i, prog[1]) || env_add(&e, GT_ENV_JOIN "=1") ? gt_errorf(GT_ENOMEM, "out of memory") : GT_OK;
  if (st == GT_OK) st = spawn(w, o, e.v, prog);
  env_free(&e);
  if (prog[0] >= 0) close(prog[0]);
  close(prog[1]);
  if (st == GT_OK) w->exited = 0;
  return st;
}

static void emit(worker *w, int stream, const char *text, size_t len) {
  FILE *f = stream == 0 ? stdout : stderr;
  fprintf(f, "[rank %d] %.*s\n", w->rank, (int)len, text);
  fflush(f);
  if (w->log) {
    fprintf(w->log, "%.*s\n", (int)len, text);
    fflush(w->log);
  }
}

/* Splits what arrived into lines; a line longer than LINE_MAX_BYTES is cut. */
static void take(worker *w, int stream, const char *data, size_t n) {
  line_buf *lb = &w->line[stream];
  for (size_t i = 0; i < n; i++) {
    if (data[i] == '\n') {
      emit(w, stream, lb->buf ? lb->buf : "", lb->len);
      lb->len = 0;
      continue;
    }
    if (!lb->buf) {
      lb->buf = malloc(LINE_MAX_BYTES);
      if (!lb->buf) return;
    }
    if (lb->len == LINE_MAX_BYTES) {
      emit(w, stream, lb->buf, lb->len);
      lb->len = 0;
    }
    lb->buf[lb->len++] = data[i];
  }
}

static void close_stream(worker *w, int s) {
  /* A worker that closed its progress pipe (gt_job_destroy) reports no more
   * steps: it is no longer watched for hangs. */
  if (s == 2) w->step_at = 0;
  if (s < 2) {
    line_buf *lb = &w->line[s];
    if (lb->len) emit(w, s, lb->buf, lb->len);
    free(lb->buf);
    lb->buf = NULL;
    lb->len = 0;
  }
  close(w->fd[s]);
  w->fd[s] = -1;
}

static void reap(worker_group *g) {
  for (int i = 0; i < g->n; i++) {
    worker *w = &g->w[i];
    if (w->exited) continue;
    int status;
    pid_t p = waitpid(w->pid, &status, WNOHANG);
    if (p == w->pid) {
      w->exited = 1;
      w->status = status;
      /* Anything the worker left behind in its group goes with it. */
      kill(-w->pid, SIGKILL);
      keeper_remove(w->pid);
    }
  }
}

void workers_pump(worker_group *g, int timeout_ms) {
  /* Three pipes per worker; a node may run thousands of workers. */
  struct pollfd *pf = calloc((size_t)(3 * g->n + 1), sizeof *pf);
  int *who = calloc((size_t)(3 * g->n + 1), sizeof *who);
  int n = 0;
  for (int i = 0; pf && who && i < g->n; i++)
    for (int s = 0; s < 3; s++)
      if (g->w[i].fd[s] >= 0) {
        pf[n] = (struct pollfd){.fd = g->w[i].fd[s], .events = POLLIN};
        who[n++] = 3 * i + s;
      }
  if (n > 0) {
    if (poll(pf, (nfds_t)n, timeout_ms) > 0) {
      char buf[8192];
      for (int k = 0; k < n; k++) {
        if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        worker *w = &g->w[who[k] / 3];
        int s = who[k] % 3;
        ssize_t r = read(w->fd[s], buf, sizeof buf);
        if (r > 0 && s == 2) {
          progress_take(w, (const unsigned char *)buf, (size_t)r);
          if (w->step_at > 0) g->stepped = 1;
        } else if (r > 0)
          take(w, s, buf, (size_t)r);
        else if (r == 0 || (errno != EAGAIN && errno != EINTR))
          close_stream(w, s);
      }
    }
  } else if (timeout_ms > 0) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  free(pf);
  free(who);
  reap(g);
}

int workers_failed_index(const worker_group *g) {
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (!w->exited || w->pid == 0 || w->released) continue;
    if (WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0) continue;
    return i;
  }
  return -1;
}

int workers_any_running(const worker_group *g) {
  for (int i = 0; i < g->n; i++)
    if (!g->w[i].exited && !g->w[i].released) return 1;
  return 0;
}

int workers_failed(const worker_group *g, char *why, size_t n) {
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (!w->exited || w->pid == 0 || w->released) continue;
    if (WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0) continue;
    if (WIFSIGNALED(w->status))
      snprintf(why, n, "worker rank %d (pid %ld) was killed by signal %d", w->rank, (long)w->pid, WTERMSIG(w->status));
    else
      snprintf(why, n, "worker rank %d (pid %ld) exited with status %d", w->rank, (long)w->pid, WEXITSTATUS(w->status));
    return 1;
  }
  return 0;
}

int workers_any_stepped(const worker_group *g) { return g->stepped; }

int workers_fatal(const worker_group *g, char *why, size_t n) {
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (!w->exited || w->pid == 0 || !WIFEXITED(w->status)) continue;
    int c = WEXITSTATUS(w->status);
    if (c != WORKER_EXIT_USAGE && c != WORKER_EXIT_INPUT && c != WORKER_EXIT_DIVERGED && c != WORKER_EXIT_NOEXEC &&
        c != WORKER_EXIT_NOTFOUND)
      continue;
    snprintf(why, n, "worker rank %d (pid %ld) exited with status %d, %s that a restart cannot mend", w->rank,
             (long)w->pid, c,
             c == WORKER_EXIT_INPUT      ? "bad input data"
             : c == WORKER_EXIT_DIVERGED ? "a divergence of training"
                                         : "a usage or configuration error");
    return 1;
  }
  return 0;
}

int workers_all_ok(const worker_group *g) {
  int ok = 0;
  for (int i = 0; i < g->n; i++) {
    const worker *w = &g->w[i];
    if (w->released) continue;
    if (!w->exited || w->pid == 0 || !WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0) return 0;
    ok++;
  }
  return ok > 0;
}

static int any_alive(const worker_group *g) {
  for (int i = 0; i < g->n; i++)
    if (!g->w[i].exited) return 1;
  return 0;
}

void workers_stop(worker_group *g, double grace_s) {
  if (!g->w) return;
  for (int i = 0; i < g->n; i++)
    if (!g->w[i].exited) {
      kill(-g->w[i].pid, SIGTERM);
      kill(-g->w[i].pid, SIGCONT); /* a stopped worker would hold SIGTERM pending */
    }
  double deadline = gt_now() + grace_s;
  while (any_alive(g) && gt_now() < deadline) workers_pump(g, 20);
  for (int i = 0; i < g->n; i++) {
    worker *w = &g->w[i];
    if (w->exited) continue;
    kill(-w->pid, SIGKILL);
    if (waitpid(w->pid, &w->status, 0) == w->pid) w->exited = 1;
    keeper_remove(w->pid);
  }
  /* Output still in the pipes; a grandchild outside the group could hold a
   * pipe open, so draining is bounded. */
  double drain = gt_now() + 1.0;
  int open_fds = 1;
  while (open_fds && gt_now() < drain) {
    workers_pump(g, 20);
    open_fds = 0;
    for (int i = 0; i < g->n; i++) open_fds |= g->w[i].fd[0] >= 0 || g->w[i].fd[1] >= 0;
  }
  for (int i = 0; i < g->n; i++) {
    worker *w = &g->w[i];
    for (int s = 0; s < 3; s++)
      if (w->fd[s] >= 0) close_stream(w, s);
    if (w->log) fclose(w->log);
  }
  free(g->w);
  memset(g, 0, sizeof *g);
}
