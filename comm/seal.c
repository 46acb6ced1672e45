/* Authenticated frames after the handshake (wire.h, "sealed frames").
 *
 * The handshake leaves both ends with the secret and two fresh nonces;
 * HKDF-SHA256 turns them into one key per direction. Every frame then
 * carries, after its 16-byte header, a 16-byte tag: HMAC-SHA256 under the
 * sender's key of ('H', the frame's count on this connection, the header),
 * cut to 16 bytes. The count is never sent: both ends keep it, so a frame
 * replayed, dropped or reordered fails its tag like a forged one. With
 * payload integrity on, the payload is followed by a second tag, AES-256-
 * GMAC of the payload with the count in its nonce, computed as the bytes
 * stream. With encryption on, the payload is AES-256-GCM's ciphertext
 * under the same key and nonce scheme, encrypted and decrypted piece by
 * piece as it streams, and the second tag is GCM's; the header stays in
 * the clear, tagged (docs/security.md). */
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "comm/wire.h"
#include "giant/log.h"

/* OpenSSL frees its per-thread state from a thread-exit hook, and at
 * process exit, from an atexit handler, tears the hook down. A thread
 * still running then (gRPC's detached threads, say) exits after the
 * teardown, and its error queue is lost: a leak under LeakSanitizer, and
 * a race for no gain, since the process is ending. Giant turns the
 * handler off before anything in the process starts OpenSSL (this runs
 * when the library loads); whatever OpenSSL holds at exit stays reachable
 * and goes with the process. */
__attribute__((constructor)) static void openssl_without_atexit(void) {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;
static void fetch_hmac(void) { hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL); }

/* The payload key: a PRF of the direction's key, so the two tags never share one. */
static gt_status payload_key(const uint8_t key[GT_WIRE_KEY], uint8_t out[32]) {
  static const char label[] = "giant payload tags";
  size_t n = 0;
  if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, GT_WIRE_KEY, (const unsigned char *)label, sizeof label - 1,
                 out, 32, &n) ||
      n != 32)
    return gt_errorf(GT_EBACKEND, "HMAC-SHA256 failed in libcrypto");
  return GT_OK;
}

gt_status gt_wire_mac_init(gt_wire_mac *m, const uint8_t key[GT_WIRE_KEY]) {
  pthread_once(&hmac_once, fetch_hmac);
  memset(m, 0, sizeof *m);
  m->hmac = hmac_alg ? EVP_MAC_CTX_new(hmac_alg) : NULL;
  m->gcm = EVP_CIPHER_CTX_new();
  if (!m->hmac || !m->gcm) {
    gt_wire_mac_free(m);
    return gt_errorf(GT_EBACKEND, "HMAC or AES-GCM is not available from libcrypto");
  }
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                         OSSL_PARAM_construct_end()};
  uint8_t pk[32];
  gt_status st = payload_key(key, pk);
  if (st == GT_OK && (!EVP_MAC_init(m->hmac, key, GT_WIRE_KEY, params) ||
                      !EVP_EncryptInit_ex(m->gcm, EVP_aes_256_gcm(), NULL, pk, NULL)))
    st = gt_errorf(GT_EBACKEND, "HMAC-SHA256 or AES-256-GCM failed to start in libcrypto");
  OPENSSL_cleanse(pk, sizeof pk);
  if (st != GT_OK) gt_wire_mac_free(m);
  return st;
}

void gt_wire_mac_free(gt_wire_mac *m) {
  EVP_MAC_CTX_free(m->hmac);
  EVP_CIPHER_CTX_free(m->gcm);
  m->hmac = m->gcm = NULL;
}

/* A payload's nonce: the label ('P' a tag alone, 'E' encryption) and the
 * frame's count. Each direction has its own key and counts its frames,
 * and a connection uses one label, so a nonce never repeats under a key. */
static void payload_iv(uint8_t iv[12], char label, uint64_t count) {
  memset(iv, 0, 12);
  iv[3] = (uint8_t)label;
  for (int i = 0; i < 8; i++) iv[4 + i] = (uint8_t)(count >> (8 * i));
}

/* Headers ('H') are tagged with HMAC-SHA256 over the label, the count and
 * the bytes. Payloads ('P') with AES-256-GMAC, the count in its nonce: the
 * same strength at several times the speed where AES and carry-less
 * multiplication are in hardware, which is what makes payload integrity
 * affordable on bulk transfers (bench_comm). A nonce never repeats under
 * a key: each direction has its own key and counts its frames. */
gt_status gt_wire_mac_start(gt_wire_mac *m, char label, uint64_t count) {
  m->payload = label == 'P';
  if (m->payload) {
    uint8_t iv[12];
    payload_iv(iv, label, count);
    if (!EVP_EncryptInit_ex(m->gcm, NULL, NULL, NULL, iv)) return gt_errorf(GT_EBACKEND, "AES-GCM failed in libcrypto");
    return GT_OK;
  }
  uint8_t lead[9] = {(uint8_t)label};
  for (int i = 0; i < 8; i++) lead[1 + i] = (uint8_t)(count >> (8 * i));
  /* A NULL key starts a new tag under the key given at init. */
  if (!EVP_MAC_init(m->hmac, NULL, 0, NULL) || !EVP_MAC_update(m->hmac, lead, sizeof lead))
    return gt_errorf(GT_EBACKEND, "HMAC-SHA256 failed in libcrypto");
  return GT_OK;
}

gt_status gt_wire_mac_add(gt_wire_mac *m, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    size_t k = n < (1u << 30) ? n : 1u << 30; /* the calls take an int */
    int out = 0;
    int ok = m->payload ? EVP_EncryptUpdate(m->gcm, NULL, &out, b, (int)k) : EVP_MAC_update(m->hmac, b, k);
    if (!ok) return gt_errorf(GT_EBACKEND, "computing a frame's tag failed in libcrypto");
    b += k;
    n -= k;
  }
  return GT_OK;
}

gt_status gt_wire_mac_tag(gt_wire_mac *m, uint8_t tag[GT_WIRE_TAG]) {
  if (m->payload) {
    uint8_t none[16];
    int out = 0;
    if (!EVP_EncryptFinal_ex(m->gcm, none, &out) ||
        !EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_GET_TAG, GT_WIRE_TAG, tag))
      return gt_errorf(GT_EBACKEND, "AES-GMAC failed in libcrypto");
    return GT_OK;
  }
  uint8_t full[32];
  size_t n = 0;
  if (!EVP_MAC_final(m->hmac, full, &n, sizeof full) || n != sizeof full)
    return gt_errorf(GT_EBACKEND, "HMAC-SHA256 failed in libcrypto");
  memcpy(tag, full, GT_WIRE_TAG);
  return GT_OK;
}

gt_status gt_wire_mac_check(gt_wire_mac *m, const uint8_t tag[GT_WIRE_TAG], const char *what) {
  uint8_t want[GT_WIRE_TAG];
  GT_TRY(gt_wire_mac_tag(m, want));
  if (CRYPTO_memcmp(want, tag, GT_WIRE_TAG) != 0) {
    gt_status s = gt_errorf(GT_EAUTH,
                            "%s failed authentication: it was forged, replayed, reordered or damaged "
                            "on the way; refusing it and closing the connection",
                            what);
    gt_err("%s", gt_last_error());
    return s;
  }
  return GT_OK;
}

gt_status gt_wire_crypt_start(gt_wire_mac *m, bool encrypt, uint64_t count) {
  uint8_t iv[12];
  payload_iv(iv, 'E', count);
  m->payload = true;
  if (!EVP_CipherInit_ex(m->gcm, NULL, NULL, NULL, iv, encrypt ? 1 : 0))
    return gt_errorf(GT_EBACKEND, "AES-GCM failed in libcrypto");
  return GT_OK;
}

gt_status gt_wire_crypt(gt_wire_mac *m, void *out, const void *in, size_t n) {
  uint8_t *o = out;
  const uint8_t *b = in;
  while (n) {
    size_t k = n < (1u << 30) ? n : 1u << 30; /* the calls take an int */
    int got = 0;
    /* GCM is a stream cipher: every byte in gives one out, at once. */
    if (!EVP_CipherUpdate(m->gcm, o, &got, b, (int)k) || got != (int)k)
      return gt_errorf(GT_EBACKEND, "AES-GCM failed in libcrypto");
    o += k;
    b += k;
    n -= k;
  }
  return GT_OK;
}

gt_status gt_wire_crypt_tag(gt_wire_mac *m, uint8_t tag[GT_WIRE_TAG]) {
  uint8_t none[16];
  int out = 0;
  if (!EVP_EncryptFinal_ex(m->gcm, none, &out) || !EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_GET_TAG, GT_WIRE_TAG, tag))
    return gt_errorf(GT_EBACKEND, "AES-GCM failed in libcrypto");
  return GT_OK;
}

gt_status gt_wire_crypt_check(gt_wire_mac *m, const uint8_t tag[GT_WIRE_TAG], uint64_t count, const char *from) {
  uint8_t none[16];
  int out = 0;
  if (!EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_SET_TAG, GT_WIRE_TAG, (void *)tag))
    return gt_errorf(GT_EBACKEND, "AES-GCM failed in libcrypto");
  /* The final step compares the tags, in constant time. */
  if (EVP_DecryptFinal_ex(m->gcm, none, &out) <= 0) {
    ERR_clear_error();
    gt_status s = gt_errorf(GT_EAUTH,
                            "frame %llu from %s failed its AES-GCM tag: corrupted or forged on the way (or replayed "
                            "or reordered); refusing it and closing the connection",
                            (unsigned long long)count, from);
    gt_err("%s", gt_last_error());
    return s;
  }
  return GT_OK;
}

gt_status gt_wire_derive_keys(const char *secret, const char *context, const uint8_t *nonces, size_t nonce_len,
                              uint32_t id, uint8_t client_to_server[GT_WIRE_KEY],
                              uint8_t server_to_client[GT_WIRE_KEY]) {
  EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
  EVP_KDF_CTX *k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
  EVP_KDF_free(kdf);
  if (!k) return gt_errorf(GT_EBACKEND, "HKDF is not available from libcrypto");
  gt_status st = GT_OK;
  for (int dir = 0; dir < 2 && st == GT_OK; dir++) {
    char info[512];
    int n = snprintf(info, sizeof info, "giant frames %s %s %u", dir ? "s2c" : "c2s", context, id);
    if (n < 0 || (size_t)n >= sizeof info) {
      st = gt_errorf(GT_EINVAL, "handshake context too long (%zu bytes)", strlen(context));
      break;
    }
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, strlen(secret)),
                           OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)nonces, nonce_len),
                           OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, (size_t)n),
                           OSSL_PARAM_construct_end()};
    if (EVP_KDF_derive(k, dir ? server_to_client : client_to_server, GT_WIRE_KEY, params) != 1)
      st = gt_errorf(GT_EBACKEND, "HKDF-SHA256 failed in libcrypto");
  }
  EVP_KDF_CTX_free(k);
  return st;
}

gt_status gt_wire_session_open(gt_wire_session *s, const uint8_t tx_key[GT_WIRE_KEY],
                               const uint8_t rx_key[GT_WIRE_KEY]) {
  memset(s, 0, sizeof *s);
  s->mode = GT_WIRE_MAC;
  GT_TRY(gt_wire_mac_init(&s->tx, tx_key));
  gt_status st = gt_wire_mac_init(&s->rx, rx_key);
  if (st != GT_OK) gt_wire_mac_free(&s->tx);
  return st;
}

void gt_wire_session_close(gt_wire_session *s) {
  gt_wire_mac_free(&s->tx);
  gt_wire_mac_free(&s->rx);
  s->tx_count = s->rx_count = 0;
}

gt_status gt_wire_seal_header(gt_wire_session *s, uint8_t out[GT_WIRE_SEALED_HDR], uint16_t type, uint32_t seq,
                              uint32_t len) {
  gt_wire_hdr_encode(out, type, seq, len);
  GT_TRY(gt_wire_mac_start(&s->tx, 'H', s->tx_count));
  GT_TRY(gt_wire_mac_add(&s->tx, out, GT_WIRE_HDR));
  return gt_wire_mac_tag(&s->tx, out + GT_WIRE_HDR);
}

gt_status gt_wire_open_header(gt_wire_session *s, const uint8_t in[GT_WIRE_SEALED_HDR], gt_wire_hdr *h,
                              const char *from) {
  char what[160];
  snprintf(what, sizeof what, "frame %llu from %s", (unsigned long long)s->rx_count, from);
  GT_TRY(gt_wire_mac_start(&s->rx, 'H', s->rx_count));
  GT_TRY(gt_wire_mac_add(&s->rx, in, GT_WIRE_HDR));
  GT_TRY(gt_wire_mac_check(&s->rx, in + GT_WIRE_HDR, what));
  return gt_wire_hdr_decode(in, h);
}

/* An encrypted frame: its payload through a small buffer, piece by piece. */
static gt_status send_encrypted(int fd, gt_wire_session *s, const uint8_t h[GT_WIRE_SEALED_HDR], const void *payload,
                                uint32_t len, double deadline, const atomic_int *abort_flag) {
  uint8_t piece[16384], tag[GT_WIRE_TAG];
  GT_TRY(gt_wire_crypt_start(&s->tx, true, s->tx_count));
  s->tx_count++; /* the count is spent: a failure below breaks the connection */
  GT_TRY(gt_wire_send_all(fd, h, GT_WIRE_SEALED_HDR, deadline, abort_flag));
  for (uint32_t off = 0; off < len;) {
    uint32_t n = len - off < sizeof piece ? len - off : (uint32_t)sizeof piece;
    GT_TRY(gt_wire_crypt(&s->tx, piece, (const uint8_t *)payload + off, n));
    GT_TRY(gt_wire_send_all(fd, piece, n, deadline, abort_flag));
    off += n;
  }
  GT_TRY(gt_wire_crypt_tag(&s->tx, tag));
  return gt_wire_send_all(fd, tag, sizeof tag, deadline, abort_flag);
}

gt_status gt_wire_send_sealed(int fd, gt_wire_session *s, uint16_t type, uint32_t seq, const void *payload,
                              uint32_t len, double deadline, const atomic_int *abort_flag) {
  uint8_t h[GT_WIRE_SEALED_HDR], tag[GT_WIRE_TAG];
  GT_TRY(gt_wire_seal_header(s, h, type, seq, len));
  if (s->mode == GT_WIRE_ENCRYPT) return send_encrypted(fd, s, h, payload, len, deadline, abort_flag);
  GT_TRY(gt_wire_mac_start(&s->tx, 'P', s->tx_count));
  GT_TRY(gt_wire_mac_add(&s->tx, payload, len));
  GT_TRY(gt_wire_mac_tag(&s->tx, tag));
  s->tx_count++;
  GT_TRY(gt_wire_send_all(fd, h, sizeof h, deadline, abort_flag));
  if (len) GT_TRY(gt_wire_send_all(fd, payload, len, deadline, abort_flag));
  return gt_wire_send_all(fd, tag, sizeof tag, deadline, abort_flag);
}

gt_status gt_wire_recv_sealed_header(int fd, gt_wire_session *s, gt_wire_hdr *h, const char *from, double deadline,
                                     const atomic_int *abort_flag) {
  uint8_t raw[GT_WIRE_SEALED_HDR];
  GT_TRY(gt_wire_recv_all(fd, raw, sizeof raw, deadline, abort_flag));
  return gt_wire_open_header(s, raw, h, from);
}

gt_status gt_wire_recv_sealed_payload(int fd, gt_wire_session *s, void *payload, uint32_t len, const char *from,
                                      double deadline, const atomic_int *abort_flag) {
  uint8_t tag[GT_WIRE_TAG];
  if (len) GT_TRY(gt_wire_recv_all(fd, payload, len, deadline, abort_flag));
  GT_TRY(gt_wire_recv_all(fd, tag, sizeof tag, deadline, abort_flag));
  if (s->mode == GT_WIRE_ENCRYPT) {
    GT_TRY(gt_wire_crypt_start(&s->rx, false, s->rx_count));
    GT_TRY(gt_wire_crypt(&s->rx, payload, payload, len));
    gt_status st = gt_wire_crypt_check(&s->rx, tag, s->rx_count, from);
    if (st != GT_OK) {
      OPENSSL_cleanse(payload, len); /* nothing unverified is left to read */
      return st;
    }
    s->rx_count++;
    return GT_OK;
  }
  char what[160];
  snprintf(what, sizeof what, "the payload of frame %llu from %s", (unsigned long long)s->rx_count, from);
  GT_TRY(gt_wire_mac_start(&s->rx, 'P', s->rx_count));
  GT_TRY(gt_wire_mac_add(&s->rx, payload, len));
  GT_TRY(gt_wire_mac_check(&s->rx, tag, what));
  s->rx_count++;
  return GT_OK;
}
