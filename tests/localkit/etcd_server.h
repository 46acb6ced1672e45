/* A real etcd server on this machine, for tests and benchmarks: started on
 * free 127.0.0.1 ports with a fresh data directory, stopped and removed at
 * the end.
 *
 *   etcd_fixture fx;
 *   if (etcd_fixture_start(&fx, NULL) != 0) return 77;   (skip: no etcd)
 *   ... connect to fx.endpoint ("127.0.0.1:PORT") ...
 *   etcd_fixture_restart(&fx);     same ports and data, e.g. mid-stream
 *   etcd_fixture_destroy(&fx);     stop (SIGTERM, then SIGKILL) and rm -rf
 *
 * The server is libgiant's local etcd (resilience/etcd/local.h). Every wait is
 * bounded (ETCD_FIXTURE_START_S seconds to serve). The server's log is in
 * fx.dir/etcd.log. Not thread-safe; one fixture per
 * server. */
#ifndef GIANT_LOCALKIT_ETCD_SERVER_H
#define GIANT_LOCALKIT_ETCD_SERVER_H

#include <sys/types.h>

#include "resilience/etcd/local.h"

#define ETCD_FIXTURE_START_S 15

typedef struct etcd_fixture_opts {
  /* Serve clients over TLS with these PEM files (all three, or NULL). */
  const char *cert_file, *key_file;
  const char *trusted_ca_file; /* also turns on client certificate checks */
  /* Also serve clients at this address of the machine (e.g. a bridge's, for
   * network namespaces), on the same port; NULL: 127.0.0.1 only. */
  const char *also_listen;
  /* Extra etcd flags ("--auth-token-ttl=2"), NULL-terminated; may be NULL. */
  const char *const *extra_args;
} etcd_fixture_opts;

typedef struct etcd_fixture {
  gt_etcd_local srv; /* srv.pid: 0 while stopped */
  int client_port, peer_port;
  char dir[256];     /* temp dir: data in dir/data, log in dir/etcd.log */
  char endpoint[64]; /* "127.0.0.1:PORT" */
  char url[80];      /* "http://127.0.0.1:PORT" or "https://..." */
  etcd_fixture_opts opts;
} etcd_fixture;

/* 1 when an etcd binary is on PATH. */
int etcd_fixture_available(void);
/* Picks ports, makes the dir, starts etcd and waits until it serves.
 * opts may be NULL (plain http). Returns 0, or -1 with a message on stderr
 * (the caller may skip with 77 when etcd_fixture_available() is 0). */
int etcd_fixture_start(etcd_fixture *fx, const etcd_fixture_opts *opts);
/* Stops the server, keeping ports and data (SIGTERM, SIGKILL after 5 s). */
int etcd_fixture_stop(etcd_fixture *fx);
/* Kills the server at once with sig (SIGKILL, SIGSTOP, SIGCONT...); after
 * SIGKILL it is reaped and counts as stopped; SIGSTOP returns once every
 * thread of it has stopped. */
int etcd_fixture_signal(etcd_fixture *fx, int sig);
/* Starts a stopped server again on the same ports and data dir. */
int etcd_fixture_resume(etcd_fixture *fx);
/* Stop, then start again. */
int etcd_fixture_restart(etcd_fixture *fx);
/* Stops the server and removes its directory. */
void etcd_fixture_destroy(etcd_fixture *fx);
/* Runs etcdctl against the fixture with the given arguments (one shell
 * word each, NULL-terminated); returns its exit status. */
int etcd_fixture_ctl(etcd_fixture *fx, const char *const *args);

#endif
