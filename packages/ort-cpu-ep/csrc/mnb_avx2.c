/* AVX2 + FMA kernels for 4-bit MatMulNBits, compiled with a function-level target attribute and used
 * only after a run-time CPU check (mnb_avx2_applies), so the library itself needs no -march.
 *
 * 16 packed bytes hold 32 values (low nibble first); they are spread to 32 bytes in element order,
 * the zero point subtracted, and then either widened to float (fp32 path) or multiplied with int8
 * activations as |w| * sign(a, w) with maddubs/madd (int32 sums, exact: |w| <= 15, |a| <= 127). Block
 * sums become float once per block (times the block's scales), lanes are summed once per output. */
#include "mnb.h"

int g_isa_cap = MNB_ISA_ALL;
__attribute__((visibility("default"))) void ort_cpu_ep_set_isa_cap(int cap) { g_isa_cap = cap; }
__attribute__((visibility("default"))) int ort_cpu_ep_isa_cap(void) { return g_isa_cap; }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define MNB_AVX2 __attribute__((target("avx2,fma")))

int mnb_avx2_applies(const MnbProblem* p) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return g_isa_cap >= 1 && cpu && p->bits == 4 && p->block % 32 == 0 && p->zp_f == NULL;
}

MNB_AVX2 static inline __m256i mnb_unpack32(const uint8_t* src, __m256i zp) {
  __m128i v = _mm_loadu_si128((const __m128i*)src);
  __m128i mask = _mm_set1_epi8(15);
  __m128i lo = _mm_and_si128(v, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  __m256i w = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  return _mm256_sub_epi8(w, zp);
}

MNB_AVX2 static inline float mnb_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

MNB_AVX2 static inline __m256 mnb_widen(__m128i bytes8) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8)); }

/* sum over one block of a[i] * (q[i] - zp), i < len (len < block only for the last block) */
MNB_AVX2 static inline __m256 mnb_block_f32(const float* a, const uint8_t* src, int64_t block, int64_t len, int zp) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256i z = _mm256_set1_epi8((char)zp);
  int64_t c;
  for (c = 0; c + 32 <= len; c += 32) {
    __m256i w = mnb_unpack32(src + c / 2, z);
    __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), mnb_widen(w0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 8), mnb_widen(_mm_srli_si128(w0, 8)), acc1);
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 16), mnb_widen(w1), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 24), mnb_widen(_mm_srli_si128(w1, 8)), acc1);
  }
  if (c < len) { /* the tail of a short last block: scalar, never reading A past K */
    float tail = 0.0f;
    int64_t i;
    (void)block;
    for (i = c; i < len; ++i) tail += a[i] * (float)(((src[i / 2] >> ((i & 1) * 4)) & 15) - zp);
    acc0 = _mm256_add_ps(acc0, _mm256_setr_ps(tail, 0, 0, 0, 0, 0, 0, 0));
  }
  return _mm256_add_ps(acc0, acc1);
}

MNB_AVX2 void mnb_avx2_column_f32(const MnbProblem* p, int64_t n) {
  const uint8_t* row = p->b + n * p->k_blocks * p->blob;
  const float* scales = p->scales + n * p->k_blocks;
  int64_t m, blk;
  for (m = 0; m < p->M; ++m) {
    const float* a = p->a + m * p->K;
    __m256 acc = _mm256_setzero_ps();
    for (blk = 0; blk < p->k_blocks; ++blk) {
      int64_t k0 = blk * p->block, len = p->K - k0 < p->block ? p->K - k0 : p->block;
      __m256 s = mnb_block_f32(a + k0, row + blk * p->blob, p->block, len, mnb_zero_point(p, n, blk));
      acc = _mm256_fmadd_ps(s, _mm256_set1_ps(scales[blk]), acc);
    }
    p->y[m * p->N + n] = mnb_hsum(acc) + (p->bias ? p->bias[n] : 0.0f);
  }
}

MNB_AVX2 void mnb_avx2_tile_f32(const float* const* rows, const float* panel, int64_t kc, float* acc) {
  __m256 c00 = _mm256_loadu_ps(acc), c01 = _mm256_loadu_ps(acc + 8);
  __m256 c10 = _mm256_loadu_ps(acc + 16), c11 = _mm256_loadu_ps(acc + 24);
  __m256 c20 = _mm256_loadu_ps(acc + 32), c21 = _mm256_loadu_ps(acc + 40);
  __m256 c30 = _mm256_loadu_ps(acc + 48), c31 = _mm256_loadu_ps(acc + 56);
  const float *a0 = rows[0], *a1 = rows[1], *a2 = rows[2], *a3 = rows[3];
  int64_t k;
  for (k = 0; k < kc; ++k) {
    __m256 w0 = _mm256_load_ps(panel + k * MNB_PANEL), w1 = _mm256_load_ps(panel + k * MNB_PANEL + 8);
    __m256 x = _mm256_broadcast_ss(a0 + k);
    c00 = _mm256_fmadd_ps(x, w0, c00);
    c01 = _mm256_fmadd_ps(x, w1, c01);
    x = _mm256_broadcast_ss(a1 + k);
    c10 = _mm256_fmadd_ps(x, w0, c10);
    c11 = _mm256_fmadd_ps(x, w1, c11);
    x = _mm256_broadcast_ss(a2 + k);
    c20 = _mm256_fmadd_ps(x, w0, c20);
    c21 = _mm256_fmadd_ps(x, w1, c21);
    x = _mm256_broadcast_ss(a3 + k);
    c30 = _mm256_fmadd_ps(x, w0, c30);
    c31 = _mm256_fmadd_ps(x, w1, c31);
  }
  _mm256_storeu_ps(acc, c00); _mm256_storeu_ps(acc + 8, c01);
  _mm256_storeu_ps(acc + 16, c10); _mm256_storeu_ps(acc + 24, c11);
  _mm256_storeu_ps(acc + 32, c20); _mm256_storeu_ps(acc + 40, c21);
  _mm256_storeu_ps(acc + 48, c30); _mm256_storeu_ps(acc + 56, c31);
}

int mnb_avx512_applies(void) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = !!__builtin_cpu_supports("avx512f");
  }
  return cpu && g_isa_cap >= 2;
}

__attribute__((target("avx512f"))) void mnb_avx512_tile_f32(const float* const* rows, const float* panel, int64_t kc,
                                                             float* acc) {
  __m512 c0 = _mm512_loadu_ps(acc), c1 = _mm512_loadu_ps(acc + 16), c2 = _mm512_loadu_ps(acc + 32);
  __m512 c3 = _mm512_loadu_ps(acc + 48), c4 = _mm512_loadu_ps(acc + 64), c5 = _mm512_loadu_ps(acc + 80);
  __m512 c6 = _mm512_loadu_ps(acc + 96), c7 = _mm512_loadu_ps(acc + 112);
  const float *a0 = rows[0], *a1 = rows[1], *a2 = rows[2], *a3 = rows[3];
  const float *a4 = rows[4], *a5 = rows[5], *a6 = rows[6], *a7 = rows[7];
  int64_t k;
  for (k = 0; k < kc; ++k) {
    __m512 w = _mm512_load_ps(panel + k * MNB_PANEL);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(a0[k]), w, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(a1[k]), w, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(a2[k]), w, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(a3[k]), w, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(a4[k]), w, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(a5[k]), w, c5);
    c6 = _mm512_fmadd_ps(_mm512_set1_ps(a6[k]), w, c6);
    c7 = _mm512_fmadd_ps(_mm512_set1_ps(a7[k]), w, c7);
  }
  _mm512_storeu_ps(acc, c0); _mm512_storeu_ps(acc + 16, c1); _mm512_storeu_ps(acc + 32, c2);
  _mm512_storeu_ps(acc + 48, c3); _mm512_storeu_ps(acc + 64, c4); _mm512_storeu_ps(acc + 80, c5);
  _mm512_storeu_ps(acc + 96, c6); _mm512_storeu_ps(acc + 112, c7);
}

/* int32 lanes of sum(qa * w) over 32 values: maddubs(|w|, sign(qa, w)) then pairwise to int32 */
MNB_AVX2 static inline __m256i mnb_dot32(__m256i w_abs, __m256i w, const int8_t* qa) {
  __m256i a = _mm256_loadu_si256((const __m256i*)qa);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
}

#define MNB_I8_ROWS 4

/* VNNI (AVX-VNNI, or AVX-512 VNNI + VL): the unsigned 4-bit values times the int8 activations in one
 * dpbusd per 32 values; the zero point enters once per block, exactly, as zp * sum(qa) in int32 */
#define MNB_VNNI_ROW(name, isa, dpbusd)                                                                     \
  __attribute__((target(isa))) static void name(const MnbProblem* p, int64_t n, int64_t m) {             \
    const uint8_t* row = p->b + n * p->k_blocks * p->blob;                                                     \
    const float* scales = p->scales + n * p->k_blocks;                                                         \
    const int8_t* qa = p->qa + m * p->qa_stride;                                                     \
    const float* qs = p->qa_scale + m * p->k_blocks;                                                           \
    const int32_t* qsum = p->qa_sum + m * p->k_blocks;                                                         \
    const __m128i mask = _mm_set1_epi8(15);                                                                    \
    __m256 acc = _mm256_setzero_ps();                                                                          \
    int64_t blk, c;                                                                                            \
    for (blk = 0; blk < p->k_blocks; ++blk) {                                                                  \
      __m256i sum = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-mnb_zero_point(p, n, blk) * qsum[blk]));        \
      for (c = 0; c < p->block; c += 32) {                                                                     \
        __m128i v = _mm_loadu_si128((const __m128i*)(row + c / 2));                                            \
        __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);                   \
        __m256i w = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));                   \
        sum = dpbusd(sum, w, _mm256_loadu_si256((const __m256i*)(qa + c)));                                   \
      }                                                                                                        \
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(qs[blk] * scales[blk]), acc);              \
      row += p->blob;                                                                                          \
      qa += p->block;                                                                                          \
    }                                                                                                          \
    p->y[m * p->N + n] = mnb_hsum(acc) + (p->bias ? p->bias[n] : 0.0f);                                        \
  }

/* four rows of A at m: the weights unpacked once per 32 values for all four */
#define MNB_VNNI_ROWS4(name, isa, dpbusd)                                                                      \
  __attribute__((target(isa))) static void name(const MnbProblem* p, int64_t n, int64_t m) {                \
    const uint8_t* row = p->b + n * p->k_blocks * p->blob;                                                     \
    const float* scales = p->scales + n * p->k_blocks;                                                         \
    const int64_t stride = p->qa_stride;                                                             \
    const int8_t* qa = p->qa + m * stride;                                                                     \
    const __m128i mask = _mm_set1_epi8(15);                                                                    \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;                                   \
    int64_t blk, c, kb = p->k_blocks;                                                                          \
    for (blk = 0; blk < kb; ++blk) {                                                                           \
      const int32_t* qsum = p->qa_sum + m * kb + blk;                                                          \
      const float* qs = p->qa_scale + m * kb + blk;                                                            \
      int zp = mnb_zero_point(p, n, blk);                                                                      \
      __m256i s0 = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-zp * qsum[0]));                                   \
      __m256i s1 = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-zp * qsum[kb]));                                  \
      __m256i s2 = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-zp * qsum[2 * kb]));                              \
      __m256i s3 = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-zp * qsum[3 * kb]));                              \
      float sb = scales[blk];                                                                                  \
      for (c = 0; c < p->block; c += 32) {                                                                     \
        __m128i v = _mm_loadu_si128((const __m128i*)(row + c / 2));                                            \
        __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);                   \
        __m256i w = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));                   \
        const int8_t* q = qa + blk * p->block + c;                                                             \
        s0 = dpbusd(s0, w, _mm256_loadu_si256((const __m256i*)q));                                            \
        s1 = dpbusd(s1, w, _mm256_loadu_si256((const __m256i*)(q + stride)));                                 \
        s2 = dpbusd(s2, w, _mm256_loadu_si256((const __m256i*)(q + 2 * stride)));                             \
        s3 = dpbusd(s3, w, _mm256_loadu_si256((const __m256i*)(q + 3 * stride)));                             \
      }                                                                                                        \
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(qs[0] * sb), acc0);                        \
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(qs[kb] * sb), acc1);                       \
      acc2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), _mm256_set1_ps(qs[2 * kb] * sb), acc2);                   \
      acc3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s3), _mm256_set1_ps(qs[3 * kb] * sb), acc3);                   \
      row += p->blob;                                                                                          \
    }                                                                                                          \
    {                                                                                                          \
      float bias = p->bias ? p->bias[n] : 0.0f;                                                                \
      p->y[m * p->N + n] = mnb_hsum(acc0) + bias;                                                              \
      p->y[(m + 1) * p->N + n] = mnb_hsum(acc1) + bias;                                                        \
      p->y[(m + 2) * p->N + n] = mnb_hsum(acc2) + bias;                                                        \
      p->y[(m + 3) * p->N + n] = mnb_hsum(acc3) + bias;                                                        \
    }                                                                                                          \
  }

MNB_VNNI_ROW(mnb_row_i8_avxvnni, "avxvnni,avx2,fma", _mm256_dpbusd_avx_epi32)
MNB_VNNI_ROW(mnb_row_i8_avx512vnni, "avx512vnni,avx512vl,avx2,fma", _mm256_dpbusd_epi32)
MNB_VNNI_ROWS4(mnb_rows4_i8_avxvnni, "avxvnni,avx2,fma", _mm256_dpbusd_avx_epi32)
MNB_VNNI_ROWS4(mnb_rows4_i8_avx512vnni, "avx512vnni,avx512vl,avx2,fma", _mm256_dpbusd_epi32)

typedef void (*MnbRowFn)(const MnbProblem*, int64_t, int64_t);

static int mnb_vnni_kind(void) {
  static int which = -1;
  if (which < 0) {
    __builtin_cpu_init();
    which = __builtin_cpu_supports("avxvnni") ? 1 : (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) ? 2 : 0;
  }
  return g_isa_cap >= 2 ? which : 0;
}

static MnbRowFn mnb_vnni_row(void) {
  int which = mnb_vnni_kind();
  return which == 1 ? mnb_row_i8_avxvnni : which == 2 ? mnb_row_i8_avx512vnni : NULL;
}

static MnbRowFn mnb_vnni_rows4(void) {
  int which = mnb_vnni_kind();
  return which == 1 ? mnb_rows4_i8_avxvnni : which == 2 ? mnb_rows4_i8_avx512vnni : NULL;
}

/* one row of A (decode): one float accumulator, block sums kept in registers */
MNB_AVX2 static void mnb_avx2_row_i8(const MnbProblem* p, int64_t n, int64_t m) {
  const uint8_t* row = p->b + n * p->k_blocks * p->blob;
  const float* scales = p->scales + n * p->k_blocks;
  const int8_t* qa = p->qa + m * p->qa_stride;
  const float* qs = p->qa_scale + m * p->k_blocks;
  __m256 acc = _mm256_setzero_ps();
  __m256i z = _mm256_set1_epi8((char)(1 << (p->bits - 1)));
  int64_t blk, c;
  for (blk = 0; blk < p->k_blocks; ++blk) {
    __m256i sum = _mm256_setzero_si256();
    if (p->zp_u8 != NULL) z = _mm256_set1_epi8((char)mnb_zero_point(p, n, blk));
    for (c = 0; c < p->block; c += 32) {
      __m256i w = mnb_unpack32(row + c / 2, z);
      sum = _mm256_add_epi32(sum, mnb_dot32(_mm256_abs_epi8(w), w, qa + c));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(qs[blk] * scales[blk]), acc);
    row += p->blob;
    qa += p->block;
  }
  p->y[m * p->N + n] = mnb_hsum(acc) + (p->bias ? p->bias[n] : 0.0f);
}

MNB_AVX2 void mnb_avx2_column_i8(const MnbProblem* p, int64_t n) {
  const uint8_t* row = p->b + n * p->k_blocks * p->blob;
  const float* scales = p->scales + n * p->k_blocks;
  int64_t m0, blk, c, r;
  MnbRowFn vnni = mnb_vnni_row(), vnni4 = mnb_vnni_rows4();
  if (vnni != NULL) {
    for (m0 = 0; m0 + 4 <= p->M; m0 += 4) vnni4(p, n, m0);
    for (; m0 < p->M; ++m0) vnni(p, n, m0);
    return;
  }
  if (p->M < MNB_I8_ROWS) {
    for (m0 = 0; m0 < p->M; ++m0) mnb_avx2_row_i8(p, n, m0);
    return;
  }
  for (m0 = 0; m0 < p->M; m0 += MNB_I8_ROWS) {
    int64_t rows = p->M - m0 < MNB_I8_ROWS ? p->M - m0 : MNB_I8_ROWS;
    __m256 acc[MNB_I8_ROWS];
    for (r = 0; r < MNB_I8_ROWS; ++r) acc[r] = _mm256_setzero_ps();
    for (blk = 0; blk < p->k_blocks; ++blk) {
      __m256i z = _mm256_set1_epi8((char)mnb_zero_point(p, n, blk));
      __m256i sums[MNB_I8_ROWS];
      for (r = 0; r < MNB_I8_ROWS; ++r) sums[r] = _mm256_setzero_si256();
      for (c = 0; c < p->block; c += 32) {
        __m256i w = mnb_unpack32(row + blk * p->blob + c / 2, z), w_abs = _mm256_abs_epi8(w);
        for (r = 0; r < rows; ++r)
          sums[r] = _mm256_add_epi32(sums[r], mnb_dot32(w_abs, w, p->qa + (m0 + r) * p->qa_stride + blk * p->block + c));
      }
      for (r = 0; r < rows; ++r) {
        __m256 s = _mm256_set1_ps(p->qa_scale[(m0 + r) * p->k_blocks + blk] * scales[blk]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), s, acc[r]);
      }
    }
    for (r = 0; r < rows; ++r) p->y[(m0 + r) * p->N + n] = mnb_hsum(acc[r]) + (p->bias ? p->bias[n] : 0.0f);
  }
}

#else /* not x86-64 GCC/Clang: the portable kernels only */

int mnb_avx2_applies(const MnbProblem* p) {
  (void)p;
  return 0;
}
void mnb_avx2_column_f32(const MnbProblem* p, int64_t n) { (void)p; (void)n; }
void mnb_avx2_tile_f32(const float* const* rows, const float* panel, int64_t kc, float* acc) {
  (void)rows; (void)panel; (void)kc; (void)acc;
}
void mnb_avx2_column_i8(const MnbProblem* p, int64_t n) { (void)p; (void)n; }
int mnb_avx512_applies(void) { return 0; }
void mnb_avx512_tile_f32(const float* const* rows, const float* panel, int64_t kc, float* acc) {
  (void)rows; (void)panel; (void)kc; (void)acc;
}

#endif
