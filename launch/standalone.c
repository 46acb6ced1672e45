/* --standalone: a private etcd on free loopback ports with a temporary data
 * directory, gone when giantrun exits. It speaks only TLS and asks every
 * client for a certificate of its own private CA (certs.c): other local
 * users cannot read the job's secret from it.
 *
 * A giantrun killed outright (SIGKILL, the OOM killer) cannot remove its
 * directory; its etcd dies with it (PR_SET_PDEATHSIG). So each directory
 * names its owner (pid and start time, as pids are reused), and the next
 * standalone start removes the directories of owners that are gone. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "launch/agent.h"

#define START_TIMEOUT_S 20

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static int find_etcd(char *out, size_t n) {
  const char *path = getenv("PATH");
  for (const char *p = path ? path : ""; *p;) {
    const char *colon = strchr(p, ':');
    size_t k = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(out, n, "%.*s/etcd", (int)k, p);
    if (k && access(out, X_OK) == 0) return 0;
    p = colon ? colon + 1 : p + k;
  }
  snprintf(out, n, "/usr/bin/etcd");
  return access(out, X_OK) == 0 ? 0 : -1;
}

static int log_says_ready(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[4096];
  int ready = 0;
  while (!ready && fgets(line, sizeof line, f)) ready = strstr(line, "ready to serve client requests") != NULL;
  fclose(f);
  return ready;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static gt_status launch_once(standalone_etcd *e, const char *bin) {
  int cport = free_port(), pport = free_port();
  if (cport <= 0 || pport <= 0 || cport == pport)
    return gt_errorf(GT_EIO, "standalone etcd: no free loopback port");
  char data[300], logp[300], a_data[320], a_lc[80], a_ac[80], a_lp[80], a_ip[80], a_ic[100];
  char a_cert[320], a_key[320], a_ca[320], a_pcert[330], a_pkey[330], a_pca[330];
  snprintf(data, sizeof data, "%s/data", e->dir);
  snprintf(logp, sizeof logp, "%s/etcd.log", e->dir);
  nftw(data, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* a failed try's data names its ports */
  snprintf(a_data, sizeof a_data, "--data-dir=%s", data);
  snprintf(a_lc, sizeof a_lc, "--listen-client-urls=https://127.0.0.1:%d", cport);
  snprintf(a_ac, sizeof a_ac, "--advertise-client-urls=https://127.0.0.1:%d", cport);
  snprintf(a_lp, sizeof a_lp, "--listen-peer-urls=https://127.0.0.1:%d", pport);
  snprintf(a_ip, sizeof a_ip, "--initial-advertise-peer-urls=https://127.0.0.1:%d", pport);
  snprintf(a_ic, sizeof a_ic, "--initial-cluster=giantrun=https://127.0.0.1:%d", pport);
  /* Clients and the peer port alike need a certificate of the private CA. */
  snprintf(a_cert, sizeof a_cert, "--cert-file=%s", e->server_cert);
  snprintf(a_key, sizeof a_key, "--key-file=%s", e->server_key);
  snprintf(a_ca, sizeof a_ca, "--trusted-ca-file=%s", e->ca);
  snprintf(a_pcert, sizeof a_pcert, "--peer-cert-file=%s", e->server_cert);
  snprintf(a_pkey, sizeof a_pkey, "--peer-key-file=%s", e->server_key);
  snprintf(a_pca, sizeof a_pca, "--peer-trusted-ca-file=%s", e->ca);
  char *argv[] = {"etcd", "--name=giantrun", a_data, a_lc, a_ac, a_lp, a_ip, a_ic, a_cert, a_key, a_ca,
                  "--client-cert-auth", a_pcert, a_pkey, a_pca, "--peer-client-cert-auth", NULL};
  int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return gt_errorf(GT_EIO, "standalone etcd: cannot write %s: %s", logp, strerror(errno));
  pid_t agent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return gt_errorf(GT_EIO, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0); /* Ctrl-C goes to giantrun, which stops etcd last */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(fd, 1);
    dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    extern char **environ;
    execve(bin, argv, environ);
    _exit(127);
  }
  close(fd);
  e->pid = pid;
  double deadline = gt_now() + START_TIMEOUT_S;
  while (gt_now() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      e->pid = 0;
      return gt_errorf(GT_EIO, "standalone etcd exited while starting (see its log %s)", logp);
    }
    if (log_says_ready(logp)) {
      snprintf(e->endpoint, sizeof e->endpoint, "https://127.0.0.1:%d", cport);
      return GT_OK;
    }
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  e->pid = 0;
  return gt_errorf(GT_ETIMEDOUT, "standalone etcd did not serve within %d s (see %s)", START_TIMEOUT_S, logp);
}

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks
 * since boot. 0 when the process does not exist. */
static unsigned long long start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  unsigned long long t = 0;
  if (!p) return 0;
  p = strchr(p, ' '); /* before field 3, the state */
  for (int field = 3; p && field < 22; field++) p = strchr(p + 1, ' ');
  if (p) t = strtoull(p + 1, NULL, 10);
  return t;
}

#define OWNER_FILE "owner"

static void write_owner(const char *dir) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/" OWNER_FILE, dir);
  FILE *f = fopen(path, "w");
  if (!f) return; /* the directory still works; only a later sweep cannot judge it */
  fprintf(f, "%d %llu\n", (int)getpid(), start_time(getpid()));
  fclose(f);
}

/* Whether the giantrun named in dir/owner is gone. A directory without a
 * readable owner is not judged: another giantrun may be creating it. */
static bool owner_gone(const char *dir) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/" OWNER_FILE, dir);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  int pid = 0;
  unsigned long long started = 0;
  int got = fscanf(f, "%d %llu", &pid, &started);
  fclose(f);
  if (got != 2 || pid <= 0) return false;
  return start_time((pid_t)pid) != started;
}

/* Removes this user's giantrun-etcd-* directories under tmp whose giantrun
 * is gone. */
static void sweep_stale(const char *tmp) {
  DIR *d = opendir(tmp);
  if (!d) return;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (strncmp(ent->d_name, "giantrun-etcd-", 14)) continue;
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", tmp, ent->d_name);
    if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || !owner_gone(path)) continue;
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    gt_info("giantrun: removed %s, left by a standalone giantrun that is gone", path);
  }
  closedir(d);
}

gt_status standalone_start(standalone_etcd *e) {
  memset(e, 0, sizeof *e);
  char bin[PATH_MAX];
  if (find_etcd(bin, sizeof bin) != 0)
    return gt_errorf(GT_ENOTFOUND, "--standalone needs the etcd server: install Debian's etcd-server (or put etcd on PATH)");
  /* The private etcd lives and dies with this agent, so its data need
   * not survive a power cut: in memory (/dev/shm) its writes skip the
   * disk's fsync, which a checkpoint being written would otherwise slow
   * (and with them every store round trip of a rebuild). TMPDIR wins. */
  const char *tmp = getenv("TMPDIR");
  if ((!tmp || !*tmp) && access("/dev/shm", W_OK | X_OK) == 0) tmp = "/dev/shm";
  if (!tmp || !*tmp) tmp = "/tmp";
  sweep_stale(tmp);
  snprintf(e->dir, sizeof e->dir, "%s/giantrun-etcd-XXXXXX", tmp);
  if (!mkdtemp(e->dir)) {
    gt_status st = gt_errorf(GT_EIO, "cannot make a directory for the standalone etcd (%s): %s", e->dir, strerror(errno));
    e->dir[0] = 0;
    return st;
  }
  write_owner(e->dir);
  gt_status st = standalone_make_certs(e);
  if (st != GT_OK) {
    standalone_stop(e);
    return st;
  }
  /* A port found free may be taken before etcd binds it: try new ports. */
  for (int attempt = 0; attempt < 3; attempt++) {
    st = launch_once(e, bin);
    if (st == GT_OK || st == GT_ETIMEDOUT) break;
  }
  if (st != GT_OK) {
    char logp[300], tail[2048] = "";
    snprintf(logp, sizeof logp, "%s/etcd.log", e->dir);
    FILE *f = fopen(logp, "r");
    if (f) {
      fseek(f, 0, SEEK_END);
      long sz = ftell(f);
      fseek(f, sz > 2000 ? sz - 2000 : 0, SEEK_SET);
      size_t n = fread(tail, 1, sizeof tail - 1, f);
      tail[n] = 0;
      fclose(f);
      fprintf(stderr, "giantrun: the standalone etcd's log ends with:\n%s\n", tail);
    }
    standalone_stop(e);
  }
  return st;
}

void standalone_stop(standalone_etcd *e) {
  if (e->pid > 0) {
    kill(e->pid, SIGTERM);
    double deadline = gt_now() + 5;
    int reaped = 0;
    while (!reaped && gt_now() < deadline) {
      if (waitpid(e->pid, NULL, WNOHANG) == e->pid) reaped = 1;
      else {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
      }
    }
    if (!reaped) {
      kill(e->pid, SIGKILL);
      waitpid(e->pid, NULL, 0);
    }
    e->pid = 0;
  }
  if (e->dir[0]) nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  e->dir[0] = 0;
}
