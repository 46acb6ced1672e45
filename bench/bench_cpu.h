/* Which CPU a benchmark ran on, as one token for its last line. */
#ifndef GIANT_BENCH_CPU_H
#define GIANT_BENCH_CPU_H

#include <stddef.h>

/* Writes "<model name>/<ISA flags>" into out, e.g.
 * "AMD_EPYC_9454/avx2,fma" or "Intel_Xeon_Platinum_8480+/avx2,fma,avx512f,
 * amx_tile": the model from /proc/cpuinfo with spaces as '_', then those of
 * the flags that choose Giant's CPU kernels. "unknown" where /proc says
 * nothing. */
void bench_cpu_features(char *out, size_t cap);

#endif
