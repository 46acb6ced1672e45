/* Starts and stops a real etcd on loopback (see etcd_server.h), through
 * libgiant's starter of local etcd servers (resilience/etcd/local.h). */
#include "localkit/etcd_server.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "resilience/etcd/local.h"

int etcd_fixture_available(void) {
  char bin[PATH_MAX];
  return gt_etcd_local_find(bin, sizeof bin) == GT_OK;
}

static void print_log_tail(const etcd_fixture *fx) {
  char path[300], buf[3001];
  snprintf(path, sizeof path, "%s/etcd.log", fx->dir);
  if (gt_etcd_local_log_tail(path, buf, sizeof buf) > 0)
    fprintf(stderr, "etcd_fixture: last lines of %s:\n%s\n", path, buf);
}

static int launch(etcd_fixture *fx) {
  char logp[300], data[300], listen_c[160], peer[80];
  snprintf(logp, sizeof logp, "%s/etcd.log", fx->dir);
  snprintf(data, sizeof data, "%s/data", fx->dir);
  if (fx->opts.also_listen)
    snprintf(listen_c, sizeof listen_c, "%s,http://%s:%d", fx->url, fx->opts.also_listen, fx->client_port);
  else
    snprintf(listen_c, sizeof listen_c, "%s", fx->url);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", fx->peer_port);
  /* A crashed test must not leave etcd running: it dies with its parent. */
  gt_etcd_local_config c = {.name = "fixture",
                            .data_dir = data,
                            .log_path = logp,
                            .listen_client_urls = listen_c,
                            .advertise_client_urls = fx->url,
                            .listen_peer_urls = peer,
                            .cert_file = fx->opts.cert_file,
                            .key_file = fx->opts.key_file,
                            .trusted_ca_file = fx->opts.cert_file ? fx->opts.trusted_ca_file : NULL,
                            .extra_args = fx->opts.extra_args,
                            .die_with_parent = true,
                            .ready_timeout_s = ETCD_FIXTURE_START_S};
  if (gt_etcd_local_start(&c, &fx->srv) == GT_OK) return 0;
  if (fx->srv.exited)
    fprintf(stderr, "etcd_fixture: etcd exited during start (status %d)\n", fx->srv.exit_status);
  else
    fprintf(stderr, "etcd_fixture: %s\n", gt_last_error());
  print_log_tail(fx);
  return -1;
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
      gt_etcd_local_remove(data);
    }
    fx->client_port = gt_etcd_local_free_port();
    do {
      fx->peer_port = gt_etcd_local_free_port();
    } while (fx->peer_port == fx->client_port);
    if (fx->client_port <= 0 || fx->peer_port <= 0) {
      fprintf(stderr, "etcd_fixture: no free loopback port\n");
      return -1;
    }
    snprintf(fx->endpoint, sizeof fx->endpoint, "127.0.0.1:%d", fx->client_port);
    snprintf(fx->url, sizeof fx->url, "%s://127.0.0.1:%d", fx->opts.cert_file ? "https" : "http", fx->client_port);
    if (launch(fx) == 0) return 0;
  }
  return -1;
}

int etcd_fixture_signal(etcd_fixture *fx, int sig) {
  gt_status st = gt_etcd_local_signal(&fx->srv, sig);
  if (st == GT_ETIMEDOUT) fprintf(stderr, "etcd_fixture: %s\n", gt_last_error());
  return st == GT_OK ? 0 : -1;
}

int etcd_fixture_stop(etcd_fixture *fx) {
  gt_etcd_local_stop(&fx->srv, 5);
  return 0;
}

int etcd_fixture_resume(etcd_fixture *fx) {
  if (fx->srv.pid > 0) return 0;
  return launch(fx);
}

int etcd_fixture_restart(etcd_fixture *fx) {
  etcd_fixture_stop(fx);
  return launch(fx);
}

void etcd_fixture_destroy(etcd_fixture *fx) {
  etcd_fixture_stop(fx);
  if (fx->dir[0]) gt_etcd_local_remove(fx->dir);
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
