/* Starts and stops a real etcd on loopback (see etcd_server.h). */
#include "localkit/etcd_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int etcd_fixture_available(void) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char buf[4096];
  for (const char *p = path; *p;) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/etcd", (int)n, p);
    if (access(buf, X_OK) == 0) return 1;
    p = colon ? colon + 1 : p + n;
  }
  return 0;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* 1 once the log, read from offset, says the server serves. */
static int log_says_ready(const char *path, long offset) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  fseek(f, offset, SEEK_SET);
  char line[2048];
  int ready = 0;
  while (!ready && fgets(line, sizeof line, f))
    if (strstr(line, "ready to serve client requests")) ready = 1;
  fclose(f);
  return ready;
}

static void print_log_tail(const etcd_fixture *fx) {
  char path[300];
  snprintf(path, sizeof path, "%s/etcd.log", fx->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  fseek(f, file_size(path) > 3000 ? file_size(path) - 3000 : 0, SEEK_SET);
  char buf[3001];
  size_t n = fread(buf, 1, 3000, f);
  buf[n] = 0;
  fclose(f);
  fprintf(stderr, "etcd_fixture: last lines of %s:\n%s\n", path, buf);
}

static int launch(etcd_fixture *fx) {
  char logp[300], data[300], listen_c[160], peer[80], cluster[128];
  snprintf(logp, sizeof logp, "%s/etcd.log", fx->dir);
  snprintf(data, sizeof data, "%s/data", fx->dir);
  if (fx->opts.also_listen)
    snprintf(listen_c, sizeof listen_c, "%s,http://%s:%d", fx->url, fx->opts.also_listen, fx->client_port);
  else
    snprintf(listen_c, sizeof listen_c, "%s", fx->url);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", fx->peer_port);
  snprintf(cluster, sizeof cluster, "fixture=%s", peer);
  const char *argv[64];
  int n = 0;
  argv[n++] = "etcd";
  argv[n++] = "--name=fixture";
  char a_data[320], a_lc[200], a_ac[160], a_lp[160], a_ip[160], a_ic[200];
  snprintf(a_data, sizeof a_data, "--data-dir=%s", data);
  snprintf(a_lc, sizeof a_lc, "--listen-client-urls=%s", listen_c);
  snprintf(a_ac, sizeof a_ac, "--advertise-client-urls=%s", fx->url);
  snprintf(a_lp, sizeof a_lp, "--listen-peer-urls=%s", peer);
  snprintf(a_ip, sizeof a_ip, "--initial-advertise-peer-urls=%s", peer);
  snprintf(a_ic, sizeof a_ic, "--initial-cluster=%s", cluster);
  argv[n++] = a_data;
  argv[n++] = a_lc;
  argv[n++] = a_ac;
  argv[n++] = a_lp;
  argv[n++] = a_ip;
  argv[n++] = a_ic;
  char a_cert[300], a_key[300], a_ca[300];
  if (fx->opts.cert_file) {
    snprintf(a_cert, sizeof a_cert, "--cert-file=%s", fx->opts.cert_file);
    snprintf(a_key, sizeof a_key, "--key-file=%s", fx->opts.key_file);
    argv[n++] = a_cert;
    argv[n++] = a_key;
    if (fx->opts.trusted_ca_file) {
      snprintf(a_ca, sizeof a_ca, "--trusted-ca-file=%s", fx->opts.trusted_ca_file);
      argv[n++] = a_ca;
      argv[n++] = "--client-cert-auth";
    }
  }
  for (int i = 0; fx->opts.extra_args && fx->opts.extra_args[i] && n < 62; i++)
    argv[n++] = fx->opts.extra_args[i];
  argv[n] = NULL;

  long offset = file_size(logp);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("etcd_fixture: fork");
    return -1;
  }
  if (pid == 0) {
    /* A crashed test must not leave etcd running. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp("etcd", (char *const *)argv);
    fprintf(stderr, "etcd_fixture: cannot run etcd: %s\n", strerror(errno));
    _exit(127);
  }
  fx->pid = pid;
  double deadline = now_s() + ETCD_FIXTURE_START_S;
  while (now_s() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fx->pid = 0;
      fprintf(stderr, "etcd_fixture: etcd exited during start (status %d)\n", status);
      print_log_tail(fx);
      return -1;
    }
    if (log_says_ready(logp, offset)) return 0;
    nap_ms(20);
  }
  fprintf(stderr, "etcd_fixture: etcd did not serve within %d s\n", ETCD_FIXTURE_START_S);
  print_log_tail(fx);
  etcd_fixture_signal(fx, SIGKILL);
  return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

int etcd_fixture_start(etcd_fixture *fx, const etcd_fixture_opts *opts) {
  memset(fx, 0, sizeof *fx);
  if (opts) fx->opts = *opts;
  snprintf(fx->dir, sizeof fx->dir, "%s/giant-etcd-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(fx->dir)) {
    perror("etcd_fixture: mkdtemp");
    fx->dir[0] = 0;
    return -1;
  }
  /* A port found free can be taken by another test before etcd binds it:
   * then etcd exits at once, and new ports are tried. */
  for (int attempt = 0; attempt < 3; attempt++) {
    if (attempt > 0) { /* the data of a failed start names the old ports */
      char data[300];
      snprintf(data, sizeof data, "%s/data", fx->dir);
      nftw(data, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    fx->client_port = free_port();
    do fx->peer_port = free_port();
    while (fx->peer_port == fx->client_port);
    if (fx->client_port <= 0 || fx->peer_port <= 0) {
      fprintf(stderr, "etcd_fixture: no free loopback port\n");
      return -1;
    }
    snprintf(fx->endpoint, sizeof fx->endpoint, "127.0.0.1:%d", fx->client_port);
    snprintf(fx->url, sizeof fx->url, "%s://127.0.0.1:%d", fx->opts.cert_file ? "https" : "http",
             fx->client_port);
    if (launch(fx) == 0) return 0;
  }
  return -1;
}

int etcd_fixture_signal(etcd_fixture *fx, int sig) {
  if (fx->pid <= 0) return -1;
  if (kill(fx->pid, sig) != 0) return -1;
  if (sig == SIGKILL) {
    waitpid(fx->pid, NULL, 0);
    fx->pid = 0;
  } else if (sig == SIGSTOP) {
    /* kill() only queues the stop: etcd's threads stop one after another
     * as each is scheduled, and one still running can answer a request
     * meanwhile. The parent hears of the stop once every thread is. */
    double deadline = now_s() + ETCD_FIXTURE_START_S;
    int status;
    while (waitpid(fx->pid, &status, WNOHANG | WUNTRACED) != fx->pid || !WIFSTOPPED(status)) {
      if (now_s() > deadline) {
        fprintf(stderr, "etcd_fixture: etcd did not stop within %d s of SIGSTOP\n", ETCD_FIXTURE_START_S);
        return -1;
      }
      nap_ms(2);
    }
  }
  return 0;
}

int etcd_fixture_stop(etcd_fixture *fx) {
  if (fx->pid <= 0) return 0;
  kill(fx->pid, SIGCONT);
  kill(fx->pid, SIGTERM);
  double deadline = now_s() + 5;
  while (now_s() < deadline) {
    if (waitpid(fx->pid, NULL, WNOHANG) == fx->pid) {
      fx->pid = 0;
      return 0;
    }
    nap_ms(10);
  }
  return etcd_fixture_signal(fx, SIGKILL);
}

int etcd_fixture_resume(etcd_fixture *fx) {
  if (fx->pid > 0) return 0;
  return launch(fx);
}

int etcd_fixture_restart(etcd_fixture *fx) {
  etcd_fixture_stop(fx);
  return launch(fx);
}

void etcd_fixture_destroy(etcd_fixture *fx) {
  etcd_fixture_stop(fx);
  if (fx->dir[0]) nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  fx->dir[0] = 0;
}

int etcd_fixture_ctl(etcd_fixture *fx, const char *const *args) {
  const char *argv[64];
  int n = 0;
  char ep[100], ca[300], cert[300], key[300];
  argv[n++] = "etcdctl";
  snprintf(ep, sizeof ep, "--endpoints=%s", fx->url);
  argv[n++] = ep;
  if (fx->opts.cert_file) {
    /* The tests sign the server and client certificates with one CA. */
    snprintf(ca, sizeof ca, "--cacert=%s", fx->opts.trusted_ca_file ? fx->opts.trusted_ca_file : "");
    snprintf(cert, sizeof cert, "--cert=%s", fx->opts.cert_file);
    snprintf(key, sizeof key, "--key=%s", fx->opts.key_file);
    argv[n++] = ca;
    argv[n++] = cert;
    argv[n++] = key;
  }
  for (int i = 0; args && args[i] && n < 62; i++) argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      close(fd);
    }
    setenv("ETCDCTL_API", "3", 1);
    execvp("etcdctl", (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
