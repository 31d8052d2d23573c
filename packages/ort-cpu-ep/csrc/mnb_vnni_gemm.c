/* The AVX-512 VNNI int8 GEMM of MatMulNBits (accuracy_level 4, 4-bit weights, integer or absent zero points)
 * for more than MNB_GEMV_MAX_M rows, and A quantized into its even/odd layout; the chunk arithmetic is
 * mnb_avx512.c's (see there), the helpers mnb_v512.h's. */
#include <string.h>

#include "mnb_v512.h"

#ifdef MNB_HAVE_V512

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

int mnb_avx512vnni_gemm(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
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

#else /* not x86-64 GCC/Clang */

void mnb_avx512_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa,
                           float* qa_scale, int32_t* qa_sum, float* qa_sum_scaled) {
  (void)a; (void)M; (void)K; (void)block; (void)stride; (void)qa; (void)qa_scale; (void)qa_sum; (void)qa_sum_scaled;
}
int mnb_avx512vnni_gemm(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  (void)p; (void)n0; (void)n1; (void)buf;
  return 0;
}

#endif
