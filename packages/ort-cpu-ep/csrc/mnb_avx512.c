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
 * work item's panel of MNB_PANEL, whose weights stay in cache while the row groups pass over them. More than
 * MNB_GEMV_MAX_M rows go to the GEMM of mnb_vnni_gemm.c (6 x 2 tiles, zero-point terms once per panel). */
#include "mnb_v512.h"

#ifdef MNB_HAVE_V512

int mnb_avx512vnni_applies(const MnbProblem* p) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return g_isa_cap >= 3 && cpu && p->int8 && p->bits == 4 && p->zp_f == NULL;
}

/* the outputs of an MR x NC tile: its accumulators (row r, column j at r * NC + j, zero up to the next multiple of
 * 4) less the zero-point terms, reduced four at a time, plus the bias */
MNB_V512_INLINE void mnb_v512_tile_out(const MnbProblem* p, int64_t m0, int64_t n0, __m512* acc, const int MR,
                                       const int NC) {
  const int64_t kb = p->k_blocks;
  __m128 sums[2];
  float out[8];
  int64_t blk;
  int r, j;
  for (blk = 0; blk < kb; blk += 16) { /* minus sum_blk zp s_w (sum(a) s_a), lane by block */
    int cnt = kb - blk < 16 ? (int)(kb - blk) : 16;
    __mmask16 m = (__mmask16)((1u << cnt) - 1);
    __m512 sa[4];
    for (r = 0; r < MR; ++r) sa[r] = _mm512_maskz_loadu_ps(m, p->qa_sum_scaled + (m0 + r) * kb + blk);
    for (j = 0; j < NC; ++j) {
      __m512 zs = mnb_zero_terms16(p, n0 + j, blk, cnt);
      for (r = 0; r < MR; ++r) acc[r * NC + j] = _mm512_fnmadd_ps(zs, sa[r], acc[r * NC + j]);
    }
  }
  mnb_v512_sums(acc, (MR * NC + 3) / 4 * 4, sums);
  if (MR == 1 && NC == 4) { /* the GEMV's tile: four adjacent outputs */
    __m128 x = p->bias ? _mm_add_ps(sums[0], _mm_loadu_ps(p->bias + n0)) : sums[0];
    _mm_storeu_ps(p->y + m0 * p->N + n0, x);
    return;
  }
  _mm_storeu_ps(out, sums[0]);
  if (MR * NC > 4) _mm_storeu_ps(out + 4, sums[1]);
  for (r = 0; r < MR; ++r)
    for (j = 0; j < NC; ++j) p->y[(m0 + r) * p->N + n0 + j] = out[r * NC + j] + (p->bias ? p->bias[n0 + j] : 0.0f);
}

MNB_V512_INLINE void mnb_v512_tile(const MnbProblem* p, int64_t m0, int64_t n0, const int MR, const int NC) {
  const MnbV512Chunks g = mnb_v512_chunks(p);
  const int64_t kb = g.kb, bytes = g.bytes;
  /* few rows: the weights stream from memory once (prefetched ahead, never past the last column) */
  const int stream = p->M <= 4 && n0 + NC + MNB_PREFETCH <= p->N;
  __m512 acc[8];
  int64_t c, off;
  int r, j;
  for (r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
  if (stream) /* the scales of the tile MNB_PREFETCH columns ahead: contiguous, once a line */
    for (off = 0; off < NC * kb * (int64_t)sizeof(float); off += 64)
      _mm_prefetch((const char*)(p->scales + (n0 + MNB_PREFETCH) * kb) + off, _MM_HINT_T1);
  for (c = 0; c < g.chunks; ++c) {
    const MnbV512Chunk k = mnb_v512_chunk(&g, c);
    __m512i lo[4], hi[4];
    __m512 ws[4];
    for (j = 0; j < NC; ++j) {
      if (stream) /* the same chunk MNB_PREFETCH columns ahead: the hardware prefetcher alone falls behind */
        _mm_prefetch((const char*)(p->b + (n0 + j + MNB_PREFETCH) * bytes + c * 64), _MM_HINT_T1);
      mnb_v512_weights(p, &g, &k, n0 + j, c, &lo[j], &hi[j], &ws[j]);
    }
    for (r = 0; r < MR; ++r)
      mnb_v512_row(&g, &k, p->qa + (m0 + r) * p->qa_stride + c * MNB_QA_CHUNK, p->qa_scale + (m0 + r) * kb, lo, hi,
                   ws, acc + r * NC, NC);
  }
  mnb_v512_tile_out(p, m0, n0, acc, MR, NC);
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

/* one chunk of four columns (the decode GEMV): whole chunks load without masks */
MNB_V512_INLINE void mnb_v512_gemv1_chunk(const MnbProblem* p, const MnbV512Chunks* g, const MnbV512Chunk* k,
                                          int64_t c, const uint8_t* b, const uint8_t* pb, const float* s,
                                          __m512* acc, const int whole) {
  const int64_t bytes = g->bytes, kb = g->kb;
  const __m512i ae = _mm512_loadu_si512((const void*)(p->qa + c * MNB_QA_CHUNK));
  const __m512i ao = _mm512_loadu_si512((const void*)(p->qa + c * MNB_QA_CHUNK + 64));
  const __m512 as = _mm512_permutexvar_ps(g->idx, _mm512_maskz_loadu_ps(k->smask, p->qa_scale + k->b0));
  int j;
  _Pragma("GCC unroll 4") for (j = 0; j < 4; ++j) {
    __m512i v, t;
    __m512 ws;
    _mm_prefetch((const char*)(pb + j * bytes + c * 64), _MM_HINT_T1);
    v = whole ? _mm512_loadu_si512((const void*)(b + j * bytes + c * 64))
              : _mm512_maskz_loadu_epi8(k->bmask, b + j * bytes + c * 64);
    ws = _mm512_permutexvar_ps(g->idx, _mm512_maskz_loadu_ps(k->smask, s + j * kb + k->b0));
    t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, g->nib), ae);
    t = _mm512_dpbusd_epi32(t, _mm512_and_si512(_mm512_srli_epi16(v, 4), g->nib), ao);
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(ws, as), acc[j]);
  }
}

/* one row (the decode GEMV): four columns a pass with the chunk geometry computed once for the whole range, the
 * whole chunks (all 64 weight bytes, all their blocks) apart from the last partial one, the accumulators in
 * registers, the prefetch address clamped instead of branched on (the last columns prefetch their own weights) */
MNB_V512 static void mnb_v512_gemv1(const MnbProblem* p, int64_t n0, int64_t n1) {
  const MnbV512Chunks g = mnb_v512_chunks(p);
  const int64_t kb = g.kb, bytes = g.bytes, whole = bytes / 64;
  const __mmask16 smask = (__mmask16)((1u << g.per_chunk) - 1);
  int64_t n, c, off;
  int j;
  for (n = n0; n + 4 <= n1; n += 4) {
    const int64_t ahead = n + 4 + MNB_PREFETCH <= p->N ? n + MNB_PREFETCH : n;
    const uint8_t *b = p->b + n * bytes, *pb = p->b + ahead * bytes;
    const float* s = p->scales + n * kb;
    __m512 acc[4], sa;
    __m128 sums;
    int64_t blk;
    for (off = 0; off < 4 * kb * (int64_t)sizeof(float); off += 64)
      _mm_prefetch((const char*)(p->scales + ahead * kb) + off, _MM_HINT_T1);
    _Pragma("GCC unroll 4") for (j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
    for (c = 0; c < whole; ++c) {
      MnbV512Chunk k;
      k.b0 = (c * MNB_QA_CHUNK) >> g.shift;
      k.smask = smask;
      k.bmask = ~(__mmask64)0;
      mnb_v512_gemv1_chunk(p, &g, &k, c, b, pb, s, acc, 1);
    }
    for (; c < g.chunks; ++c) {
      const MnbV512Chunk k = mnb_v512_chunk(&g, c);
      mnb_v512_gemv1_chunk(p, &g, &k, c, b, pb, s, acc, 0);
    }
    for (blk = 0; blk < kb; blk += 16) { /* minus sum_blk zp s_w (sum(a) s_a), lane by block */
      int cnt = kb - blk < 16 ? (int)(kb - blk) : 16;
      sa = _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1), p->qa_sum_scaled + blk);
      _Pragma("GCC unroll 4") for (j = 0; j < 4; ++j)
        acc[j] = _mm512_fnmadd_ps(mnb_zero_terms16(p, n + j, blk, cnt), sa, acc[j]);
    }
    mnb_v512_sums(acc, 4, &sums);
    _mm_storeu_ps(p->y + n, p->bias ? _mm_add_ps(sums, _mm_loadu_ps(p->bias + n)) : sums);
  }
  for (; n < n1; ++n) mnb_v512_tile_1x1(p, 0, n);
}

typedef void (*MnbTileFn)(const MnbProblem*, int64_t, int64_t);

void mnb_avx512vnni_columns(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  static const MnbTileFn wide[5] = {NULL, mnb_v512_tile_1x4, mnb_v512_tile_2x2, mnb_v512_tile_3x2, mnb_v512_tile_4x2};
  static const MnbTileFn narrow[5] = {NULL, mnb_v512_tile_1x1, mnb_v512_tile_2x1, mnb_v512_tile_3x1, mnb_v512_tile_4x1};
  int64_t m0, n;
  if (mnb_avx512vnni_gemm(p, n0, n1, buf)) return;
  if (p->M == 1) {
    mnb_v512_gemv1(p, n0, n1);
    return;
  }
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
  const int pair = p->block == 32 && p->zp_u8 != NULL; /* a 64-value unit's two blocks share a zero-point byte */
  const uint8_t* zrow = pair ? p->zp_u8 + n * p->zp_row_bytes : NULL;
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
    if (pair && b1 < p->k_blocks) { /* blocks 2u and 2u + 1 in one zero-point byte: low nibble | high nibble */
      w = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi8((char)zrow[u]), _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                           nib);
      s1 = _mm512_set1_ps(scales[b1]);
    } else if (b1 != b0 && b1 < p->k_blocks) {
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
    p->y[r * p->N + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + (p->bias ? p->bias[n] : 0.0f);
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
