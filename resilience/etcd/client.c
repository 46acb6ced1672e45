/* The etcd client: endpoints, credentials, channels and the thread that
 * keeps gRPC's connections moving. Calls are in call.c. */
#include <errno.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/log.h"
#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

void et_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static gt_status read_file(const char *what, const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return gt_errorf(GT_EIO, "cannot open %s file '%s': %s", what, path, strerror(errno));
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    len += fread(buf + len, 1, cap - len - 1, f);
    if (len < cap - 1) break;
    char *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf) return gt_errorf(GT_ENOMEM, "out of memory reading %s file '%s'", what, path);
  if (err || len == 0) {
    free(buf);
    return gt_errorf(GT_EIO, "%s file '%s' is empty or unreadable", what, path);
  }
  buf[len] = 0;
  *out = buf;
  return GT_OK;
}

/* gRPC only says "empty address list" about a file it cannot parse, so
 * check that it at least looks like PEM. */
static gt_status read_pem(const char *what, const char *path, const char *marker, char **out) {
  GT_TRY(read_file(what, path, out));
  if (!strstr(*out, "-----BEGIN ") || !strstr(*out, marker)) {
    free(*out);
    *out = NULL;
    return gt_errorf(GT_EFORMAT, "%s file '%s' is not PEM (no '-----BEGIN ...%s' line)", what, path, marker);
  }
  return GT_OK;
}

/* gRPC's own log lines go to our log at debug level. */
static void grpc_log_to_gt(gpr_log_func_args *a) {
  gt_log(GT_LOG_DEBUG, "grpc %s:%d: %s", a->file, a->line, a->message);
}

static void init_once(void) { gpr_set_log_function(grpc_log_to_gt); }

/* "http://h:p/", "https://h:p" or "h:p" -> "h:p"; *tls set for https. */
static gt_status parse_endpoint(const char *s, size_t n, char **out, int *tls) {
  const char *orig = s;
  size_t on = n;
  while (n && (*s == ' ')) {
    s++;
    n--;
  }
  while (n && (s[n - 1] == ' ' || s[n - 1] == '/')) n--;
  if (n >= 8 && strncmp(s, "https://", 8) == 0) {
    *tls = 1;
    s += 8;
    n -= 8;
  } else if (n >= 7 && strncmp(s, "http://", 7) == 0) {
    s += 7;
    n -= 7;
  }
  const char *colon = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == ':') colon = s + i;
  int ok = colon && colon > s && colon < s + n - 1;
  long port = 0;
  if (ok) {
    for (const char *p = colon + 1; p < s + n; p++) {
      if (*p < '0' || *p > '9')
        ok = 0;
      else
        port = port * 10 + (*p - '0');
      if (port > 65535) ok = 0;
    }
    if (port == 0) ok = 0;
  }
  if (!ok)
    return gt_errorf(GT_EINVAL,
                     "bad etcd endpoint '%.*s': expected host:port, http://host:port or "
                     "https://host:port with a port from 1 to 65535",
                     (int)on, orig);
  *out = strndup(s, n);
  return *out ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
}

static void *idle_main(void *arg) {
  grpc_completion_queue *cq = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
  }
  return NULL;
}

static grpc_arg int_arg(const char *key, int v) {
  grpc_arg a;
  a.type = GRPC_ARG_INTEGER;
  a.key = (char *)key;
  a.value.integer = v;
  return a;
}

static gt_status make_creds(const gt_etcd_config *cfg, int tls, grpc_channel_credentials **out) {
  if (!tls) {
    *out = grpc_insecure_credentials_create();
    return GT_OK;
  }
  char *ca = NULL, *cert = NULL, *key = NULL;
  gt_status st = GT_OK;
  if (cfg->cacert) st = read_pem("CA certificate", cfg->cacert, "CERTIFICATE-----", &ca);
  if (st == GT_OK && cfg->cert) st = read_pem("client certificate", cfg->cert, "CERTIFICATE-----", &cert);
  if (st == GT_OK && cfg->key) st = read_pem("client key", cfg->key, "PRIVATE KEY-----", &key);
  if (st == GT_OK) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    if (!*out) st = gt_errorf(GT_EBACKEND, "gRPC refused the TLS credentials (check the PEM files)");
  }
  free(ca);
  free(cert);
  free(key);
  return st;
}

gt_status gt_etcd_connect(const gt_etcd_config *cfg, gt_etcd_client **out) {
  if (!out) return gt_errorf(GT_EINVAL, "gt_etcd_connect: out is NULL");
  *out = NULL;
  if (!cfg || !cfg->endpoints || !*cfg->endpoints)
    return gt_errorf(GT_EINVAL, "no etcd endpoints given (e.g. 127.0.0.1:2379)");
  if (!cfg->cert != !cfg->key)
    return gt_errorf(GT_EINVAL, "a client certificate needs both a certificate and a key file");
  if (cfg->user && !cfg->password) return gt_errorf(GT_EINVAL, "etcd user '%s' given without a password", cfg->user);
  if (cfg->timeout_ms < 0 || cfg->keepalive_ms < 0)
    return gt_errorf(GT_EINVAL, "etcd timeout and keepalive must be positive milliseconds");

  gt_etcd_client *c = calloc(1, sizeof *c);
  if (!c) return gt_errorf(GT_ENOMEM, "out of memory");
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->cur, 0);
  atomic_init(&c->timeout_ms, cfg->timeout_ms ? cfg->timeout_ms : 5000);
  int tls = cfg->cacert || cfg->cert;
  gt_status st = GT_OK;
  for (const char *p = cfg->endpoints; st == GT_OK && *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    char **ne = realloc(c->eps, sizeof(char *) * (size_t)(c->nep + 1));
    if (!ne) {
      st = gt_errorf(GT_ENOMEM, "out of memory");
      break;
    }
    c->eps = ne;
    st = parse_endpoint(p, n, &c->eps[c->nep], &tls);
    if (st == GT_OK) c->nep++;
    p = comma ? comma + 1 : p + n;
  }
  if (st != GT_OK) {
    for (int i = 0; i < c->nep; i++) free(c->eps[i]);
    free(c->eps);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return st;
  }
  if (cfg->user) {
    c->user = strdup(cfg->user);
    c->password = strdup(cfg->password);
  }

  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  st = make_creds(cfg, tls, &creds);
  if (st == GT_OK) {
    int ka = cfg->keepalive_ms ? cfg->keepalive_ms : 10000;
    /* etcd refuses pings more often than every 5 s and pings without a
     * call, so ping only during calls, but keep pinging on an idle stream
     * (a watch) so a frozen server is noticed. */
    grpc_arg args[] = {
        int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, ka),
        int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka / 3 > 1000 ? ka / 3 : 1000),
        int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0),
        int_arg(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0),
        int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100),
        int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000),
        int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1),
        int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1),
    };
    grpc_channel_args ca = {sizeof args / sizeof args[0], args};
    c->chans = calloc((size_t)c->nep, sizeof *c->chans);
    if (!c->chans) st = gt_errorf(GT_ENOMEM, "out of memory");
    for (int i = 0; st == GT_OK && i < c->nep; i++) {
      c->chans[i] = grpc_channel_create(c->eps[i], creds, &ca);
      if (!c->chans[i]) st = gt_errorf(GT_EBACKEND, "gRPC could not make a channel to '%s'", c->eps[i]);
    }
    grpc_channel_credentials_release(creds);
  }
  if (st == GT_OK) {
    c->idle_cq = grpc_completion_queue_create_for_next(NULL);
    if (pthread_create(&c->idle_thread, NULL, idle_main, c->idle_cq) != 0) {
      grpc_completion_queue_shutdown(c->idle_cq);
      grpc_completion_queue_destroy(c->idle_cq);
      c->idle_cq = NULL;
      st = gt_errorf(GT_EIO, "cannot start the etcd client thread");
    }
  }
  if (st == GT_OK && c->user) st = et_reauth(c, 0);
  if (st != GT_OK) {
    gt_etcd_close(c);
    return st;
  }
  *out = c;
  return GT_OK;
}

void gt_etcd_close(gt_etcd_client *c) {
  if (!c) return;
  for (int i = 0; c->chans && i < c->nep; i++)
    if (c->chans[i]) grpc_channel_destroy(c->chans[i]);
  if (c->idle_cq) {
    grpc_completion_queue_shutdown(c->idle_cq);
    pthread_join(c->idle_thread, NULL);
    grpc_completion_queue_destroy(c->idle_cq);
  }
  free(c->chans);
  grpc_shutdown();
  for (int i = 0; i < c->nep; i++) free(c->eps[i]);
  free(c->eps);
  free(c->user);
  free(c->password);
  free(c->token);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void gt_etcd_set_timeout(gt_etcd_client *c, int timeout_ms) {
  if (c && timeout_ms > 0) atomic_store(&c->timeout_ms, timeout_ms);
}

const char *gt_etcd_endpoint(const gt_etcd_client *c) { return c->eps[atomic_load((atomic_int *)&c->cur) % c->nep]; }
