/* AVX-512 VNNI int8 kernel (accuracy_level 4) for 4-bit MatMulNBits with integer (or absent) zero points.
 *
 * 64 packed weight bytes are 128 values along K; their low nibbles are the even-indexed values and their high
 * nibbles the odd-indexed ones, so with A quantized into the even/odd chunk layout (mnb_avx512_quantize_a) one `and`
 * and one shift+`and` give two 64-byte unsigned operands for two dpbusd: 128 multiply-adds, no shuffles.
 * Each int32 lane then holds 8 products of one block; it becomes float once per chunk, times the lane's block
 * scale (weight scale x activation scale, both broadcast to their lanes by one permute). The zero point is
 * not in the integer sums: sum((q - zp) a) s_a s_w = sum(q a) s_a s_w - zp s_w (sum(a) s_a), the second term
 * a per-block float dot product (p->qa_sum_scaled) after the chunk loop.
 *
 * Register blocking: MR rows of A x NC output columns per pass (4 x 2, or 1 x 4 for a single row), so a
 * weight chunk is unpacked once for MR rows and an A chunk loaded once for NC columns. Columns come in the
 * work item's panel of MNB_PANEL, whose weights stay in cache while the row groups pass over them. */
#include <string.h>

#include "mnb.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define MNB_V512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#ifndef MNB_PREFETCH
#define MNB_PREFETCH 16
#endif
#define MNB_V512_INLINE MNB_V512 static inline __attribute__((always_inline))

int mnb_avx512vnni_applies(const MnbProblem* p) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return g_isa_cap >= 3 && cpu && p->int8 && p->bits == 4 && p->zp_f == NULL;
}

MNB_V512_INLINE float mnb_hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }

/* the float zero points of 16 blocks from blk (cnt of them valid, the rest 0) of column n */
MNB_V512_INLINE __m512 mnb_zero_points16(const MnbProblem* p, int64_t n, int64_t blk, int cnt) {
  const uint8_t* src;
  __m128i x, lo, hi;
  if (p->zp_u8 == NULL) return _mm512_maskz_mov_ps((__mmask16)((1u << cnt) - 1), _mm512_set1_ps(8.0f));
  src = p->zp_u8 + n * p->zp_row_bytes + blk / 2; /* blk is a multiple of 16: a whole byte */
  x = _mm_maskz_loadu_epi8((__mmask16)((1u << ((cnt + 1) / 2)) - 1), src);
  lo = _mm_and_si128(x, _mm_set1_epi8(15));
  hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(15));
  x = _mm_maskz_mov_epi8((__mmask16)((1u << cnt) - 1), _mm_unpacklo_epi8(lo, hi));
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x));
}

/* zp x s_w of those 16 blocks (0 beyond cnt) */
MNB_V512_INLINE __m512 mnb_zero_terms16(const MnbProblem* p, int64_t n, int64_t blk, int cnt) {
  __mmask16 m = (__mmask16)((1u << cnt) - 1);
  return _mm512_mul_ps(mnb_zero_points16(p, n, blk, cnt), _mm512_maskz_loadu_ps(m, p->scales + n * p->k_blocks + blk));
}

/* a weight row's 64-byte chunks (the A chunks of MNB_QA_CHUNK values they pair with) */
typedef struct MnbV512Chunks {
  int64_t kb, bytes, chunks, per_chunk; /* blocks a row; bytes a row; chunks; blocks a chunk (at least 1) */
  int shift;                            /* log2 block_size (a power of two) */
  __m512i idx;                          /* lane l (values 8l..8l+7 of a chunk): its block from the chunk's first */
  __m512i nib;
} MnbV512Chunks;

/* chunk c: its first block, the mask of its blocks' scales and of its weight bytes */
typedef struct MnbV512Chunk {
  int64_t b0;
  __mmask16 smask;
  __mmask64 bmask;
} MnbV512Chunk;

MNB_V512_INLINE MnbV512Chunks mnb_v512_chunks(const MnbProblem* p) {
  MnbV512Chunks g;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  g.kb = p->k_blocks;
  g.bytes = g.kb * p->blob;
  g.chunks = p->qa_stride / MNB_QA_CHUNK;
  g.per_chunk = p->block <= MNB_QA_CHUNK ? MNB_QA_CHUNK / p->block : 1;
  g.shift = __builtin_ctzll((unsigned long long)p->block);
  g.idx = p->block <= MNB_QA_CHUNK ? _mm512_srlv_epi32(_mm512_slli_epi32(lane, 3), _mm512_set1_epi32(g.shift))
                                   : _mm512_setzero_si512();
  g.nib = _mm512_set1_epi8(15);
  return g;
}

MNB_V512_INLINE MnbV512Chunk mnb_v512_chunk(const MnbV512Chunks* g, int64_t c) {
  MnbV512Chunk k;
  int64_t left = g->bytes - c * 64, nb;
  k.b0 = (c * MNB_QA_CHUNK) >> g->shift;
  nb = g->kb - k.b0 < g->per_chunk ? g->kb - k.b0 : g->per_chunk;
  k.smask = (__mmask16)((1u << nb) - 1);
  k.bmask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
  return k;
}

/* column n's chunk: low and high nibbles (the chunk's even and odd values) and each lane's weight scale */
MNB_V512_INLINE void mnb_v512_weights(const MnbProblem* p, const MnbV512Chunks* g, const MnbV512Chunk* k, int64_t n,
                                      int64_t c, __m512i* lo, __m512i* hi, __m512* ws) {
  __m512i v = _mm512_maskz_loadu_epi8(k->bmask, p->b + n * g->bytes + c * 64);
  *lo = _mm512_and_si512(v, g->nib);
  *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), g->nib);
  *ws = _mm512_permutexvar_ps(g->idx, _mm512_maskz_loadu_ps(k->smask, p->scales + n * g->kb + k->b0));
}

/* one row's chunk (qa: its even/odd values; its activation scales from as_row) into acc[0..NC) */
MNB_V512_INLINE void mnb_v512_row(const MnbV512Chunks* g, const MnbV512Chunk* k, const int8_t* qa,
                                  const float* as_row, const __m512i* lo, const __m512i* hi, const __m512* ws,
                                  __m512* acc, const int NC) {
  __m512i ae = _mm512_loadu_si512((const void*)qa), ao = _mm512_loadu_si512((const void*)(qa + 64));
  __m512 as = _mm512_permutexvar_ps(g->idx, _mm512_maskz_loadu_ps(k->smask, as_row + k->b0));
  int j;
  _Pragma("GCC unroll 4") for (j = 0; j < NC; ++j) {
    __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[j], ae);
    t = _mm512_dpbusd_epi32(t, hi[j], ao);
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(ws[j], as), acc[j]);
  }
}

MNB_V512_INLINE void mnb_v512_tile(const MnbProblem* p, int64_t m0, int64_t n0, const int MR, const int NC) {
  const MnbV512Chunks g = mnb_v512_chunks(p);
  const int64_t kb = g.kb, bytes = g.bytes;
  /* few rows: the weights stream from memory once (prefetched ahead, never past the last column) */
  const int stream = p->M <= 4 && n0 + NC + MNB_PREFETCH <= p->N;
  __m512 acc[4][4];
  int64_t c;
  int r, j;
  for (r = 0; r < MR; ++r)
    for (j = 0; j < NC; ++j) acc[r][j] = _mm512_setzero_ps();
  for (c = 0; c < g.chunks; ++c) {
    const MnbV512Chunk k = mnb_v512_chunk(&g, c);
    __m512i lo[4], hi[4];
    __m512 ws[4];
    for (j = 0; j < NC; ++j) {
      if (stream) { /* the same chunk MNB_PREFETCH columns ahead: the hardware prefetcher alone falls behind */
        _mm_prefetch((const char*)(p->b + (n0 + j + MNB_PREFETCH) * bytes + c * 64), _MM_HINT_T1);
        _mm_prefetch((const char*)(p->scales + (n0 + j + MNB_PREFETCH) * kb + k.b0), _MM_HINT_T1);
      }
      mnb_v512_weights(p, &g, &k, n0 + j, c, &lo[j], &hi[j], &ws[j]);
    }
    for (r = 0; r < MR; ++r)
      mnb_v512_row(&g, &k, p->qa + (m0 + r) * p->qa_stride + c * MNB_QA_CHUNK, p->qa_scale + (m0 + r) * kb, lo, hi,
                   ws, acc[r], NC);
  }
  for (j = 0; j < NC; ++j) {
    int64_t n = n0 + j, blk;
    float bias = p->bias ? p->bias[n] : 0.0f;
    __m512 corr[4];
    for (r = 0; r < MR; ++r) corr[r] = _mm512_setzero_ps();
    for (blk = 0; blk < kb; blk += 16) {
      int cnt = kb - blk < 16 ? (int)(kb - blk) : 16;
      __mmask16 m = (__mmask16)((1u << cnt) - 1);
      __m512 zs = mnb_zero_terms16(p, n, blk, cnt);
      for (r = 0; r < MR; ++r)
        corr[r] = _mm512_fmadd_ps(zs, _mm512_maskz_loadu_ps(m, p->qa_sum_scaled + (m0 + r) * kb + blk), corr[r]);
    }
    for (r = 0; r < MR; ++r) p->y[(m0 + r) * p->N + n] = (mnb_hsum512(acc[r][j]) - mnb_hsum512(corr[r])) + bias;
  }
}

#define MNB_V512_TILE(mr, nc)                                                                  \
  MNB_V512 static void mnb_v512_tile_##mr##x##nc(const MnbProblem* p, int64_t m0, int64_t n0) { \
    mnb_v512_tile(p, m0, n0, mr, nc);                                                          \
  }
MNB_V512_TILE(1, 4)
MNB_V512_TILE(1, 1)
MNB_V512_TILE(2, 2)
MNB_V512_TILE(2, 1)
MNB_V512_TILE(3, 2)
MNB_V512_TILE(3, 1)
MNB_V512_TILE(4, 2)
MNB_V512_TILE(4, 1)

/* ---- A quantized for the VNNI kernels (mnb_quantize_a's arithmetic, 16 values a vector): max |a| per block
 * (NaN left out, as fmaxf does), a * (127 / max|a|) rounded half to even by the conversion (the default mode),
 * clamped to +-127; then each MNB_QA_CHUNK's even and odd values split apart with two byte narrowings ---- */
MNB_V512 void mnb_avx512_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa,
                                    float* qa_scale, int32_t* qa_sum, float* qa_sum_scaled) {
  const int64_t kb = (K + block - 1) / block;
  int64_t m, blk, i, c;
  for (m = 0; m < M; ++m) {
    const float* row = a + m * K;
    int8_t* q = qa + m * stride;
    for (blk = 0; blk < kb; ++blk) {
      int64_t k0 = blk * block, len = K - k0 < block ? K - k0 : block;
      __m512 amax = _mm512_setzero_ps(), inv;
      __m512i sum = _mm512_setzero_si512();
      float mx, scale;
      int32_t total;
      for (i = 0; i < len; i += 16) {
        __mmask16 mk = len - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (len - i)) - 1);
        amax = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mk, row + k0 + i)), amax); /* NaN: amax */
      }
      mx = _mm512_reduce_max_ps(amax);
      scale = mx / 127.0f;
      inv = _mm512_set1_ps(mx != 0.0f ? 127.0f / mx : 0.0f); /* onnxruntime's reciprocal (see mnb_quantize_a) */
      for (i = 0; i < block; i += 16) {
        __mmask16 mk = len - i >= 16 ? (__mmask16)0xFFFF : len - i <= 0 ? 0 : (__mmask16)((1u << (len - i)) - 1);
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, row + k0 + i), inv));
        v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
        sum = _mm512_add_epi32(sum, v);
        _mm_storeu_si128((__m128i*)(q + k0 + i), _mm512_cvtepi32_epi8(v));
      }
      total = _mm512_reduce_add_epi32(sum);
      qa_sum[m * kb + blk] = total;
      qa_sum_scaled[m * kb + blk] = (float)total * scale;
      qa_scale[m * kb + blk] = scale;
    }
    memset(q + kb * block, 0, (size_t)(stride - kb * block));
    for (c = 0; c < stride; c += MNB_QA_CHUNK) { /* even values of the chunk, then odd ones */
      const __m512i lo8 = _mm512_set1_epi16(0xFF);
      __m512i v0 = _mm512_loadu_si512((const void*)(q + c)), v1 = _mm512_loadu_si512((const void*)(q + c + 64));
      __m256i e0 = _mm512_cvtepi16_epi8(_mm512_and_si512(v0, lo8));
      __m256i e1 = _mm512_cvtepi16_epi8(_mm512_and_si512(v1, lo8));
      __m256i o0 = _mm512_cvtepi16_epi8(_mm512_srli_epi16(v0, 8));
      __m256i o1 = _mm512_cvtepi16_epi8(_mm512_srli_epi16(v1, 8));
      _mm512_storeu_si512((void*)(q + c), _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1));
      _mm512_storeu_si512((void*)(q + c + 64), _mm512_inserti64x4(_mm512_castsi256_si512(o0), o1, 1));
    }
  }
}

/* ---- the int8 GEMM (more than MNB_GEMV_MAX_M rows) ----
 * Columns in panels of up to MNB_PANEL whose zero-point terms zp x s_w (one float per column and block) are
 * computed once into the thread buffer, then row groups of 6 pass over the panel two columns at a time (the
 * panel's weights stay in L1, one row group's A too). The zero-point correction sum_blk zp s_w (sum(a) s_a) is
 * folded into each output's accumulator as 16-block vectors, and the 12 accumulators of a tile are reduced
 * together (three lane-halving steps over pairs, one shuffle and one add each) instead of one by one. */
#define MNB_GEMM_MR 6

/* zs[j * kb + blk] = zp x s_w of column n0 + j, block blk, for j < width */
MNB_V512 static void mnb_v512_zero_terms(const MnbProblem* p, int64_t n0, int64_t width, float* zs) {
  const int64_t kb = p->k_blocks;
  int64_t j, blk;
  for (j = 0; j < width; ++j) {
    for (blk = 0; blk < kb; blk += 16) {
      int cnt = kb - blk < 16 ? (int)(kb - blk) : 16;
      _mm512_mask_storeu_ps(zs + j * kb + blk, (__mmask16)((1u << cnt) - 1), mnb_zero_terms16(p, n0 + j, blk, cnt));
    }
  }
}

/* lane sums of v[0..n) (n a multiple of 4, at most 16), four at a time: lanes 0-3 of out[i] are the sums of
 * v[4i], v[4i + 1], v[4i + 2], v[4i + 3] */
MNB_V512_INLINE void mnb_v512_sums(__m512* v, int n, __m128* out) {
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  int i;
  _Pragma("GCC unroll 16") for (i = 0; i < n; i += 2) { /* 512 -> 256 bits: v[i] low half | v[i + 1] low half */
    __m512 a = _mm512_shuffle_f32x4(v[i], v[i + 1], 0x44), b = _mm512_shuffle_f32x4(v[i], v[i + 1], 0xEE);
    v[i / 2] = _mm512_add_ps(a, b);
  }
  _Pragma("GCC unroll 8") for (i = 0; i < n / 2; i += 2) { /* 256 -> 128 bits: one 128-bit lane per input */
    __m512 a = _mm512_shuffle_f32x4(v[i], v[i + 1], 0x88), b = _mm512_shuffle_f32x4(v[i], v[i + 1], 0xDD);
    v[i / 2] = _mm512_add_ps(a, b);
  }
  _Pragma("GCC unroll 4") for (i = 0; i < n / 4; ++i) { /* 128 -> 32 bits within each lane */
    __m512 x = _mm512_add_ps(v[i], _mm512_permute_ps(v[i], 0x4E));
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));
    out[i] = _mm512_castps512_ps128(_mm512_permutexvar_ps(first, x));
  }
}

MNB_V512_INLINE void mnb_v512_gemm_tile(const MnbProblem* p, int64_t m0, int64_t n0, const float* zs, const int MR,
                                        const int NC) {
  const MnbV512Chunks g = mnb_v512_chunks(p);
  const int64_t kb = g.kb, qs = p->qa_stride;
  const int8_t* qa0 = p->qa + m0 * qs;
  const float* as0 = p->qa_scale + m0 * kb;
  __m512 acc[16];
  __m128 sums[4];
  int64_t c, blk;
  int r, j;
  _Pragma("GCC unroll 16") for (r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  for (c = 0; c < g.chunks; ++c) {
    const MnbV512Chunk k = mnb_v512_chunk(&g, c);
    __m512i lo[2], hi[2];
    __m512 ws[2];
    _Pragma("GCC unroll 2") for (j = 0; j < NC; ++j) mnb_v512_weights(p, &g, &k, n0 + j, c, &lo[j], &hi[j], &ws[j]);
    _Pragma("GCC unroll 6") for (r = 0; r < MR; ++r)
      mnb_v512_row(&g, &k, qa0 + r * qs + c * MNB_QA_CHUNK, as0 + r * kb, lo, hi, ws, acc + r * 2, NC);
  }
  for (blk = 0; blk < kb; blk += 16) { /* minus sum_blk zp s_w (sum(a) s_a), lane by block */
    __mmask16 m = (__mmask16)(kb - blk < 16 ? (1u << (kb - blk)) - 1 : 0xFFFFu);
    __m512 z[2];
    _Pragma("GCC unroll 2") for (j = 0; j < NC; ++j) z[j] = _mm512_maskz_loadu_ps(m, zs + j * kb + blk);
    _Pragma("GCC unroll 6") for (r = 0; r < MR; ++r) {
      __m512 sa = _mm512_maskz_loadu_ps(m, p->qa_sum_scaled + (m0 + r) * kb + blk);
      _Pragma("GCC unroll 2") for (j = 0; j < NC; ++j) acc[r * 2 + j] = _mm512_fnmadd_ps(z[j], sa, acc[r * 2 + j]);
    }
  }
  mnb_v512_sums(acc, (2 * MR + 3) / 4 * 4, sums);
  if (p->bias) { /* (row r, column j) is lane 2 (r % 2) + j of sums[r / 2] */
    __m128 b = NC == 2 ? _mm_castpd_ps(_mm_loaddup_pd((const double*)(p->bias + n0))) : _mm_set1_ps(p->bias[n0]);
    _Pragma("GCC unroll 3") for (r = 0; r < (MR + 1) / 2; ++r) sums[r] = _mm_add_ps(sums[r], b);
  }
  _Pragma("GCC unroll 6") for (r = 0; r < MR; ++r) {
    float* y = p->y + (m0 + r) * p->N + n0;
    __m128 x = r % 2 ? _mm_movehl_ps(sums[r / 2], sums[r / 2]) : sums[r / 2];
    if (NC == 2)
      _mm_storel_pi((__m64*)y, x);
    else
      _mm_store_ss(y, x);
  }
}

#define MNB_V512_GEMM_TILE(mr, nc)                                                                              \
  MNB_V512 static void mnb_v512_gemm_##mr##x##nc(const MnbProblem* p, int64_t m0, int64_t n0, const float* zs) { \
    mnb_v512_gemm_tile(p, m0, n0, zs, mr, nc);                                                                 \
  }
MNB_V512_GEMM_TILE(1, 1)
MNB_V512_GEMM_TILE(1, 2)
MNB_V512_GEMM_TILE(2, 1)
MNB_V512_GEMM_TILE(2, 2)
MNB_V512_GEMM_TILE(3, 1)
MNB_V512_GEMM_TILE(3, 2)
MNB_V512_GEMM_TILE(4, 1)
MNB_V512_GEMM_TILE(4, 2)
MNB_V512_GEMM_TILE(5, 1)
MNB_V512_GEMM_TILE(5, 2)
MNB_V512_GEMM_TILE(6, 1)
MNB_V512_GEMM_TILE(6, 2)

typedef void (*MnbGemmTileFn)(const MnbProblem*, int64_t, int64_t, const float*);

/* columns per zero-term panel the thread buffer holds (even, at most MNB_PANEL), 0 when not even two fit */
static int64_t mnb_v512_gemm_panel(const MnbProblem* p) {
  int64_t cols = (int64_t)((MNB_THREAD_BYTES - 64) / sizeof(float)) / p->k_blocks;
  cols = cols > MNB_PANEL ? MNB_PANEL : cols & ~(int64_t)1;
  return cols;
}

static int mnb_v512_gemm(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  static const MnbGemmTileFn two[MNB_GEMM_MR + 1] = {NULL, mnb_v512_gemm_1x2, mnb_v512_gemm_2x2, mnb_v512_gemm_3x2,
                                                     mnb_v512_gemm_4x2, mnb_v512_gemm_5x2, mnb_v512_gemm_6x2};
  static const MnbGemmTileFn one[MNB_GEMM_MR + 1] = {NULL, mnb_v512_gemm_1x1, mnb_v512_gemm_2x1, mnb_v512_gemm_3x1,
                                                     mnb_v512_gemm_4x1, mnb_v512_gemm_5x1, mnb_v512_gemm_6x1};
  float* zs = (float*)buf;
  int64_t panel = mnb_v512_gemm_panel(p), nc, m0, n;
  if (p->M <= MNB_GEMV_MAX_M || panel < 2) return 0;
  for (nc = n0; nc < n1; nc += panel) {
    int64_t end = n1 - nc < panel ? n1 : nc + panel;
    mnb_v512_zero_terms(p, nc, end - nc, zs);
    for (m0 = 0; m0 < p->M; m0 += MNB_GEMM_MR) {
      int rows = p->M - m0 < MNB_GEMM_MR ? (int)(p->M - m0) : MNB_GEMM_MR;
      for (n = nc; n + 2 <= end; n += 2) two[rows](p, m0, n, zs + (n - nc) * p->k_blocks);
      if (n < end) one[rows](p, m0, n, zs + (n - nc) * p->k_blocks);
    }
  }
  return 1;
}

typedef void (*MnbTileFn)(const MnbProblem*, int64_t, int64_t);

void mnb_avx512vnni_columns(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  static const MnbTileFn wide[5] = {NULL, mnb_v512_tile_1x4, mnb_v512_tile_2x2, mnb_v512_tile_3x2, mnb_v512_tile_4x2};
  static const MnbTileFn narrow[5] = {NULL, mnb_v512_tile_1x1, mnb_v512_tile_2x1, mnb_v512_tile_3x1, mnb_v512_tile_4x1};
  int64_t m0, n;
  if (mnb_v512_gemm(p, n0, n1, buf)) return;
  for (m0 = 0; m0 < p->M; m0 += 4) {
    int rows = p->M - m0 < 4 ? (int)(p->M - m0) : 4;
    int nc = rows == 1 ? 4 : 2;
    for (n = n0; n + nc <= n1; n += nc) wide[rows](p, m0, n);
    for (; n < n1; ++n) narrow[rows](p, m0, n);
  }
}

/* ---- fp32 (accuracy_level 0), up to MNB_GEMV_MAX_M rows ----
 * 32 packed bytes are 64 values: nibbles split and interleaved back into element order (values 0-31 in the
 * low 128-bit lane, 32-63 in the high), the zero point subtracted as bytes, widened to float, times the block
 * scale (once for all rows), then one FMA per 16 values and row; A's last partial chunk is a masked load. */
int mnb_avx512_f32_applies(const MnbProblem* p) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return g_isa_cap >= 3 && cpu && !p->int8 && p->bits == 4 && p->block % 32 == 0 && p->zp_f == NULL &&
         p->M <= MNB_GEMV_MAX_M;
}

MNB_V512_INLINE __m512 mnb_f32_part(__m128i bytes16, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes16)), scale);
}

MNB_V512_INLINE __mmask16 mnb_k_mask(int64_t k, int64_t K) {
  int64_t left = K - k;
  return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

MNB_V512_INLINE void mnb_f32_column(const MnbProblem* p, int64_t n, const int MR) {
  const uint8_t* row = p->b + n * p->k_blocks * p->blob;
  const float* scales = p->scales + n * p->k_blocks;
  const __m256i nib = _mm256_set1_epi8(15);
  const int stream = n + MNB_PREFETCH < p->N;
  const int64_t bytes = p->k_blocks * p->blob;
  __m512 acc[MNB_GEMV_MAX_M][2];
  int64_t u, units = (p->K + 63) / 64;
  const int shift = __builtin_ctzll((unsigned long long)p->block); /* block_size is a power of two */
  int r;
  for (r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (u = 0; u < units; ++u) {
    int64_t k = u * 64, b0 = k >> shift, b1 = (k + 32) >> shift;
    __m256i v, lo, hi, w;
    __m512 s0 = _mm512_set1_ps(scales[b0]), s1, w0, w1, w2, w3;
    __mmask32 bmask = bytes - u * 32 >= 32 ? (__mmask32)~0u : (__mmask32)((1u << (bytes - u * 32)) - 1);
    if (stream) _mm_prefetch((const char*)(row + MNB_PREFETCH * bytes + u * 32), _MM_HINT_T1);
    v = _mm256_maskz_loadu_epi8(bmask, row + u * 32);
    lo = _mm256_and_si256(v, nib);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    if (b1 != b0 && b1 < p->k_blocks) {
      w = _mm256_set_m128i(_mm_set1_epi8((char)mnb_zero_point(p, n, b1)), _mm_set1_epi8((char)mnb_zero_point(p, n, b0)));
      s1 = _mm512_set1_ps(scales[b1]);
    } else {
      w = _mm256_set1_epi8((char)mnb_zero_point(p, n, b0));
      s1 = s0;
    }
    lo = _mm256_sub_epi8(_mm256_unpacklo_epi8(lo, hi), w); /* values 0-15 | 32-47 */
    hi = _mm256_sub_epi8(_mm256_unpackhi_epi8(_mm256_and_si256(v, nib), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib)), w);
    w0 = mnb_f32_part(_mm256_castsi256_si128(lo), s0);       /* values 0-15 */
    w1 = mnb_f32_part(_mm256_castsi256_si128(hi), s0);       /* 16-31 */
    w2 = mnb_f32_part(_mm256_extracti128_si256(lo, 1), s1);  /* 32-47 */
    w3 = mnb_f32_part(_mm256_extracti128_si256(hi, 1), s1);  /* 48-63 */
    if (k + 64 <= p->K) {
      for (r = 0; r < MR; ++r) {
        const float* a = p->a + r * p->K + k;
        acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(a), w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 16), w1, acc[r][1]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 32), w2, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 48), w3, acc[r][1]);
      }
    } else { /* the last, partial 64 values: A is never read past K */
      for (r = 0; r < MR; ++r) {
        const float* a = p->a + r * p->K;
        acc[r][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mnb_k_mask(k, p->K), a + k), w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mnb_k_mask(k + 16, p->K), a + k + 16), w1, acc[r][1]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mnb_k_mask(k + 32, p->K), a + k + 32), w2, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mnb_k_mask(k + 48, p->K), a + k + 48), w3, acc[r][1]);
      }
    }
  }
  for (r = 0; r < MR; ++r)
    p->y[r * p->N + n] = mnb_hsum512(_mm512_add_ps(acc[r][0], acc[r][1])) + (p->bias ? p->bias[n] : 0.0f);
}

#define MNB_F32_COLUMNS(mr)                                                                      \
  MNB_V512 static void mnb_f32_columns_##mr(const MnbProblem* p, int64_t n0, int64_t n1) {       \
    int64_t n;                                                                                   \
    for (n = n0; n < n1; ++n) mnb_f32_column(p, n, mr);                                          \
  }
MNB_F32_COLUMNS(1)
MNB_F32_COLUMNS(2)
MNB_F32_COLUMNS(3)
MNB_F32_COLUMNS(4)

void mnb_avx512_columns_f32(const MnbProblem* p, int64_t n0, int64_t n1) {
  static void (*const by_rows[5])(const MnbProblem*, int64_t, int64_t) = {
      NULL, mnb_f32_columns_1, mnb_f32_columns_2, mnb_f32_columns_3, mnb_f32_columns_4};
  by_rows[p->M](p, n0, n1);
}

/* ---- the fp32 GEMM's panel: 16 columns x 16 K values dequantized as 16 vectors (one per column, 8 packed
 * bytes each), transposed in registers to the k-major panel the micro-kernel reads ---- */
int mnb_avx512_panel_applies(const MnbProblem* p) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return g_isa_cap >= 3 && cpu && p->bits == 4 && p->zp_f == NULL && MNB_PANEL == 16 && MNB_KC % 16 == 0;
}

MNB_V512_INLINE void mnb_transpose16(__m512* r) {
  __m512 t[16], u[16];
  int i, q;
  for (i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (i = 0; i < 4; ++i) { /* u[4i + q]: column 4L + q of rows 4i..4i+3, in 128-bit lane L */
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (q = 0; q < 4; ++q) {
    __m512 a = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88), b = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    __m512 c = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD), d = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
    r[q] = _mm512_shuffle_f32x4(a, b, 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(a, b, 0xDD);
    r[4 + q] = _mm512_shuffle_f32x4(c, d, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(c, d, 0xDD);
  }
}

MNB_V512 void mnb_avx512_panel_f32(const MnbProblem* p, int64_t nc, int64_t width, int64_t kc0, int64_t kc,
                                   float* panel) {
  const int64_t kb = p->k_blocks, bytes = kb * p->blob;
  const int shift = __builtin_ctzll((unsigned long long)p->block);
  const __m128i nib = _mm_set1_epi8(15);
  int64_t k;
  int j;
  for (k = 0; k < kc; k += 16) { /* block_size >= 16: the 16 values share one block */
    int64_t blk = (kc0 + k) >> shift;
    __m512 r[16];
    for (j = 0; j < 16; ++j) {
      int64_t n = nc + j;
      __m128i x, lo, hi;
      if (j >= width) {
        r[j] = _mm512_setzero_ps();
        continue;
      }
      x = _mm_loadl_epi64((const __m128i*)(p->b + n * bytes + (kc0 + k) / 2));
      lo = _mm_and_si128(x, nib);
      hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
      x = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8((char)mnb_zero_point(p, n, blk)));
      r[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x)), _mm512_set1_ps(p->scales[n * kb + blk]));
    }
    mnb_transpose16(r);
    for (j = 0; j < 16; ++j) _mm512_store_ps(panel + (k + j) * MNB_PANEL, r[j]);
  }
}

#else /* not x86-64 GCC/Clang */

int mnb_avx512vnni_applies(const MnbProblem* p) {
  (void)p;
  return 0;
}
void mnb_avx512vnni_columns(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  (void)p; (void)n0; (void)n1; (void)buf;
}
void mnb_avx512_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa,
                           float* qa_scale, int32_t* qa_sum, float* qa_sum_scaled) {
  (void)a; (void)M; (void)K; (void)block; (void)stride; (void)qa; (void)qa_scale; (void)qa_sum; (void)qa_sum_scaled;
}
int mnb_avx512_f32_applies(const MnbProblem* p) {
  (void)p;
  return 0;
}
void mnb_avx512_columns_f32(const MnbProblem* p, int64_t n0, int64_t n1) { (void)p; (void)n0; (void)n1; }
int mnb_avx512_panel_applies(const MnbProblem* p) {
  (void)p;
  return 0;
}
void mnb_avx512_panel_f32(const MnbProblem* p, int64_t nc, int64_t width, int64_t kc0, int64_t kc, float* panel) {
  (void)p; (void)nc; (void)width; (void)kc0; (void)kc; (void)panel;
}

#endif
