/* CRC-32C (Castagnoli), the checksum of TFRecord framing: a table, or the
 * SSE4.2 crc32 instruction where the CPU running the program has it. */
#ifndef GIANT_RUN_CRC32C_H
#define GIANT_RUN_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes at p (crc32c("123456789") = 0xe3069283), by the
 * fastest way this CPU has. */
uint32_t run_crc32c(const void *p, size_t n);
/* TFRecord's masked form: rotated right by 15 bits plus a constant, so that
 * a CRC stored beside the bytes it covers is not itself a likely CRC. */
uint32_t run_crc32c_masked(const void *p, size_t n);
/* Each way alone, for tests: the table, and the instruction (false when
 * this CPU lacks it; *out is then unset). */
uint32_t run_crc32c_table(const void *p, size_t n);
bool run_crc32c_hw(const void *p, size_t n, uint32_t *out);

#endif
