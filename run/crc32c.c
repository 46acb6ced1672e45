/* CRC-32C by a table built once, or by SSE4.2's crc32 instruction. The
 * choice is made when the program runs, not when it is built: one binary
 * runs on CPUs with and without SSE4.2. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82f63b78u /* reversed Castagnoli polynomial */

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
    table[i] = c;
  }
}

uint32_t run_crc32c_table(const void *p, size_t n) {
  pthread_once(&table_once, table_build);
  const unsigned char *b = p;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t c = 0xffffffffu;
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t w;
    memcpy(&w, b, 8); /* unaligned, and x86 is little-endian as the CRC wants */
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n; n--, b++) c32 = _mm_crc32_u8(c32, *b);
  return ~c32;
}

static bool have_sse42(void) { return __builtin_cpu_supports("sse4.2"); }
#else
static uint32_t crc_sse42(const void *p, size_t n) { return run_crc32c_table(p, n); }
static bool have_sse42(void) { return false; }
#endif

bool run_crc32c_hw(const void *p, size_t n, uint32_t *out) {
  if (!have_sse42()) return false;
  *out = crc_sse42(p, n);
  return true;
}

uint32_t run_crc32c(const void *p, size_t n) {
  uint32_t c;
  return run_crc32c_hw(p, n, &c) ? c : run_crc32c_table(p, n);
}

uint32_t run_crc32c_masked(const void *p, size_t n) {
  uint32_t c = run_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
