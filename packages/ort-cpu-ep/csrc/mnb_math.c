/* MatMulNBits math: GEMV (few rows of A) and panel GEMM paths, fp32 (accuracy_level 0) and int8
 * activations with int32 block dot products (accuracy_level 4). Weights are dequantized one block (GEMV,
 * int8) or one MNB_KC x MNB_PANEL panel (fp32 GEMM) at a time into the thread's buffer, never as a whole.
 *
 * SIMD: portable C the compiler vectorizes at -O3. On x86-64 with GCC >= 11 the hot functions are also
 * compiled for x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512) and picked at load by the CPU
 * (target_clones), so one build runs on every x86-64 CPU and uses the wide units where present. */
#include <math.h>
#include <string.h>

#include "mnb.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__linux__)
#define MNB_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MNB_CLONES
#endif
#define MNB_INLINE static inline __attribute__((always_inline))

int64_t mnb_quantized_a_stride(int64_t K, int64_t block) {
  int64_t kb = (K + block - 1) / block;
  return (kb * block + MNB_QA_CHUNK - 1) / MNB_QA_CHUNK * MNB_QA_CHUNK;
}

size_t mnb_quantized_a_bytes(int64_t M, int64_t K, int64_t block) {
  int64_t kb = (K + block - 1) / block;
  size_t values = (size_t)M * (size_t)mnb_quantized_a_stride(K, block);
  return values + (size_t)M * (size_t)kb * (2 * sizeof(float) + sizeof(int32_t));
}

/* max |v| over v[0..len): the float bits as unsigned integers (the order of non-negative floats), NaN left out
 * as fmaxf leaves it; an integer max the compiler vectorizes (a float one it may not reorder) */
typedef uint32_t mnb_bits32 __attribute__((may_alias));
MNB_INLINE float mnb_abs_max(const float* v, int64_t len) {
  const mnb_bits32* bits = (const mnb_bits32*)v;
  uint32_t best = 0;
  float out;
  int64_t i;
  for (i = 0; i < len; ++i) {
    uint32_t u = bits[i] & 0x7fffffffu;
    u &= -(uint32_t)(u <= 0x7f800000u); /* NaN: 0 */
    best = best > u ? best : u;
  }
  memcpy(&out, &best, sizeof out);
  return out;
}

MNB_CLONES void mnb_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa,
                               float* qa_scale, int32_t* qa_sum, float* qa_sum_scaled) {
  int64_t kb = (K + block - 1) / block, m, blk, i;
  for (m = 0; m < M; ++m) {
    const float* row = a + m * K;
    int8_t* q = qa + m * stride;
    for (blk = 0; blk < kb; ++blk) {
      int64_t k0 = blk * block, len = K - k0 < block ? K - k0 : block;
      float amax = mnb_abs_max(row + k0, len), scale, inv;
      int32_t sum = 0;
      scale = amax / 127.0f;
      /* onnxruntime's reciprocal, 127 / max|a| in one rounding: 1 / scale can differ by an ulp and move a value
       * on a half step to the other integer */
      inv = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (i = 0; i < len; ++i) {
        float v = nearbyintf(row[k0 + i] * inv); /* the default rounding mode: half to even */
        int32_t x = (int32_t)(v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v));
        q[k0 + i] = (int8_t)x;
        sum += x;
      }
      qa_sum[m * kb + blk] = sum;
      qa_sum_scaled[m * kb + blk] = (float)sum * scale;
      for (i = len; i < block; ++i) q[k0 + i] = 0;
      qa_scale[m * kb + blk] = scale;
    }
    memset(q + kb * block, 0, (size_t)(stride - kb * block));
  }
}

/* the block's values minus its integer zero point, as int16 */
MNB_INLINE void mnb_unpack_centered(const uint8_t* src, int64_t bits, int64_t block, int zp, int16_t* w) {
  int64_t i;
  if (bits == 4) {
    for (i = 0; i < block / 2; ++i) {
      w[2 * i] = (int16_t)((src[i] & 15) - zp);
      w[2 * i + 1] = (int16_t)((src[i] >> 4) - zp);
    }
  } else if (bits == 8) {
    for (i = 0; i < block; ++i) w[i] = (int16_t)(src[i] - zp);
  } else { /* 2 bits */
    for (i = 0; i < block; ++i) w[i] = (int16_t)(((src[i >> 2] >> ((i & 3) * 2)) & 3) - zp);
  }
}

/* one block's dequantized weights (float zero points allowed), unscaled: (q - zp) */
MNB_INLINE void mnb_block_values(const MnbProblem* p, int64_t n, int64_t blk, int16_t* w16, float* wf) {
  const uint8_t* src = p->b + (n * p->k_blocks + blk) * p->blob;
  int64_t i;
  if (p->zp_f != NULL) {
    mnb_unpack_centered(src, p->bits, p->block, 0, w16);
    float z = p->zp_f[n * p->k_blocks + blk];
    for (i = 0; i < p->block; ++i) wf[i] = (float)w16[i] - z;
  } else {
    mnb_unpack_centered(src, p->bits, p->block, mnb_zero_point(p, n, blk), w16);
    for (i = 0; i < p->block; ++i) wf[i] = (float)w16[i];
  }
}

MNB_INLINE float mnb_dot_f32(const float* a, const float* w, int64_t len) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i, j;
  for (i = 0; i + 8 <= len; i += 8)
    for (j = 0; j < 8; ++j) acc[j] += a[i + j] * w[i + j];
  for (; i < len; ++i) acc[0] += a[i] * w[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

MNB_INLINE int32_t mnb_dot_i8(const int8_t* a, const int16_t* w, int64_t len) {
  int32_t acc = 0;
  int64_t i;
  for (i = 0; i < len; ++i) acc += (int32_t)a[i] * (int32_t)w[i];
  return acc;
}

static void mnb_finish_columns(const MnbProblem* p, int64_t n0, int64_t n1) {
  int64_t m, n;
  if (p->bias == NULL) return;
  for (m = 0; m < p->M; ++m)
    for (n = n0; n < n1; ++n) p->y[m * p->N + n] += p->bias[n];
}

/* few rows of A: per weight row, per block, fused dot products with every row of A */
MNB_CLONES static void mnb_gemv(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  int16_t* w16 = (int16_t*)buf;
  float* wf = (float*)((char*)buf + MNB_MAX_BLOCK * sizeof(int16_t));
  int64_t n, blk, m;
  for (n = n0; n < n1; ++n) {
    float acc[MNB_GEMV_MAX_M] = {0, 0, 0, 0};
    for (blk = 0; blk < p->k_blocks; ++blk) {
      int64_t k0 = blk * p->block, len = p->K - k0 < p->block ? p->K - k0 : p->block;
      float s = p->scales[n * p->k_blocks + blk];
      if (p->int8) {
        mnb_unpack_centered(p->b + (n * p->k_blocks + blk) * p->blob, p->bits, p->block, mnb_zero_point(p, n, blk), w16);
        for (m = 0; m < p->M; ++m) {
          int64_t row = m * p->k_blocks;
          acc[m] += (float)mnb_dot_i8(p->qa + m * p->qa_stride + blk * p->block, w16, p->block) * (p->qa_scale[row + blk] * s);
        }
      } else {
        mnb_block_values(p, n, blk, w16, wf);
        for (m = 0; m < p->M; ++m) acc[m] += mnb_dot_f32(p->a + m * p->K + k0, wf, len) * s;
      }
    }
    for (m = 0; m < p->M; ++m) p->y[m * p->N + n] = acc[m];
  }
  mnb_finish_columns(p, n0, n1);
}

/* fp32 micro-kernel: y[4 rows][16] += a[4 rows][kc] @ panel[kc][16] */
MNB_INLINE void mnb_tile_f32(const float* const* a, const float* panel, int64_t kc, float acc[4][MNB_PANEL]) {
  int64_t k, r, j;
  for (k = 0; k < kc; ++k) {
    const float* w = panel + k * MNB_PANEL;
    for (r = 0; r < 4; ++r) {
      float av = a[r][k];
      for (j = 0; j < MNB_PANEL; ++j) acc[r][j] += av * w[j];
    }
  }
}

/* the panel of columns [nc, nc + width) and K values [kc0, kc0 + kc): scaled weights, k-major, zero beyond width */
MNB_INLINE void mnb_panel_f32(const MnbProblem* p, int64_t nc, int64_t width, int64_t kc0, int64_t kc, float* panel) {
  int16_t w16[MNB_MAX_BLOCK];
  float wf[MNB_MAX_BLOCK];
  int64_t j, i;
  memset(panel, 0, sizeof(float) * MNB_KC * MNB_PANEL);
  for (j = 0; j < width; ++j) {
    int64_t n = nc + j, blk;
    for (blk = kc0 / p->block; blk * p->block < kc0 + kc; ++blk) {
      int64_t k0 = blk * p->block, len = p->K - k0 < p->block ? p->K - k0 : p->block;
      float s = p->scales[n * p->k_blocks + blk];
      mnb_block_values(p, n, blk, w16, wf);
      for (i = 0; i < len; ++i) panel[(k0 - kc0 + i) * MNB_PANEL + j] = wf[i] * s;
    }
  }
}

/* K chunks outside, panels inside: the rows of A of one chunk (M x MNB_KC floats) stay in cache while every
 * panel of the work item passes over them (with K outside, a K of 6144 made A miss the L2 on every panel) */
MNB_CLONES static void mnb_gemm_f32(const MnbProblem* p, int64_t n0, int64_t n1, void* buf, int avx2) {
  float* panel = (float*)buf; /* MNB_KC x MNB_PANEL, the scaled weights of one K chunk */
  int64_t nc, kc0, m, r, j, tile_rows = avx2 && mnb_avx512_applies() ? 8 : 4;
  int simd_panel = avx2 && mnb_avx512_panel_applies(p);
  for (m = 0; m < p->M; ++m) memset(p->y + m * p->N + n0, 0, (size_t)(n1 - n0) * sizeof(float));
  for (kc0 = 0; kc0 < p->K; kc0 += MNB_KC) {
    int64_t kc = p->K - kc0 < MNB_KC ? p->K - kc0 : MNB_KC;
    for (nc = n0; nc < n1; nc += MNB_PANEL) {
      int64_t width = n1 - nc < MNB_PANEL ? n1 - nc : MNB_PANEL;
      if (simd_panel)
        mnb_avx512_panel_f32(p, nc, width, kc0, kc, panel);
      else
        mnb_panel_f32(p, nc, width, kc0, kc, panel);
      for (m = 0; m < p->M; m += tile_rows) {
        float acc[8][MNB_PANEL];
        const float* rows[8];
        int64_t count = p->M - m < tile_rows ? p->M - m : tile_rows;
        memset(acc, 0, sizeof acc);
        for (r = 0; r < tile_rows; ++r) rows[r] = p->a + (m + (r < count ? r : count - 1)) * p->K + kc0;
        if (tile_rows == 8)
          mnb_avx512_tile_f32(rows, panel, kc, &acc[0][0]);
        else if (avx2)
          mnb_avx2_tile_f32(rows, panel, kc, &acc[0][0]);
        else
          mnb_tile_f32(rows, panel, kc, (float(*)[MNB_PANEL])acc);
        for (r = 0; r < count; ++r)
          for (j = 0; j < width; ++j) p->y[(m + r) * p->N + nc + j] += acc[r][j];
      }
    }
  }
  mnb_finish_columns(p, n0, n1);
}

MNB_CLONES static void mnb_gemm_i8(const MnbProblem* p, int64_t n0, int64_t n1, void* buf) {
  int16_t* w16 = (int16_t*)buf; /* MNB_PANEL x block centered weights of one block */
  int64_t nc, blk, m, j;
  for (m = 0; m < p->M; ++m) memset(p->y + m * p->N + n0, 0, (size_t)(n1 - n0) * sizeof(float));
  for (nc = n0; nc < n1; nc += MNB_PANEL) {
    int64_t width = n1 - nc < MNB_PANEL ? n1 - nc : MNB_PANEL;
    for (blk = 0; blk < p->k_blocks; ++blk) {
      float s[MNB_PANEL];
      for (j = 0; j < width; ++j) {
        int64_t n = nc + j;
        mnb_unpack_centered(p->b + (n * p->k_blocks + blk) * p->blob, p->bits, p->block, mnb_zero_point(p, n, blk),
                            w16 + j * p->block);
        s[j] = p->scales[n * p->k_blocks + blk];
      }
      for (m = 0; m < p->M; ++m) {
        const int8_t* qa = p->qa + m * p->qa_stride + blk * p->block;
        float sa = p->qa_scale[m * p->k_blocks + blk];
        float* y = p->y + m * p->N + nc;
        for (j = 0; j < width; ++j) y[j] += (float)mnb_dot_i8(qa, w16 + j * p->block, p->block) * (sa * s[j]);
      }
    }
  }
  mnb_finish_columns(p, n0, n1);
}

void mnb_compute_panels(const MnbProblem* p, int64_t p0, int64_t p1, void* thread_buffer) {
  int64_t n0 = p0 * MNB_PANEL, n1 = p1 * MNB_PANEL < p->N ? p1 * MNB_PANEL : p->N;
  void* buf = (void*)(((uintptr_t)thread_buffer + 63) & ~(uintptr_t)63);
  int64_t n;
  if (n0 >= n1) return;
  if (p->int8 && mnb_avx512vnni_applies(p)) {
    mnb_avx512vnni_columns(p, n0, n1, buf);
    return;
  }
  if (mnb_avx512_f32_applies(p)) {
    mnb_avx512_columns_f32(p, n0, n1);
    return;
  }
  if (mnb_avx2_applies(p)) {
    if (p->int8) {
      for (n = n0; n < n1; ++n) mnb_avx2_column_i8(p, n);
    } else if (p->M <= MNB_GEMV_MAX_M) {
      for (n = n0; n < n1; ++n) mnb_avx2_column_f32(p, n);
    } else {
      mnb_gemm_f32(p, n0, n1, buf, 1);
    }
    return;
  }
  if (p->M <= MNB_GEMV_MAX_M)
    mnb_gemv(p, n0, n1, buf);
  else if (p->int8)
    mnb_gemm_i8(p, n0, n1, buf);
  else
    mnb_gemm_f32(p, n0, n1, buf, 0);
}
