/* Parameter initialisation as a pure function of (seed, name, index).
 *
 * Each element's value is computed from a counter-based hash, not drawn from
 * a sequential generator, so a rank that holds only a slice of a parameter
 * (tensor parallelism, ZeRO) computes exactly the values a single process
 * would, without generating the rest. */
#include <math.h>
#include <stdint.h>

#include "giant/model.h"
#include "core/model/model_engine.h"

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* Uniform in (0, 1]: 53 random bits, never zero (log is taken). */
static double uniform(uint64_t key) { return ((double)(splitmix64(key) >> 11) + 1.0) * 0x1.0p-53; }

float gt_init_value(uint64_t seed, const char *name, size_t i, gt_init_kind kind, float std) {
  switch (kind) {
    case GT_INIT_ZEROS: return 0.0f;
    case GT_INIT_ONES: return 1.0f;
    case GT_INIT_NORMAL: {
      uint64_t base = splitmix64(seed ^ fnv1a(name));
      double u1 = uniform(base + 2 * (uint64_t)i), u2 = uniform(base + 2 * (uint64_t)i + 1);
      double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
      return (float)(z * std);
    }
  }
  return 0.0f;
}
