/* The AVX-512 VNNI helpers the int8 MatMulNBits kernels share (mnb_avx512.c: few rows; mnb_vnni_gemm.c: the
 * GEMM): the target attribute, a weight row's chunk geometry, a column's unpacked chunk, one row's update and the
 * zero-point terms. x86-64 GCC/Clang only (MNB_HAVE_V512). */
#ifndef ORT_CPU_EP_MNB_V512_H_
#define ORT_CPU_EP_MNB_V512_H_

#include "mnb.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MNB_HAVE_V512 1
#include <immintrin.h>

#define MNB_V512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#ifndef MNB_PREFETCH
#define MNB_PREFETCH 16
#endif
#define MNB_V512_INLINE MNB_V512 static inline __attribute__((always_inline))

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

#endif

#endif
