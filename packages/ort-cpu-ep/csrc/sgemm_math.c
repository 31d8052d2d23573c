/* float32 GEMM for the MatMul C kernel (sgemm_kernel.c): C[:, n0:n1] = A @ B[:, n0:n1], row-major, one thread.
 *
 * Blocked as BLIS / MLAS do: K in blocks of SG_KC; for each, B's columns in blocks of SG_NC packed into panels
 * of NR columns (the packed block stays in L2, each panel near L1), zeros past N; a full panel of a plain B is
 * packed by its first row tile as it computes, under the multiply-adds. A is not packed: the
 * micro-kernel broadcasts its values from MR row pointers (measured: as fast as packing A, and no per-thread
 * copy of A, so threads can take columns in any chunks). The micro-kernel holds an MR x NR tile of C in
 * registers and adds one rank-1 update per k: NR/VL vector loads of B, MR broadcasts of A, MR x NR/VL fused
 * multiply-adds. The first K block writes C, the later ones add to it (C need not be zeroed).
 * A B prepacked whole at initialization (p->bp: a constant weight, sgemm_prepack.c) is read in place instead.
 * A few rows (decode) skip the packing: B is streamed once, row by row (sg_skinny; a transposed B by dot
 * products of its rows, sg_skinny_t). A transposed B (N x K, FusedMatMul transB) of more rows is packed from its rows; alpha scales each block's products before they are stored.
 *
 * One tile shape per x86-64 level, chosen at run time by the CPU: AVX-512 6 x 64 (24 accumulators of 32
 * registers; measured against 12 x 32, 14 x 32 and 8 x 48: the fewest loads per multiply-add), AVX2 6 x 16
 * (12 of 16), else 4 x 8 with 4-float vectors (SSE2, or what the compiler makes of the vector extension
 * elsewhere). Sums run in k order within a block and block by block, in float32 with fused multiply-add where
 * the ISA has it: not bit-equal to numpy's BLAS, within float32 rounding of it. A column's arithmetic does not
 * depend on which thread or chunk computes it. */
#include <stdint.h>
#include <string.h>

#include "mnb.h" /* g_isa_cap */
#include "sgemm.h"

#pragma GCC diagnostic ignored "-Wpsabi" /* the vector values never cross a call: the helpers inline */

/* Define the packers, the micro-kernel and the blocked loop for one ISA: vector type VT of VL floats,
 * tile MR x NR (NR a multiple of VL), compiled for TARGET. */
#define SG_DEFINE(S, TARGET, VT, VL, MR, NR)                                                                       \
  typedef float VT __attribute__((vector_size(VL * 4)));                                                           \
                                                                                                                   \
  /* B's rows [0, kc), columns [0, cols) into panels of NR columns, bp[q*kc*NR + k*NR + j], zeros past cols: \
   * row by row, so the reads are long runs the prefetcher follows */                                            \
  __attribute__((target(TARGET))) static void sg_pack_b_##S(const float* b, int64_t ldb, int64_t kc, int64_t cols,\
                                                             float* bp) {                                          \
    int64_t k, q;                                                                                                  \
    for (k = 0; k < kc; ++k) {                                                                                     \
      const float* src = b + k * ldb;                                                                              \
      for (q = 0; (q + 1) * NR <= cols; ++q) /* full panels: a constant-size copy, inlined as vector moves */     \
        memcpy(bp + q * kc * NR + k * NR, src + q * NR, NR * sizeof(float));                                       \
      if (q * NR < cols) {                                                                                         \
        float* dst = bp + q * kc * NR + k * NR;                                                                    \
        int64_t w = cols - q * NR;                                                                                 \
        memcpy(dst, src + q * NR, (size_t)w * sizeof(float));                                                      \
        memset(dst + w, 0, (size_t)(NR - w) * sizeof(float));                                                      \
      }                                                                                                            \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* the same panels from B stored transposed (N x K, rows ldb apart: FusedMatMul transB): column n of B is row n */ \
  __attribute__((target(TARGET))) static void sg_pack_bt_##S(const float* bt, int64_t ldb, int64_t kc,            \
                                                              int64_t cols, float* bp) {                           \
    int64_t q, j, k;                                                                                               \
    for (q = 0; q * NR < cols; ++q) {                                                                              \
      float* dst = bp + q * kc * NR;                                                                               \
      int64_t w = cols - q * NR < NR ? cols - q * NR : NR;                                                         \
      for (j = 0; j < w; ++j) {                                                                                    \
        const float* src = bt + (q * NR + j) * ldb;                                                                \
        for (k = 0; k < kc; ++k) dst[k * NR + j] = src[k];                                                         \
      }                                                                                                            \
      for (; j < NR; ++j)                                                                                          \
        for (k = 0; k < kc; ++k) dst[k * NR + j] = 0.0f;                                                           \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* the RT x (NV x VL) tile at c (RT <= MR rows, NV <= NR / VL vectors: constants once inlined) = or += ap x bp \
   * over kc, of which rows [0, mr) and columns [0, cols) are stored (rows past mr repeat the last). PACK (a       \
   * constant): B's rows are read from src (lds apart) and written to bp as they are used, the panel's packing     \
   * done by its first row tile under its multiply-adds (measured 2-6% faster at 128 x 576 x 576..1536 than a      \
   * packing pass of its own) */                                                                                   \
  __attribute__((target(TARGET), always_inline)) static inline void sg_rows_##S(                                  \
      const float* a, int64_t lda, const float* bp, int64_t kc, float* c, int64_t ldc, const int64_t RT,           \
      const int64_t NV, int64_t mr, int64_t cols, int add, float alpha, const int PACK, const float* src,          \
      int64_t lds) {                                                                                               \
    VT acc[MR][NR / VL];                                                                                           \
    const float* row[MR];                                                                                          \
    int64_t i, j, k;                                                                                               \
    memset(acc, 0, sizeof acc);                                                                                    \
    for (i = 0; i < RT; ++i) row[i] = a + (i < mr ? i : mr - 1) * lda;                                             \
    _Pragma("GCC unroll 2") for (k = 0; k < kc; ++k) {                                                             \
      VT bv[NR / VL];                                                                                              \
      if (PACK) {                                                                                                  \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) {                                                         \
          memcpy(&bv[j], src + k * lds + j * VL, sizeof(VT));                                                      \
          memcpy((float*)bp + k * NR + j * VL, &bv[j], sizeof(VT));                                                \
        }                                                                                                          \
      } else {                                                                                                     \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) memcpy(&bv[j], bp + k * NR + j * VL, sizeof(VT));        \
      }                                                                                                            \
      _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                          \
        const float av = row[i][k]; /* a scalar operand: broadcast from memory (AVX-512: into the FMA) */         \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) acc[i][j] += bv[j] * av;                                 \
      }                                                                                                            \
    }                                                                                                              \
    if (alpha != 1.0f) { /* alpha (A @ B) block by block: the blocks' sum is scaled once in total */              \
      _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                          \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) acc[i][j] *= alpha;                                       \
      }                                                                                                            \
    }                                                                                                              \
    if (cols == NR && mr == RT) {                                                                                  \
      _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                          \
        _Pragma("GCC unroll 8") for (j = 0; j < NR / VL; ++j) {                                                    \
          VT old;                                                                                                  \
          if (add) {                                                                                               \
            memcpy(&old, c + i * ldc + j * VL, sizeof(VT));                                                        \
            acc[i][j] += old;                                                                                      \
          }                                                                                                        \
          memcpy(c + i * ldc + j * VL, &acc[i][j], sizeof(VT));                                                    \
        }                                                                                                          \
      }                                                                                                            \
    } else { /* through a tile in memory, written with constant indices so acc stays in registers above */     \
      float tile[MR * NR];                                                                                         \
      _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                          \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) memcpy(tile + i * NR + j * VL, &acc[i][j], sizeof(VT));   \
      }                                                                                                            \
      for (i = 0; i < mr; ++i) {                                                                                   \
        float* out = c + i * ldc;                                                                                  \
        if (add) {                                                                                                 \
          for (j = 0; j < cols; ++j) out[j] += tile[i * NR + j];                                                   \
        } else {                                                                                                   \
          memcpy(out, tile + i * NR, (size_t)cols * sizeof(float));                                                \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* the MR x NR tile at c, rows [0, mr) and columns [0, cols): a last, shorter row tile computes only its rows, \
   * a ragged last panel only the vectors its columns need (a thread's share of N ends on any 16 columns) */     \
  __attribute__((target(TARGET))) static void sg_tile_##S(const float* a, int64_t lda, const float* bp,          \
                                                          int64_t kc, float* c, int64_t ldc, int64_t mr,           \
                                                          int64_t cols, int add, float alpha) {                    \
    const int64_t W = NR / VL;                                                                                     \
    if (mr > MR) mr = MR;                                                                                          \
    switch (cols < NR ? (cols + VL - 1) / VL : W) {                                                                \
      case 1:                                                                                                      \
        if (W > 1) { sg_rows_##S(a, lda, bp, kc, c, ldc, MR, 1, mr, cols, add, alpha, 0, NULL, 0); return; }       \
        break;                                                                                                     \
      case 2:                                                                                                      \
        if (W > 2) { sg_rows_##S(a, lda, bp, kc, c, ldc, MR, 2, mr, cols, add, alpha, 0, NULL, 0); return; }       \
        break;                                                                                                     \
      case 3:                                                                                                      \
        if (W > 3) { sg_rows_##S(a, lda, bp, kc, c, ldc, MR, 3, mr, cols, add, alpha, 0, NULL, 0); return; }       \
        break;                                                                                                     \
      default: break;                                                                                              \
    }                                                                                                              \
    switch (mr) {                                                                                                  \
      case 1: sg_rows_##S(a, lda, bp, kc, c, ldc, 1, W, 1, cols, add, alpha, 0, NULL, 0); return;                  \
      case 2: sg_rows_##S(a, lda, bp, kc, c, ldc, 2 < MR ? 2 : MR, W, 2, cols, add, alpha, 0, NULL, 0); return;    \
      case 3: sg_rows_##S(a, lda, bp, kc, c, ldc, 3 < MR ? 3 : MR, W, 3, cols, add, alpha, 0, NULL, 0); return;    \
      case 4: sg_rows_##S(a, lda, bp, kc, c, ldc, 4 < MR ? 4 : MR, W, 4, cols, add, alpha, 0, NULL, 0); return;    \
      case 5: sg_rows_##S(a, lda, bp, kc, c, ldc, 5 < MR ? 5 : MR, W, 5, cols, add, alpha, 0, NULL, 0); return;    \
      default: sg_rows_##S(a, lda, bp, kc, c, ldc, MR, W, mr, cols, add, alpha, 0, NULL, 0); return;               \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* a full MR x NR tile that packs its panel of plain B (src, lds apart) into bp as it goes */                    \
  __attribute__((target(TARGET))) static void sg_tile_pack_##S(const float* a, int64_t lda, float* bp, int64_t kc, \
                                                               float* c, int64_t ldc, int add, float alpha,        \
                                                               const float* src, int64_t lds) {                    \
    sg_rows_##S(a, lda, bp, kc, c, ldc, MR, NR / VL, MR, NR, add, alpha, 1, src, lds);                            \
  }                                                                                                                \
                                                                                                                   \
  /* few rows (decode): B streamed once, row by row, in runs of 16 KiB / M; C's rows of the run stay \
   * in L1 and take eight rows of B per pass (rows past K read row k0 with a zero coefficient) */                 \
  __attribute__((target(TARGET))) static void sg_skinny_##S(const SgProblem* p, int64_t n0, int64_t n1) {         \
    int64_t chunk = SG_SKINNY_FLOATS / p->M / 64 * 64, nc, k, i, j, r;                                             \
    for (nc = n0; nc < n1; nc += chunk) {                                                                          \
      int64_t w = n1 - nc < chunk ? n1 - nc : chunk, wv = w / VL * VL;                                             \
      for (i = 0; i < p->M; ++i) memset(p->c + i * p->ldc + nc, 0, (size_t)w * sizeof(float));                    \
      for (k = 0; k < p->K; k += 8) {                                                                              \
        const float* b[8];                                                                                         \
        int64_t rows = p->K - k < 8 ? p->K - k : 8;                                                                \
        for (r = 0; r < 8; ++r) b[r] = p->b + (k + (r < rows ? r : 0)) * p->ldb + nc;                              \
        for (i = 0; i < p->M; ++i) {                                                                               \
          const float* a = p->a + i * p->lda + k;                                                                  \
          float x[8];                                                                                              \
          float* c = p->c + i * p->ldc + nc;                                                                       \
          for (r = 0; r < 8; ++r) x[r] = r < rows ? a[r] * p->alpha : 0.0f;                                        \
          for (j = 0; j < wv; j += VL) {                                                                           \
            VT cv, v[8];                                                                                           \
            memcpy(&cv, c + j, sizeof cv);                                                                         \
            _Pragma("GCC unroll 8") for (r = 0; r < 8; ++r) memcpy(&v[r], b[r] + j, sizeof(VT));                  \
            cv += ((v[0] * x[0] + v[1] * x[1]) + (v[2] * x[2] + v[3] * x[3])) +                                    \
                  ((v[4] * x[4] + v[5] * x[5]) + (v[6] * x[6] + v[7] * x[7]));                                     \
            memcpy(c + j, &cv, sizeof cv);                                                                         \
          }                                                                                                        \
          for (; j < w; ++j)                                                                                       \
            for (r = 0; r < 8; ++r) c[j] += b[r][j] * x[r];                                                        \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* few rows, B transposed (N x K: Gemm transB, FusedMatMul transB): C[i, n] = alpha * dot(A row i, B row n), \
   * four rows of B at a time, each read once from memory for all M rows, in VL-float partial sums over k */      \
  __attribute__((target(TARGET))) static void sg_skinny_t_##S(const SgProblem* p, int64_t n0, int64_t n1) {       \
    int64_t n, k, i, j, l, kv = p->K / VL * VL;                                                                    \
    for (n = n0; n < n1; n += 4) {                                                                                 \
      int64_t w = n1 - n < 4 ? n1 - n : 4;                                                                         \
      const float* b[4];                                                                                           \
      VT acc[SG_SKINNY_ROWS][4];                                                                                   \
      float tail[SG_SKINNY_ROWS][4];                                                                               \
      for (j = 0; j < 4; ++j) b[j] = p->b + (n + (j < w ? j : 0)) * p->ldb;                                        \
      memset(acc, 0, sizeof acc);                                                                                  \
      memset(tail, 0, sizeof tail);                                                                                \
      for (k = 0; k < kv; k += VL) {                                                                               \
        VT v[4];                                                                                                   \
        _Pragma("GCC unroll 4") for (j = 0; j < 4; ++j) memcpy(&v[j], b[j] + k, sizeof(VT));                      \
        for (i = 0; i < p->M; ++i) {                                                                               \
          VT av;                                                                                                   \
          memcpy(&av, p->a + i * p->lda + k, sizeof av);                                                           \
          _Pragma("GCC unroll 4") for (j = 0; j < 4; ++j) acc[i][j] += av * v[j];                                 \
        }                                                                                                          \
      }                                                                                                            \
      for (; k < p->K; ++k)                                                                                        \
        for (i = 0; i < p->M; ++i)                                                                                 \
          for (j = 0; j < 4; ++j) tail[i][j] += p->a[i * p->lda + k] * b[j][k];                                   \
      for (i = 0; i < p->M; ++i)                                                                                   \
        for (j = 0; j < w; ++j) {                                                                                  \
          float sum = 0.0f;                                                                                        \
          for (l = 0; l < VL; ++l) sum += acc[i][j][l];                                                            \
          p->c[i * p->ldc + n + j] = p->alpha * (sum + tail[i][j]);                                                \
        }                                                                                                          \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  /* B prepacked whole (p->bp, sgemm_pack_b at NR): each K block's panels read in place, a share that starts \
   * inside a panel reading from its column there (a multiple of 16 columns: whole vectors) */                    \
  __attribute__((target(TARGET))) static void sg_columns_pre_##S(const SgProblem* p, int64_t n0, int64_t n1) {    \
    const int64_t npad = (p->N + NR - 1) / NR * NR;                                                                \
    int64_t k0, nb, n, i;                                                                                          \
    for (k0 = 0; k0 < p->K; k0 += SG_KC) {                                                                         \
      int64_t kc = p->K - k0 < SG_KC ? p->K - k0 : SG_KC;                                                          \
      const float* block = p->bp + k0 * npad;                                                                      \
      for (nb = n0; nb < n1; nb += SG_NC) {                                                                        \
        int64_t end = n1 - nb < SG_NC ? n1 : nb + SG_NC, cols;                                                     \
        for (n = nb; n < end; n += cols) {                                                                         \
          const float* panel = block + n / NR * kc * NR + n % NR;                                                  \
          cols = NR - n % NR < end - n ? NR - n % NR : end - n;                                                    \
          for (i = 0; i < p->M; i += MR)                                                                           \
            sg_tile_##S(p->a + i * p->lda + k0, p->lda, panel, kc, p->c + i * p->ldc + n, p->ldc,                  \
                        p->M - i < MR ? p->M - i : MR, cols, k0 > 0, p->alpha);                                    \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }                                                                                                                \
                                                                                                                   \
  __attribute__((target(TARGET))) static void sg_columns_##S(const SgProblem* p, int64_t n0, int64_t n1,          \
                                                             float* bp, SgPackFn pack, void* ctx) {                \
    int64_t k0, nb, n, i;                                                                                          \
    if (p->bp != NULL && pack == NULL) {                                                                           \
      sg_columns_pre_##S(p, n0, n1);                                                                               \
      return;                                                                                                      \
    }                                                                                                              \
    for (k0 = 0; k0 < p->K; k0 += SG_KC) {                                                                         \
      int64_t kc = p->K - k0 < SG_KC ? p->K - k0 : SG_KC;                                                          \
      for (nb = n0; nb < n1; nb += SG_NC) {                                                                        \
        int64_t nbw = n1 - nb < SG_NC ? n1 - nb : SG_NC;                                                           \
        /* plain B with full row tiles: full panels packed by their first tile, the ragged rest here; a            \
         * caller's packer (the Conv's im2col) writes every panel itself */                                        \
        int64_t fused = pack == NULL && !p->b_trans && p->M >= MR ? nbw / NR * NR : 0;                             \
        if (pack != NULL)                                                                                          \
          pack(ctx, k0, kc, nb, nbw, NR, bp);                                                                      \
        else if (p->b_trans)                                                                                       \
          sg_pack_bt_##S(p->b + nb * p->ldb + k0, p->ldb, kc, nbw, bp);                                            \
        else if (fused < nbw)                                                                                      \
          sg_pack_b_##S(p->b + k0 * p->ldb + nb + fused, p->ldb, kc, nbw - fused, bp + fused * kc);               \
        for (n = 0; n < nbw; n += NR) {                                                                            \
          int64_t cols = nbw - n < NR ? nbw - n : NR;                                                              \
          i = 0;                                                                                                   \
          if (n < fused) {                                                                                         \
            sg_tile_pack_##S(p->a + k0, p->lda, bp + n * kc, kc, p->c + nb + n, p->ldc, k0 > 0, p->alpha,          \
                             p->b + k0 * p->ldb + nb + n, p->ldb);                                                 \
            i = MR;                                                                                                \
          }                                                                                                        \
          for (; i < p->M; i += MR)                                                                                \
            sg_tile_##S(p->a + i * p->lda + k0, p->lda, bp + n * kc, kc, p->c + i * p->ldc + nb + n, p->ldc,       \
                        p->M - i < MR ? p->M - i : MR, cols, k0 > 0, p->alpha);                                    \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }

#if defined(__x86_64__) && defined(__GNUC__)
SG_DEFINE(avx512, "avx512f,fma", sg_v16, 16, 6, 64)
SG_DEFINE(avx2, "avx2,fma", sg_v8, 8, 6, 16)
#define SG_X86 1
#endif
SG_DEFINE(base, "default", sg_v4, 4, 4, 8)

/* 2: AVX-512, 1: AVX2 + FMA, 0: the portable path; the CPU's, lowered by ort_cpu_ep_set_isa_cap (mnb.h: tests
 * check every path on one machine) */
static int sg_level(void) {
#ifdef SG_X86
  static int cpu = -1;
  int level;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
  }
  level = cpu;
  if (level == 2 && g_isa_cap < 2) level = 1;
  if (level == 1 && g_isa_cap < 1) level = 0;
  return level;
#else
  return 0;
#endif
}

int64_t sgemm_panel_width(void) {
  int level = sg_level();
  return level == 2 ? 64 : level == 1 ? 16 : 8;
}

size_t sgemm_thread_floats(int64_t M, int64_t K, int64_t N, int b_trans) {
  int64_t nr = sgemm_panel_width(), kc = K < SG_KC ? K : SG_KC, nc = N < SG_NC ? N : SG_NC;
  (void)b_trans;
  if (M <= SG_SKINNY_ROWS) return 0; /* B streamed (plain or transposed), nothing packed */
  if (kc < 1) kc = 1;
  if (nc < 1) nc = 1;
  return (size_t)(kc * ((nc + nr - 1) / nr * nr)) + SG_ALIGN_FLOATS;
}

/* a B the host released after packing (b NULL) is read from its panels whatever the rows */
int sgemm_streams(const SgProblem* p) { return p->M <= SG_SKINNY_ROWS && !(p->b == NULL && p->bp != NULL); }

#define SG_STREAM(S, p, n0, n1) ((p)->b_trans ? sg_skinny_t_##S(p, n0, n1) : sg_skinny_##S(p, n0, n1))

void sgemm_columns(const SgProblem* p, int64_t n0, int64_t n1, float* work) {
  work = (float*)(((uintptr_t)work + SG_ALIGN_FLOATS * sizeof(float) - 1) & ~(uintptr_t)(SG_ALIGN_FLOATS * sizeof(float) - 1));
  if (n0 >= n1 || p->M <= 0) return;
  if (p->K == 0) { /* an empty sum: zeros */
    int64_t i;
    for (i = 0; i < p->M; ++i) memset(p->c + i * p->ldc + n0, 0, (size_t)(n1 - n0) * sizeof(float));
    return;
  }
  switch (sg_level()) {
#ifdef SG_X86
    case 2: sgemm_streams(p) ? SG_STREAM(avx512, p, n0, n1) : sg_columns_avx512(p, n0, n1, work, NULL, NULL); return;
    case 1: sgemm_streams(p) ? SG_STREAM(avx2, p, n0, n1) : sg_columns_avx2(p, n0, n1, work, NULL, NULL); return;
#endif
    default: sgemm_streams(p) ? SG_STREAM(base, p, n0, n1) : sg_columns_base(p, n0, n1, work, NULL, NULL); return;
  }
}

void sgemm_columns_packed(const SgProblem* p, int64_t n0, int64_t n1, SgPackFn pack, void* ctx, float* work) {
  work = (float*)(((uintptr_t)work + SG_ALIGN_FLOATS * sizeof(float) - 1) & ~(uintptr_t)(SG_ALIGN_FLOATS * sizeof(float) - 1));
  if (n0 >= n1 || p->M <= 0 || p->K <= 0) return;
  switch (sg_level()) {
#ifdef SG_X86
    case 2: sg_columns_avx512(p, n0, n1, work, pack, ctx); return;
    case 1: sg_columns_avx2(p, n0, n1, work, pack, ctx); return;
#endif
    default: sg_columns_base(p, n0, n1, work, pack, ctx); return;
  }
}
