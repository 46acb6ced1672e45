/* The connection handshake: each side proves it knows the job secret.
 *
 *   client -> HELLO     nonce_c, id, mode_c
 *   server -> CHALLENGE nonce_s, mode_s, HMAC(secret, "srv", ctx, nonce_c, nonce_s, id, mode_c, mode_s)
 *   client -> PROOF     HMAC(secret, "cli", ctx, nonce_c, nonce_s, id, mode_c, mode_s)
 *   server -> ACCEPT | REJECT(reason)
 *
 * Fresh nonces on both sides make a recorded exchange useless; the context
 * keeps a proof for one communicator from opening another. The modes (what
 * each end does to payloads: wire.h) travel in the clear but inside both
 * proofs, so each end learns the other's from a peer that proved the
 * secret, and a difference fails the handshake on both ends with both
 * named, rather than as a wrong secret or as frames neither can read. The
 * secret, both nonces and the mode then give the keys that seal every
 * later frame (seal.c). */
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
                     uint32_t id, uint8_t mode_c, uint8_t mode_s, uint8_t out[MAC]) {
  size_t cl = strlen(ctx), ll = strlen(label);
  uint8_t msg[2048];
  if (ll + cl + 2 + 2 * NONCE + 6 > sizeof msg)
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
  msg[k++] = mode_c;
  msg[k++] = mode_s;
  unsigned int ol = 0;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, k, out, &ol) || ol != MAC)
    return gt_errorf(GT_EBACKEND, "HMAC-SHA256 failed in libcrypto");
  return GT_OK;
}

/* What a mode does, for the message when two ends differ. */
static const char *mode_words(uint8_t m) {
  switch (m) {
    case GT_WIRE_HEADERS: return "not encrypted (headers tagged)";
    case GT_WIRE_MAC: return "not encrypted (headers and payloads tagged)";
    case GT_WIRE_ENCRYPT: return "encrypted (AES-256-GCM)";
    default: return "of an unknown kind";
  }
}

static void mode_differs(char *why, size_t n, uint8_t ours, uint8_t theirs) {
  snprintf(why, n,
           "the peer's frames are %s, this end's %s: every rank must run with the same --comm-encrypt "
           "(GT_COMM_ENCRYPT) and --comm-integrity (GT_COMM_INTEGRITY)",
           mode_words(theirs), mode_words(ours));
}

/* The session both ends derive from this handshake's nonces and mode. */
static gt_status open_session(gt_wire_session *s, bool client, const char *secret, const char *context,
                              const uint8_t *nc, const uint8_t *ns, uint32_t id, uint8_t mode) {
  if (!s) return GT_OK;
  uint8_t salt[2 * NONCE + 1], c2s[GT_WIRE_KEY], s2c[GT_WIRE_KEY];
  memcpy(salt, nc, NONCE);
  memcpy(salt + NONCE, ns, NONCE);
  salt[2 * NONCE] = mode;
  gt_status st = gt_wire_derive_keys(secret, context, salt, sizeof salt, id, c2s, s2c);
  if (st == GT_OK) st = client ? gt_wire_session_open(s, c2s, s2c) : gt_wire_session_open(s, s2c, c2s);
  if (st == GT_OK) s->mode = (gt_wire_mode)mode;
  OPENSSL_cleanse(c2s, sizeof c2s);
  OPENSSL_cleanse(s2c, sizeof s2c);
  return st;
}

gt_status gt_wire_auth_client(int fd, const char *secret, const char *context, gt_wire_mode mode, uint32_t id,
                              double deadline, gt_wire_session *session) {
  uint8_t hello[NONCE + 5], ch[NONCE + 1 + MAC], want[MAC], proof[MAC];
  uint8_t mode_c = (uint8_t)mode;
  GT_TRY(random_bytes(hello, NONCE));
  for (int i = 0; i < 4; i++) hello[NONCE + i] = (uint8_t)(id >> (8 * i));
  hello[NONCE + 4] = mode_c;
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_HELLO, 0, hello, sizeof hello, deadline, NULL));
  gt_wire_hdr h = {0};
  uint8_t raw[256];
  gt_status st = gt_wire_recv_frame(fd, GT_MSG_CHALLENGE, &h, raw, sizeof raw, deadline, NULL);
  if (st == GT_EFORMAT && h.type == GT_MSG_REJECT) return gt_errorf(GT_EAUTH, "the server rejected the connection");
  GT_TRY(st);
  if (h.len != sizeof ch) return gt_errorf(GT_EFORMAT, "challenge of %u bytes, expected %zu", h.len, sizeof ch);
  memcpy(ch, raw, sizeof ch);
  uint8_t mode_s = ch[NONCE];
  GT_TRY(mac(secret, "srv", context, hello, ch, id, mode_c, mode_s, want));
  if (CRYPTO_memcmp(want, ch + NONCE + 1, MAC) != 0)
    return gt_errorf(GT_EAUTH,
                     "the server could not prove it knows the job secret (for '%s'): check GT_JOB_SECRET on every rank",
                     context);
  GT_TRY(mac(secret, "cli", context, hello, ch, id, mode_c, mode_s, proof));
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_PROOF, 0, proof, sizeof proof, deadline, NULL));
  /* Proven both ways: the server, having our proof, fails as we do. */
  if (mode_s != mode_c) {
    char why[256];
    mode_differs(why, sizeof why, mode_c, mode_s);
    return gt_errorf(GT_EINVAL, "%s", why);
  }
  uint8_t hdr[GT_WIRE_HDR];
  GT_TRY(gt_wire_recv_all(fd, hdr, sizeof hdr, deadline, NULL));
  GT_TRY(gt_wire_hdr_decode(hdr, &h));
  if (h.type == GT_MSG_ACCEPT && h.len == 0) return open_session(session, true, secret, context, hello, ch, id, mode_c);
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

gt_status gt_wire_auth_server(int fd, const char *secret, const char *context, gt_wire_mode mode, uint32_t *id,
                              double deadline, gt_wire_session *session) {
  uint8_t hello[NONCE + 5], ch[NONCE + 1 + MAC], want[MAC], proof[MAC];
  uint8_t mode_s = (uint8_t)mode;
  gt_wire_hdr h;
  gt_status st = gt_wire_recv_frame(fd, GT_MSG_HELLO, &h, hello, sizeof hello, deadline, NULL);
  if (st != GT_OK) return st == GT_EFORMAT ? reject(fd, deadline, st, gt_last_error()) : st;
  if (h.len != sizeof hello) return reject(fd, deadline, GT_EFORMAT, "malformed hello");
  uint32_t cid = 0;
  for (int i = 0; i < 4; i++) cid |= (uint32_t)hello[NONCE + i] << (8 * i);
  uint8_t mode_c = hello[NONCE + 4];
  GT_TRY(random_bytes(ch, NONCE));
  ch[NONCE] = mode_s;
  GT_TRY(mac(secret, "srv", context, hello, ch, cid, mode_c, mode_s, ch + NONCE + 1));
  GT_TRY(gt_wire_send_frame(fd, GT_MSG_CHALLENGE, 0, ch, sizeof ch, deadline, NULL));
  st = gt_wire_recv_frame(fd, GT_MSG_PROOF, &h, proof, sizeof proof, deadline, NULL);
  if (st != GT_OK) return st == GT_EFORMAT ? reject(fd, deadline, st, gt_last_error()) : st;
  GT_TRY(mac(secret, "cli", context, hello, ch, cid, mode_c, mode_s, want));
  if (h.len != MAC || CRYPTO_memcmp(want, proof, MAC) != 0)
    return reject(fd, deadline, GT_EAUTH, "wrong proof of the job secret");
  if (mode_c != mode_s) {
    *id = cid; /* a peer of the job, by its proof: the caller may name it */
    char why[256];
    mode_differs(why, sizeof why, mode_s, mode_c);
    return reject(fd, deadline, GT_EINVAL, why);
  }
  GT_TRY(open_session(session, false, secret, context, hello, ch, cid, mode_s));
  gt_status sent = gt_wire_send_frame(fd, GT_MSG_ACCEPT, 0, NULL, 0, deadline, NULL);
  if (sent != GT_OK) {
    if (session) gt_wire_session_close(session);
    return sent;
  }
  *id = cid;
  return GT_OK;
}
