/* The connection handshake: each side proves it knows the job secret.
 *
 *   client -> HELLO     nonce_c, id
 *   server -> CHALLENGE nonce_s, HMAC(secret, "srv", ctx, nonce_c, nonce_s, id)
 *   client -> PROOF     HMAC(secret, "cli", ctx, nonce_c, nonce_s, id)
 *   server -> ACCEPT | REJECT(reason)
 *
 * Fresh nonces on both sides make a recorded exchange useless; the context
 * keeps a proof for one communicator from opening another. The secret and
 * both nonces then give the keys that seal every later frame (seal.c). */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "giant/log.h"
#include "comm/wire.h"

#define NONCE 32
#define MAC 32

static gt_status random_bytes(uint8_t *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0) return gt_errorf(GT_EIO, "getrandom failed");
    got += (size_t)r;
  }
  return GT_OK;
}

static gt_status mac(const char *secret, const char *label, const char *ctx, const uint8_t *nc, const uint8_t *ns,
                     uint32_t id, uint8_t out[MAC]) {
  size_t cl = strlen(ctx), ll = strlen(label);
  uint8_t msg[2048];
  if (ll + cl + 2 + 2 * NONCE + 4 > sizeof msg)
    return gt_errorf(GT_EINVAL, "handshake context too long (%zu bytes)", cl);
  size_t k = 0;
  memcpy(msg + k, label, ll + 1);
  k += ll + 1;
  memcpy(msg + k, ctx, cl + 1);
  k += cl + 1;
  memcpy(msg + k, nc, NONCE);
  k += NONCE;
  memcpy(msg + k, ns, NONCE);
  k += NONCE;
  for (int i = 0; i < 4; i++) msg[k++] = (uint8_t)(id >> (8 * i));
  unsigned int ol = 0;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, k, out, &ol) || ol != MAC)
    return gt_errorf(GT_EBACKEND, "HMAC-SHA256 failed in libcrypto");
  return GT_OK;
}

/* The session both ends derive from this handshake's nonces. */
static gt_status open_session(gt_wire_session *s, bool client, const char *secret, const char *context,
                              const uint8_t *nc, const uint8_t *ns, uint32_t id) {
  if (!s) return GT_OK;
  uint8_t salt[2 * NONCE], c2s[GT_WIRE_KEY], s2c[GT_WIRE_KEY];
  memcpy(salt, nc, NONCE);
  memcpy(salt + NONCE, ns, NONCE);
  gt_status st = gt_wire_derive_keys(secret, context, salt, sizeof salt, id, c2s, s2c);
  if (st == GT_OK) st = client ? gt_wire_session_open(s, c2s, s2c) : gt_wire_session_open(s, s2c, c2s);
  OPENSSL_cleanse(c2s, sizeof c2s);
  OPENSSL_cleanse(s2c, sizeof s2c);
  return st;
}

gt_status gt_wire_auth_client(int fd, const char *secret, const char *context, uint32_t id, double deadline,
                              gt_wire_session *session) {
  uint8_t hello[NONCE + 4], ch[NONCE + MAC], want[MAC], proof[MAC];
  GT_TRY(random_bytes(hello, NONCE));
  for (int i = 0; i < 4; i++) hello[NONCE + i] = (uint8_t)(id >> (8 * i));
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_HELLO, 0, hello, sizeof hello, deadline, NULL));
  gt_wire_hdr h = {0};
  uint8_t raw[256];
  gt_status st = gt_wire_recv_frame(fd, GT_MSG_CHALLENGE, &h, raw, sizeof raw, deadline, NULL);
  if (st == GT_EFORMAT && h.type == GT_MSG_REJECT) return gt_errorf(GT_EAUTH, "the server rejected the connection");
  GT_TRY(st);
  if (h.len != sizeof ch) return gt_errorf(GT_EFORMAT, "challenge of %u bytes, expected %zu", h.len, sizeof ch);
  memcpy(ch, raw, sizeof ch);
  GT_TRY(mac(secret, "srv", context, hello, ch, id, want));
  if (CRYPTO_memcmp(want, ch + NONCE, MAC) != 0)
    return gt_errorf(GT_EAUTH,
                     "the server could not prove it knows the job secret (for '%s'): check GT_JOB_SECRET on every rank",
                     context);
  GT_TRY(mac(secret, "cli", context, hello, ch, id, proof));
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_PROOF, 0, proof, sizeof proof, deadline, NULL));
  uint8_t hdr[GT_WIRE_HDR];
  GT_TRY(gt_wire_recv_all(fd, hdr, sizeof hdr, deadline, NULL));
  GT_TRY(gt_wire_hdr_decode(hdr, &h));
  if (h.type == GT_MSG_ACCEPT && h.len == 0) return open_session(session, true, secret, context, hello, ch, id);
  if (h.type == GT_MSG_REJECT)
    return gt_errorf(GT_EAUTH, "the server rejected our proof of the job secret: check GT_JOB_SECRET on every rank");
  return gt_errorf(GT_EFORMAT, "unexpected frame type %u after the handshake", h.type);
}

static gt_status reject(int fd, double deadline, gt_status code, const char *reason) {
  char why[256]; /* reason may be this thread's error message: copy it first */
  snprintf(why, sizeof why, "%s", reason);
  /* Best effort: the peer may be gone or hostile. */
  gt_wire_send_frame(fd, GT_MSG_REJECT, 0, why, (uint32_t)strlen(why),
                     deadline < gt_now() + 0.1 ? deadline : gt_now() + 0.1, NULL);
  return gt_errorf(code, "%s", why);
}

gt_status gt_wire_auth_server(int fd, const char *secret, const char *context, uint32_t *id, double deadline,
                              gt_wire_session *session) {
  uint8_t hello[NONCE + 4], ch[NONCE + MAC], want[MAC], proof[MAC];
  gt_wire_hdr h;
  gt_status st = gt_wire_recv_frame(fd, GT_MSG_HELLO, &h, hello, sizeof hello, deadline, NULL);
  if (st != GT_OK) return st == GT_EFORMAT ? reject(fd, deadline, st, gt_last_error()) : st;
  if (h.len != sizeof hello) return reject(fd, deadline, GT_EFORMAT, "malformed hello");
  uint32_t cid = 0;
  for (int i = 0; i < 4; i++) cid |= (uint32_t)hello[NONCE + i] << (8 * i);
  GT_TRY(random_bytes(ch, NONCE));
  GT_TRY(mac(secret, "srv", context, hello, ch, cid, ch + NONCE));
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_CHALLENGE, 0, ch, sizeof ch, deadline, NULL));
  st = gt_wire_recv_frame(fd, GT_MSG_PROOF, &h, proof, sizeof proof, deadline, NULL);
  if (st != GT_OK) return st == GT_EFORMAT ? reject(fd, deadline, st, gt_last_error()) : st;
  GT_TRY(mac(secret, "cli", context, hello, ch, cid, want));
  if (h.len != MAC || CRYPTO_memcmp(want, proof, MAC) != 0)
    return reject(fd, deadline, GT_EAUTH, "wrong proof of the job secret");
  GT_TRY(open_session(session, false, secret, context, hello, ch, cid));
  gt_status sent = gt_wire_send_frame(fd, GT_MSG_ACCEPT, 0, NULL, 0, deadline, NULL);
  if (sent != GT_OK) {
    if (session) gt_wire_session_close(session);
    return sent;
  }
  *id = cid;
  return GT_OK;
}
