/* The etcd client: endpoints and channels, credentials, authentication,
 * and unary calls with deadline, failover and re-authentication. */
#include <errno.h>
#include <grpc/byte_buffer_reader.h>
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

void et_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
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
    return gt_errorf(GT_EFORMAT, "%s file '%s' is not PEM (no '-----BEGIN ...%s' line)", what,
                     path, marker);
  }
  return GT_OK;
}

/* gRPC's own log lines go to our log at debug level. */
static void grpc_log_to_gt(gpr_log_func_args *a) {
  gt_log(GT_LOG_DEBUG, "grpc %s:%d: %s",
         a->file, a->line, a->message);
}

static void init_once(void) { gpr_set_log_function(grpc_log_to_gt); }

/* "http://h:p/", "https://h:p" or "h:p" -> "h:p"; *tls set for https. */
static gt_status parse_endpoint(const char *s, size_t n, char **out, int *tls) {
  const char *orig = s;
  size_t on = n;
  while (n && (*s == ' ')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '/')) n--;
  if (n >= 8 && strncmp(s, "https://", 8) == 0) {
    *tls = 1;
    s += 8, n -= 8;
  } else if (n >= 7 && strncmp(s, "http://", 7) == 0) {
    s += 7, n -= 7;
  }
  const char *colon = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == ':') colon = s + i;
  int ok = colon && colon > s && colon < s + n - 1;
  long port = 0;
  if (ok) {
    for (const char *p = colon + 1; p < s + n; p++) {
      if (*p < '0' || *p > '9') ok = 0;
      else port = port * 10 + (*p - '0');
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
  if (cfg->user && !cfg->password)
    return gt_errorf(GT_EINVAL, "etcd user '%s' given without a password", cfg->user);
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

const char *gt_etcd_endpoint(const gt_etcd_client *c) {
  return c->eps[atomic_load((atomic_int *)&c->cur) % c->nep];
}

char *et_token(gt_etcd_client *c, unsigned *gen) {
  pthread_mutex_lock(&c->mu);
  char *t = c->token ? strdup(c->token) : NULL;
  *gen = c->token_gen;
  pthread_mutex_unlock(&c->mu);
  return t;
}

int et_is_auth_error(grpc_status_code code, const char *details) {
  if (code == GRPC_STATUS_UNAUTHENTICATED) return 1;
  /* The token outlived a change of users or roles. */
  return details && strstr(details, "revision of auth store is old") != NULL;
}

gt_status et_status(gt_etcd_client *c, int ep, grpc_status_code code, const char *details,
                    const char *what) {
  const char *at = c->eps[ep];
  const char *d = details && *details ? details : "no details";
  switch (code) {
  case GRPC_STATUS_OK:
    return GT_OK;
  case GRPC_STATUS_UNAVAILABLE:
    return gt_errorf(GT_ECONN, "%s: etcd at %s is unavailable (%s); check that it runs, the "
                     "endpoint, and the TLS settings", what, at, d);
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    return gt_errorf(GT_ETIMEDOUT, "%s: etcd at %s did not answer within %d ms (%s)", what, at,
                     atomic_load(&c->timeout_ms), d);
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED:
    return gt_errorf(GT_EAUTH, "%s: etcd at %s refused access (%s); check --user/--password "
                     "and the user's roles", what, at, d);
  case GRPC_STATUS_INVALID_ARGUMENT:
    if (strstr(d, "authentication failed") || strstr(d, "user name is empty") ||
        strstr(d, "auth"))
      return gt_errorf(GT_EAUTH, "%s: etcd at %s: %s; check the user and password (the "
                       "server has authentication on)", what, at, d);
    return gt_errorf(GT_EINVAL, "%s: etcd at %s rejected the request: %s", what, at, d);
  case GRPC_STATUS_NOT_FOUND:
    return gt_errorf(GT_ENOTFOUND, "%s: %s", what, d);
  case GRPC_STATUS_OUT_OF_RANGE:
    return gt_errorf(GT_ERANGE, "%s: %s", what, d);
  case GRPC_STATUS_CANCELLED:
    return gt_errorf(GT_ECANCELED, "%s: cancelled (%s)", what, d);
  case GRPC_STATUS_FAILED_PRECONDITION:
    if (strstr(d, "auth"))
      return gt_errorf(GT_EAUTH, "%s: etcd at %s: %s", what, at, d);
    return gt_errorf(GT_ESTATE, "%s: etcd at %s: %s", what, at, d);
  default:
    return gt_errorf(GT_EBACKEND, "%s: etcd at %s failed with gRPC status %d (%s)", what, at,
                     (int)code, d);
  }
}

static gpr_timespec abs_deadline(double t) {
  double left = t - gt_now();
  if (left < 0) left = 0;
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros((int64_t)(left * 1e6), GPR_TIMESPAN));
}

/* One attempt on one endpoint. Returns the call's status code; *resp gets
 * the response bytes on OK, *details the status text (malloc'ed). */
static grpc_status_code attempt(gt_etcd_client *c, int ep, const char *method,
                                const grpc_slice *req, const char *token, double deadline,
                                grpc_slice *resp, char **details) {
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_slice mslice = grpc_slice_from_static_string(method);
  grpc_call *call = grpc_channel_create_call(c->chans[ep], NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                             mslice, NULL, abs_deadline(deadline), NULL);
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  if (token) {
    md.key = grpc_slice_from_static_string("token");
    md.value = grpc_slice_from_copied_string(token);
  }
  grpc_slice s = grpc_slice_ref(*req);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_byte_buffer *recv = NULL;
  grpc_metadata_array md_in, trailers;
  grpc_metadata_array_init(&md_in);
  grpc_metadata_array_init(&trailers);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice det = grpc_empty_slice();
  const char *errstr = NULL;

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = token ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = token ? &md : NULL;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailers;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &det;
  ops[5].data.recv_status_on_client.error_string = &errstr;
  static char tag;
  grpc_call_error e = grpc_call_start_batch(call, ops, 6, &tag, NULL);
  if (e == GRPC_CALL_OK) {
    /* gRPC ends the call at its deadline; the margin only guards against
     * a call that never completes, which is then cancelled. */
    grpc_event ev = grpc_completion_queue_next(cq, abs_deadline(deadline + 2.0), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      grpc_call_cancel(call, NULL);
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
  } else {
    code = GRPC_STATUS_INTERNAL;
  }
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);

  *resp = grpc_empty_slice();
  if (code == GRPC_STATUS_OK && recv) {
    grpc_byte_buffer_reader r;
    if (grpc_byte_buffer_reader_init(&r, recv)) {
      *resp = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
    }
  } else if (code == GRPC_STATUS_OK) {
    code = GRPC_STATUS_INTERNAL;
  }
  size_t dl = GRPC_SLICE_LENGTH(det);
  const char *extra = (code != GRPC_STATUS_OK && errstr && dl == 0) ? errstr : "";
  size_t el = strlen(extra);
  *details = malloc(dl + el + 1);
  if (*details) {
    memcpy(*details, GRPC_SLICE_START_PTR(det), dl);
    memcpy(*details + dl, extra, el);
    (*details)[dl + el] = 0;
  }
  if (errstr) gpr_free((void *)errstr);
  grpc_slice_unref(det);
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&md_in);
  grpc_metadata_array_destroy(&trailers);
  if (token) grpc_slice_unref(md.value);
  return code;
}

static gt_status unary(gt_etcd_client *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       const char *what, int with_auth) {
  *resp = NULL;
  int timeout = atomic_load(&c->timeout_ms);
  double deadline = gt_now() + timeout / 1000.0;
  size_t n = protobuf_c_message_get_packed_size(req);
  grpc_slice req_slice = grpc_slice_malloc(n);
  protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(req_slice));
  int reauthed = 0, failures = 0;
  double backoff = 0.02;
  gt_status st = GT_OK;
  for (;;) {
    int ep = atomic_load(&c->cur) % c->nep;
    unsigned gen = 0;
    char *token = with_auth ? et_token(c, &gen) : NULL;
    grpc_slice out;
    char *details = NULL;
    grpc_status_code code = attempt(c, ep, method, &req_slice, token, deadline, &out, &details);
    free(token);
    if (code == GRPC_STATUS_OK) {
      *resp = protobuf_c_message_unpack(resp_desc, NULL, GRPC_SLICE_LENGTH(out),
                                        GRPC_SLICE_START_PTR(out));
      grpc_slice_unref(out);
      free(details);
      st = *resp ? GT_OK
                 : gt_errorf(GT_EFORMAT, "%s: etcd at %s sent a malformed %s", what, c->eps[ep],
                             resp_desc->name);
      break;
    }
    grpc_slice_unref(out);
    if (code == GRPC_STATUS_UNAVAILABLE) {
      /* Fail over; after a full round of refusals, back off briefly. */
      st = et_status(c, ep, code, details, what);
      free(details);
      atomic_compare_exchange_strong(&c->cur, &ep, (ep + 1) % c->nep);
      if (++failures % c->nep == 0) {
        double left = deadline - gt_now();
        if (left <= 0) break;
        et_sleep(backoff < left ? backoff : left);
        backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
      }
      if (gt_now() >= deadline) break;
      continue;
    }
    if (with_auth && c->user && !reauthed && et_is_auth_error(code, details)) {
      free(details);
      reauthed = 1;
      st = et_reauth(c, gen);
      if (st != GT_OK) break;
      continue;
    }
    st = et_status(c, ep, code, details, what);
    free(details);
    break;
  }
  grpc_slice_unref(req_slice);
  if (st == GT_ECONN && c->nep > 1)
    gt_error_context(st, "no etcd endpoint of %d answered within %d ms", c->nep, timeout);
  return st;
}

gt_status et_unary(gt_etcd_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   const char *what) {
  return unary(c, method, req, resp_desc, resp, what, 1);
}

gt_status et_reauth(gt_etcd_client *c, unsigned gen) {
  pthread_mutex_lock(&c->mu);
  int fresh = c->token && c->token_gen != gen;
  pthread_mutex_unlock(&c->mu);
  if (fresh) return GT_OK;
  gt_debug("etcd: authenticating as '%s'", c->user);
  Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
  req.name = c->user;
  req.password = c->password;
  ProtobufCMessage *m = NULL;
  char what[300];
  snprintf(what, sizeof what, "authenticating etcd user '%s'", c->user);
  gt_status st = unary(c, ET_AUTHENTICATE, &req.base, &etcdserverpb__authenticate_response__descriptor,
                       &m, what, 0);
  if (st != GT_OK) return st;
  Etcdserverpb__AuthenticateResponse *r = (Etcdserverpb__AuthenticateResponse *)m;
  char *t = strdup(r->token ? r->token : "");
  protobuf_c_message_free_unpacked(m, NULL);
  if (!t) return gt_errorf(GT_ENOMEM, "out of memory");
  pthread_mutex_lock(&c->mu);
  free(c->token);
  c->token = t;
  c->token_gen++;
  pthread_mutex_unlock(&c->mu);
  return GT_OK;
}
