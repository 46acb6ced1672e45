/* The standalone etcd's certificates: a private CA made at start, a server
 * certificate for 127.0.0.1 and etcd's address (the first node's under
 * Slurm; also used between etcd's own ports) and one
 * client certificate for the agent and its workers, all signed by it.
 * Keys are ECDSA P-256; files are created 0600 (never opened for anyone
 * else, even for a moment) in the standalone directory, which is 0700 and
 * removed at exit. A local user without the client certificate cannot
 * talk to that etcd at all, so cannot read the job's secret from it. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launch/agent.h"

#define VALID_DAYS 30

/* Writes a PEM of mode 0600 at dir/name; `key` or `cert`. */
static gt_status write_pem(const char *dir, const char *name, EVP_PKEY *key, X509 *cert, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return gt_errorf(GT_EIO, "standalone etcd: cannot create %s: %s", path, strerror(errno));
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    return gt_errorf(GT_EIO, "standalone etcd: cannot write %s", path);
  }
  int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
  if (fclose(f) != 0) ok = 0;
  return ok ? GT_OK : gt_errorf(GT_EIO, "standalone etcd: writing %s failed", path);
}

static gt_status add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  int ok = ext && X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok ? GT_OK : gt_errorf(GT_EBACKEND, "standalone etcd: cannot add certificate extension %s", value);
}

/* A certificate for `key` named `cn`, signed by (issuer, issuer_key), or
 * self-signed when issuer is NULL; `exts` are nid/value pairs. */
static gt_status make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, const int *nids,
                           const char *const *values, int nexts, X509 **out) {
  X509 *x = X509_new();
  uint8_t serial[16];
  BIGNUM *bn = NULL;
  ASN1_INTEGER *sn = NULL;
  gt_status st =
      x && RAND_bytes(serial, sizeof serial) == 1 ? GT_OK : gt_errorf(GT_EBACKEND, "standalone etcd: no randomness");
  if (st == GT_OK) {
    serial[0] &= 0x7f; /* positive */
    bn = BN_bin2bn(serial, sizeof serial, NULL);
    sn = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
    X509_NAME *name = X509_get_subject_name(x);
    if (!sn || !X509_set_version(x, 2) || !X509_set_serialNumber(x, sn) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -60) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), (long)VALID_DAYS * 86400) || !X509_set_pubkey(x, key) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) ||
        !X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name))
      st = gt_errorf(GT_EBACKEND, "standalone etcd: cannot fill certificate '%s'", cn);
  }
  for (int i = 0; st == GT_OK && i < nexts; i++) st = add_ext(x, issuer ? issuer : x, nids[i], values[i]);
  if (st == GT_OK && !X509_sign(x, issuer ? issuer_key : key, EVP_sha256()))
    st = gt_errorf(GT_EBACKEND, "standalone etcd: cannot sign certificate '%s'", cn);
  BN_free(bn);
  ASN1_INTEGER_free(sn);
  if (st != GT_OK) {
    X509_free(x);
    x = NULL;
  }
  *out = x;
  return st;
}

gt_status standalone_make_certs(standalone_etcd *e) {
  EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *srv_key = EVP_EC_gen("P-256"), *cli_key = EVP_EC_gen("P-256");
  X509 *ca = NULL, *srv = NULL, *cli = NULL;
  gt_status st = ca_key && srv_key && cli_key ? GT_OK : gt_errorf(GT_EBACKEND, "standalone etcd: cannot make keys");
  const int ca_nids[] = {NID_basic_constraints, NID_key_usage, NID_subject_key_identifier};
  const char *const ca_vals[] = {"critical,CA:TRUE,pathlen:0", "critical,keyCertSign,cRLSign", "hash"};
  const int srv_nids[] = {NID_basic_constraints, NID_key_usage, NID_ext_key_usage, NID_subject_alt_name};
  char san[128];
  snprintf(san, sizeof san, "IP:127.0.0.1,DNS:localhost%s%s", strcmp(e->ip, "127.0.0.1") ? ",IP:" : "",
           strcmp(e->ip, "127.0.0.1") ? e->ip : "");
  const char *const srv_vals[] = {"critical,CA:FALSE", "critical,digitalSignature,keyEncipherment",
                                  "serverAuth,clientAuth", san};
  const int cli_nids[] = {NID_basic_constraints, NID_key_usage, NID_ext_key_usage};
  const char *const cli_vals[] = {"critical,CA:FALSE", "critical,digitalSignature", "clientAuth"};
  if (st == GT_OK) st = make_cert(ca_key, "giantrun standalone CA", NULL, NULL, ca_nids, ca_vals, 3, &ca);
  if (st == GT_OK) st = make_cert(srv_key, e->ip, ca, ca_key, srv_nids, srv_vals, 4, &srv);
  if (st == GT_OK) st = make_cert(cli_key, "giantrun", ca, ca_key, cli_nids, cli_vals, 3, &cli);
  /* The CA's key is not written: nothing else will ever be signed. */
  if (st == GT_OK) st = write_pem(e->dir, "ca.pem", NULL, ca, e->ca, sizeof e->ca);
  if (st == GT_OK) st = write_pem(e->dir, "server.pem", NULL, srv, e->server_cert, sizeof e->server_cert);
  if (st == GT_OK) st = write_pem(e->dir, "server.key", srv_key, NULL, e->server_key, sizeof e->server_key);
  if (st == GT_OK) st = write_pem(e->dir, "client.pem", NULL, cli, e->client_cert, sizeof e->client_cert);
  if (st == GT_OK) st = write_pem(e->dir, "client.key", cli_key, NULL, e->client_key, sizeof e->client_key);
  X509_free(ca);
  X509_free(srv);
  X509_free(cli);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(srv_key);
  EVP_PKEY_free(cli_key);
  return st;
}
