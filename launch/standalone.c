/* --standalone: a private etcd on free loopback ports (of --comm-ports when
 * given) with a temporary data directory, gone when giantrun exits. It
 * speaks only TLS and asks every client for a certificate of its own
 * private CA (certs.c): other local users cannot read the job's secret
 * from it.
 *
 * A giantrun killed outright (SIGKILL, the OOM killer) cannot remove its
 * directory; its etcd dies with it (PR_SET_PDEATHSIG). So each directory
 * names its owner (pid and start time, as pids are reused), and the next
 * standalone start removes the directories of owners that are gone. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resilience/etcd/local.h"
#include "giant/log.h"
#include "launch/agent.h"

#define START_TIMEOUT_S 20

/* Two free ports of ip for etcd's clients and peers. In a range, the
 * top two, which workers (starting from the bottom, one each: ports.h)
 * reach last; both are held while the second is found, so they differ. */
static gt_status free_ports(const char *ip, const gt_port_range *r, int *cport, int *pport) {
  if (!r || !r->lo) {
    *cport = gt_etcd_local_free_port();
    *pport = gt_etcd_local_free_port();
    if (*cport <= 0 || *pport <= 0 || *cport == *pport)
      return gt_errorf(GT_EIO, "standalone etcd: no free loopback port");
    return GT_OK;
  }
  int n = gt_ports_count(r), fd[2] = {-1, -1};
  gt_status st = gt_ports_listen(ip, r, (unsigned)(n - 2), &fd[0], cport);
  if (st == GT_OK) st = gt_ports_listen(ip, r, (unsigned)(n - 1), &fd[1], pport);
  for (int i = 0; i < 2; i++)
    if (fd[i] >= 0) close(fd[i]);
  return st == GT_OK ? st : gt_error_context(st, "standalone etcd");
}

static gt_status launch_once(standalone_etcd *e, const char *bin, const char *ip, const gt_port_range *ports) {
  int cport = 0, pport = 0;
  GT_TRY(free_ports(ip, ports, &cport, &pport));
  char data[300], logp[300], client[80], peer[80];
  snprintf(data, sizeof data, "%s/data", e->dir);
  snprintf(logp, sizeof logp, "%s/etcd.log", e->dir);
  gt_etcd_local_remove(data); /* a failed try's data names its ports */
  bool v6 = strchr(ip, ':') != NULL;
  snprintf(client, sizeof client, "https://%s%s%s:%d", v6 ? "[" : "", ip, v6 ? "]" : "", cport);
  snprintf(peer, sizeof peer, "https://%s%s%s:%d", v6 ? "[" : "", ip, v6 ? "]" : "", pport);
  /* Clients and the peer port alike need a certificate of the private CA.
   * Ctrl-C goes to giantrun, which stops etcd last. */
  gt_etcd_local_config c = {.name = "giantrun",
                            .data_dir = data,
                            .log_path = logp,
                            .log_truncate = true,
                            .listen_client_urls = client,
                            .listen_peer_urls = peer,
                            .cert_file = e->server_cert,
                            .key_file = e->server_key,
                            .trusted_ca_file = e->ca,
                            .peer_cert_file = e->server_cert,
                            .peer_key_file = e->server_key,
                            .peer_trusted_ca_file = e->ca,
                            .bin = bin,
                            .own_process_group = true,
                            .die_with_parent = true,
                            .ready_timeout_s = START_TIMEOUT_S};
  gt_status st = gt_etcd_local_start(&c, &e->srv);
  if (st == GT_OK) {
    snprintf(e->endpoint, sizeof e->endpoint, "%s", client);
    return GT_OK;
  }
  if (st == GT_ETIMEDOUT)
    return gt_errorf(GT_ETIMEDOUT, "standalone etcd did not serve within %d s (see %s)", START_TIMEOUT_S, logp);
  if (e->srv.exited) return gt_errorf(GT_EIO, "standalone etcd exited while starting (see its log %s)", logp);
  return gt_error_context(st, "standalone etcd");
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
    gt_etcd_local_remove(path);
    gt_info("giantrun: removed %s, left by a standalone giantrun that is gone", path);
  }
  closedir(d);
}

gt_status standalone_start(standalone_etcd *e, const char *ip, const gt_port_range *ports) {
  memset(e, 0, sizeof *e);
  if (!ip) ip = "127.0.0.1";
  snprintf(e->ip, sizeof e->ip, "%s", ip);
  char bin[PATH_MAX];
  if (gt_etcd_local_find(bin, sizeof bin) != GT_OK)
    return gt_errorf(GT_ENOTFOUND,
                     "--standalone needs the etcd server: install Debian's etcd-server (or put etcd on PATH)");
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
    gt_status st =
        gt_errorf(GT_EIO, "cannot make a directory for the standalone etcd (%s): %s", e->dir, strerror(errno));
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
    st = launch_once(e, bin, ip, ports);
    if (st == GT_OK || st == GT_ETIMEDOUT) break;
  }
  if (st != GT_OK) {
    char logp[300], tail[2001];
    snprintf(logp, sizeof logp, "%s/etcd.log", e->dir);
    if (gt_etcd_local_log_tail(logp, tail, sizeof tail) > 0)
      fprintf(stderr, "giantrun: the standalone etcd's log ends with:\n%s\n", tail);
    standalone_stop(e);
  }
  return st;
}

void standalone_stop(standalone_etcd *e) {
  gt_etcd_local_stop(&e->srv, 5);
  if (e->dir[0]) gt_etcd_local_remove(e->dir);
  e->dir[0] = 0;
}
