/* Choosing the CPU kernels at run time.
 *
 * A build must run at full speed on any CPU of its architecture, not only on
 * the one it was built on. The kernels are therefore compiled once per
 * instruction-set level (cpu_isa.h, core/cpu/CMakeLists.txt), and the
 * backend takes the table of the best level that the CPU reports and the OS
 * has enabled (__builtin_cpu_supports reads cpuid and, for AVX and AVX-512,
 * checks that the OS saves their registers). GT_CPU_KERNELS names a level
 * instead, so the levels can be tested and compared on one machine.
 *
 * A build for one CPU (GIANT_NATIVE or GIANT_MARCH) has a single level, made
 * with the build's own flags.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu_internal.h"

typedef struct cpu_level {
  const char *key;  /* what GT_CPU_KERNELS calls it */
  const char *name; /* what logs show: the instruction sets the kernels use */
  const gt_backend_ops *ops;
  bool (*supported)(void);
} cpu_level;

#ifdef GIANT_CPU_LEVELS_X86
extern const gt_backend_ops gt_cpu_ops_avx512, gt_cpu_ops_avx2, gt_cpu_ops_sse2;

/* x86-64-v4: AVX-512 F, BW, CD, DQ and VL. */
static bool has_avx512(void) { return __builtin_cpu_supports("x86-64-v4"); }
/* x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE. */
static bool has_avx2(void) { return __builtin_cpu_supports("x86-64-v3"); }
static bool always(void) { return true; }

/* Best first. */
static const cpu_level levels[] = {
    {"avx512", "avx512", &gt_cpu_ops_avx512, has_avx512},
    {"avx2", "avx2+fma", &gt_cpu_ops_avx2, has_avx2},
    {"sse2", "sse2", &gt_cpu_ops_sse2, always},
};
#else
extern const gt_backend_ops gt_cpu_ops_build;

/* Built for one CPU: the compiler may have used any instruction the build
 * machine has, in the kernels and everywhere else. Catch the commonest
 * mismatch with a message instead of an illegal instruction later. */
static bool build_target_supported(void) {
#if defined(__x86_64__) && defined(__AVX512F__)
  if (!__builtin_cpu_supports("avx512f")) return false;
#endif
#if defined(__x86_64__) && defined(__AVX2__)
  if (!__builtin_cpu_supports("avx2")) return false;
#endif
  return true;
}

static const cpu_level levels[] = {{"build", GIANT_CPU_BUILD_LEVEL, &gt_cpu_ops_build, build_target_supported}};
#endif

#define NLEVELS (sizeof levels / sizeof levels[0])

static void list_levels(char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < NLEVELS && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", levels[i].key);
}

gt_status gt_cpu_isa_choose(const gt_backend_ops **ops, char *name, size_t name_len) {
  const char *want = getenv("GT_CPU_KERNELS");
  if (want && (!*want || !strcmp(want, "auto"))) want = NULL;
#ifdef __x86_64__
  __builtin_cpu_init();
#endif
  char known[96];
  list_levels(known, sizeof known);
  for (size_t i = 0; i < NLEVELS; i++) {
    const cpu_level *l = &levels[i];
    if (want && strcmp(want, l->key)) continue;
    if (!l->supported()) {
      if (want || NLEVELS == 1)
        return gt_errorf(GT_EUNSUPPORTED, "cpu: the %s kernels need instructions this CPU lacks; %s", l->name,
                         want ? "unset GT_CPU_KERNELS to choose from what it has"
                              : "this build was tuned for another CPU (GIANT_NATIVE or GIANT_MARCH): "
                                "rebuild without them for a portable build");
      continue;
    }
    *ops = l->ops;
    snprintf(name, name_len, "%s", l->name);
    return GT_OK;
  }
  return gt_errorf(GT_EINVAL, "GT_CPU_KERNELS=%s: this build has %s (or auto)", want ? want : "", known);
}
