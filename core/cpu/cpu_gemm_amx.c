/* bf16 matrix products on Intel AMX tiles.
 *
 * Where the CPU has AMX (Sapphire Rapids and later), a TDPBF16PS multiplies
 * a 16x32 bf16 tile by a 32x16 one into a 16x16 fp32 tile in one
 * instruction: sixteen times the multiply-adds of an AVX-512 FMA, which is
 * what makes mixed precision pay on the CPU too. B is packed first into
 * 1 KiB tiles in the pair-interleaved layout the instruction reads (16
 * k-pairs x 16 columns x 2); A is read in place when it is row-major and
 * tiles exactly, and otherwise packed too (16 rows x 32 k). Packing pads
 * with zeros to whole tiles, so any shape, transpose and leading dimension
 * comes down to one inner loop. Each thread computes 32x32 blocks of C with all
 * eight tile registers (four of C, two of A, two of B), then scales them
 * into C with alpha and beta.
 *
 * The products of bf16 pairs are exact and accumulate in fp32, as on a GPU;
 * the instruction treats denormal inputs as zero, which weights and
 * activations never are in practice.
 *
 * Linux hands out the tile state only on request (arch_prctl), once per
 * process; gt_cpu_amx_available asks, and says no on any other CPU or OS.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

enum { TK = 32, TM = 16, TN = 16, TILE = TM * TK /* bf16 elements in a tile */ };

typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

static bool cpu_has_amx_bf16(void) {
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  if (!tile || !bf16) return false;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!(c & (1u << 27))) return false; /* no OSXSAVE: cannot ask the OS */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17); /* the OS manages tile config and data */
}

bool gt_cpu_amx_available(void) {
  static int state = -1; /* -1 unknown, 0 no, 1 yes; the answer never changes */
  int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
  if (s < 0) {
    /* AVX-512 too: this file is compiled for x86-64-v4 in a portable build. */
    s = cpu_has_amx_bf16() && __builtin_cpu_supports("x86-64-v4") &&
        syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    __atomic_store_n(&state, s, __ATOMIC_RELEASE);
  }
  return s == 1;
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Floats of scratch a product needs: the packed A and B. */
size_t gt_cpu_amx_scratch_floats(int m, int n, int k) {
  size_t kp = round_up((size_t)k, TK), mp = round_up((size_t)m, 32), np = round_up((size_t)n, 32);
  return (kp * (mp + np) + 1) / 2; /* bf16 elements, two to a float */
}

/* op(X)[i][p] of a row-major bf16 matrix. */
static inline uint16_t elem(const uint16_t *x, int ld, bool trans, int i, int p) {
  return trans ? x[(size_t)p * ld + i] : x[(size_t)i * ld + p];
}

/* Tile (mt, kt) of A: 16 rows of 32 k. A tile wholly inside the matrix is
 * copied along the source's contiguous direction; edge tiles element by
 * element, with zeros outside. */
static void pack_a_tile(uint16_t *tile, const uint16_t *a, int lda, bool trans, int m, int k, int mt, int kt) {
  int i0 = mt * TM, p0 = kt * TK;
  if (i0 + TM <= m && p0 + TK <= k) {
    if (!trans) {
      for (int r = 0; r < TM; r++) memcpy(tile + r * TK, a + (size_t)(i0 + r) * lda + p0, TK * sizeof *tile);
    } else {
      for (int c = 0; c < TK; c++) {
        const uint16_t *src = a + (size_t)(p0 + c) * lda + i0; /* 16 rows of op(A), contiguous */
        for (int r = 0; r < TM; r++) tile[r * TK + c] = src[r];
      }
    }
    return;
  }
  for (int r = 0; r < TM; r++)
    for (int c = 0; c < TK; c++) tile[r * TK + c] = i0 + r < m && p0 + c < k ? elem(a, lda, trans, i0 + r, p0 + c) : 0;
}

/* Tile (nt, kt) of B: row q holds k-pair (2q, 2q+1) of 16 columns,
 * interleaved: [b(2q, j), b(2q+1, j)] for j = 0..15. */
static void pack_b_tile(uint16_t *tile, const uint16_t *b, int ldb, bool trans, int k, int n, int nt, int kt) {
  int j0 = nt * TN, p0 = kt * TK;
  if (j0 + TN <= n && p0 + TK <= k) {
    if (trans) {
      /* Column j of op(B) is row j of b: its k-pairs are adjacent, so the
       * tile is a 16 x 16 transpose of 32-bit pairs. */
      for (int j = 0; j < TN; j++) {
        const uint16_t *src = b + (size_t)(j0 + j) * ldb + p0;
        for (int q = 0; q < TK / 2; q++) memcpy(tile + q * 2 * TN + 2 * j, src + 2 * q, 2 * sizeof *tile);
      }
    } else {
      for (int q = 0; q < TK / 2; q++) {
        const uint16_t *r0 = b + (size_t)(p0 + 2 * q) * ldb + j0, *r1 = r0 + ldb;
        uint16_t *dst = tile + q * 2 * TN;
        for (int j = 0; j < TN; j++) {
          dst[2 * j] = r0[j];
          dst[2 * j + 1] = r1[j];
        }
      }
    }
    return;
  }
  for (int q = 0; q < TK / 2; q++)
    for (int j = 0; j < TN; j++)
      for (int h = 0; h < 2; h++) {
        int p = p0 + 2 * q + h, col = j0 + j;
        tile[q * 2 * TN + 2 * j + h] = col < n && p < k ? elem(b, ldb, trans, p, col) : 0;
      }
}

/* A (m x k after op) into tiles [mt][kt], B (k x n after op) into [nt][kt]. */
static void pack(uint16_t *ap, uint16_t *bp, const gt_gemm_ex_args *g, const uint16_t *a, const uint16_t *b, int mtiles,
                 int ntiles, int ktiles, int nt) {
  int na = ap ? mtiles * ktiles : 0, total = na + ntiles * ktiles;
  bool ta = g->trans_a == GT_TRANS, tb = g->trans_b == GT_TRANS;
#pragma omp parallel for num_threads(nt) schedule(static) if ((int64_t)total * TILE >= GT_CPU_PAR_MIN)
  for (int t = 0; t < total; t++) {
    if (t < na)
      pack_a_tile(ap + (size_t)t * TILE, a, g->lda, ta, g->m, g->k, t / ktiles, t % ktiles);
    else
      pack_b_tile(bp + (size_t)(t - na) * TILE, b, g->ldb, tb, g->k, g->n, (t - na) / ktiles, (t - na) % ktiles);
  }
}

static void load_config(void) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) { /* every tile 16 rows of 64 bytes */
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

/* Where a block's A tiles come from: packed tiles, or (a row-major A that
 * tiles exactly) the matrix itself, 16 rows of 32 k read with its stride. */
typedef struct a_src {
  const uint16_t *base;
  size_t row_bytes; /* tile row stride */
  size_t next_k;    /* elements from one k-tile to the next */
  size_t next_rows; /* elements from 16 rows to the next 16 */
} a_src;

/* The 32x32 block of C whose A tiles start at a0: tiles 0-3 accumulate,
 * 4-5 hold A, 6-7 B. */
static void block(const a_src *as, const uint16_t *a0, const uint16_t *bp, int ktiles, float *out /* 32 x 32 */) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t *a1 = a0 + as->next_rows, *b1 = bp + (size_t)ktiles * TILE;
  for (int kt = 0; kt < ktiles; kt++) {
    _tile_loadd(4, a0 + (size_t)kt * as->next_k, as->row_bytes);
    _tile_loadd(5, a1 + (size_t)kt * as->next_k, as->row_bytes);
    _tile_loadd(6, bp + (size_t)kt * TILE, 64);
    _tile_loadd(7, b1 + (size_t)kt * TILE, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 128);
  _tile_stored(1, out + 16, 128);
  _tile_stored(2, out + 16 * 32, 128);
  _tile_stored(3, out + 16 * 32 + 16, 128);
}

gt_status gt_cpu_gemm_bf16_amx(gt_backend *be, const gt_gemm_ex_args *g, int64_t e, uint16_t *scratch) {
  int m = g->m, n = g->n, k = g->k;
  int ktiles = (int)(round_up((size_t)k, TK) / TK);
  int mtiles = (int)(round_up((size_t)m, 32) / TM), ntiles = (int)(round_up((size_t)n, 32) / TN);
  const uint16_t *a = (const uint16_t *)g->a + e * g->stride_a, *b = (const uint16_t *)g->b + e * g->stride_b;
  float *c = (float *)g->c + e * g->stride_c;
  /* A row-major A that tiles exactly is read in place: no copy of what is
   * often the largest operand (activations, output gradients). */
  bool direct = g->trans_a != GT_TRANS && m % 32 == 0 && k % TK == 0;
  uint16_t *ap = direct ? NULL : scratch, *bp = scratch + (direct ? 0 : (size_t)mtiles * ktiles * TILE);
  a_src as = direct ? (a_src){a, (size_t)g->lda * 2, TK, (size_t)TM * g->lda}
                    : (a_src){ap, TK * 2, TILE, (size_t)ktiles * TILE};
  int nt = gt_cpu_threads(be);
  pack(ap, bp, g, a, b, mtiles, ntiles, ktiles, nt);
  int mblocks = mtiles / 2, nblocks = ntiles / 2;
  float alpha = g->alpha, beta = g->beta;
  int ldc = g->ldc;
  bool a_outer = mtiles > ntiles;
#pragma omp parallel num_threads(nt) if (mblocks * nblocks > 1)
  {
    load_config();
    float tmp[32 * 32];
    /* The smaller packed operand is walked in the inner loop, so it stays
     * in cache, and the larger one streams from memory once. */
#pragma omp for schedule(static)
    for (int blk = 0; blk < mblocks * nblocks; blk++) {
      int nb = a_outer ? blk % nblocks : blk / mblocks, mb = a_outer ? blk / nblocks : blk % mblocks;
      block(&as, as.base + 2 * (size_t)mb * as.next_rows, bp + (size_t)(2 * nb) * ktiles * TILE, ktiles, tmp);
      int rows = m - 32 * mb < 32 ? m - 32 * mb : 32, cols = n - 32 * nb < 32 ? n - 32 * nb : 32;
      for (int r = 0; r < rows; r++) {
        float *crow = c + (size_t)(32 * mb + r) * ldc + 32 * nb;
        const float *t = tmp + r * 32;
        if (beta == 0.0f)
          for (int j = 0; j < cols; j++) crow[j] = alpha * t[j];
        else
          for (int j = 0; j < cols; j++) crow[j] = alpha * t[j] + beta * crow[j];
      }
    }
    _tile_release();
  }
  return GT_OK;
}
