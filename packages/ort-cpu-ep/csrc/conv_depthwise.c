/* The depthwise loop of the float32 Conv C kernel (conv.h): one input channel per group, a direct loop over the
 * zero-padded input plane split by column phase, 4 rows x 32 output columns in registers across every tap. */
#include <string.h>

#include "conv.h"
#include "cpu_kernels.h"

#define CONV_DW_BLOCK 32 /* output pixels of a row a depthwise pass keeps in registers (2 x 16 floats) */
#define CONV_DW_ROWS 4   /* output rows a depthwise pass computes together (8 independent accumulators) */

/* the zero-padded input plane of a depthwise convolution, split by column phase: a column stride of sw gives sw
 * planes of (H + pt + pb) rows of conv_phase_width floats, plane ph holding padded columns ph, ph + sw, ... so that
 * each tap reads consecutive floats for consecutive output columns (stride 1: the padded plane itself); then
 * slack for the last output block's unused lanes */
static int64_t conv_padded_rows(const ConvGeom* g) { return g->H + g->pt + g->pb; }

static int64_t conv_phase_width(const ConvGeom* g) { return (g->W + g->pl + g->pr + g->sw - 1) / g->sw; }

size_t conv_padded_floats(const ConvGeom* g) {
  return (size_t)(g->sw * conv_padded_rows(g) * conv_phase_width(g) + CONV_DW_BLOCK + 16);
}

/* n floats from src to dst without a library call (planes of a few floats are common): 16-float moves, the last
 * one ending at n (overlapping the one before), scalars below 16 */
static inline __attribute__((always_inline)) void conv_copy(float* dst, const float* src, int64_t n) {
  int64_t i;
  if (n < 16) {
    for (i = 0; i < n; ++i) dst[i] = src[i];
    return;
  }
  for (i = 0; i + 16 < n; i += 16) memcpy(dst + i, src + i, 16 * sizeof(float));
  memcpy(dst + n - 16, src + n - 16, 16 * sizeof(float));
}

/* the phase planes of one input channel: all zero, then X's rows into their place */
static inline __attribute__((always_inline)) void conv_dw_pad(const ConvGeom* g, const float* plane, float* pad) {
  const int64_t rows = conv_padded_rows(g), qw = conv_phase_width(g);
  int64_t ph, h, i;
  memset(pad, 0, conv_padded_floats(g) * sizeof(float));
  for (ph = 0; ph < g->sw; ++ph) {
    /* the phase's columns i whose padded column i * sw + ph falls on X: [a, b) */
    const int64_t a = g->pl > ph ? (g->pl - ph + g->sw - 1) / g->sw : 0;
    const int64_t b = (g->pl + g->W - ph + g->sw - 1) / g->sw < qw ? (g->pl + g->W - ph + g->sw - 1) / g->sw : qw;
    if (a >= b) continue;
    for (h = 0; h < g->H; ++h) {
      float* d = pad + (ph * rows + g->pt + h) * qw + a;
      const float* src = plane + h * g->W + (a * g->sw + ph - g->pl); /* X's column of phase column a */
      if (g->sw == 1) conv_copy(d, src, b - a);
      else if (g->sw == 2)
        for (i = 0; i < b - a; ++i) d[i] = src[2 * i];
      else
        for (i = 0; i < b - a; ++i) d[i] = src[i * g->sw];
    }
  }
}

/* R (1 or CONV_DW_ROWS) output rows from `oh` x 16 NV (1 or 2) output columns from v0 (n of them valid) of a
 * depthwise plane: R x NV accumulators of 16 floats, independent FMA chains across the taps, each tap one
 * unaligned load from its phase plane (R and NV are constants where this inlines); full blocks go straight to
 * the output rows, a tail through tmp */
static inline __attribute__((always_inline)) void conv_dw_block(const ConvGeom* g, const float* pad,
                                                                const int64_t* tap, const float* wm, float* out,
                                                                int64_t oh, int64_t v0, int64_t n, const int R,
                                                                const int NV) {
  const int64_t rs = g->sh * conv_phase_width(g), taps = g->KH * g->KW; /* floats between output rows' inputs */
  const float* base = pad + oh * rs + v0;
  const int split = R * NV <= 4 ? 2 : 1; /* few rows: even and odd taps in two sums, twice the FMA chains */
  conv_v16 acc[2][CONV_DW_ROWS][2];
  int64_t t;
  int r, v, h;
  memset(acc, 0, sizeof acc);
  for (t = 0; t < taps; t += split)
#pragma GCC unroll 2
    for (h = 0; h < split; ++h) {
      const float wv = t + h < taps ? wm[t + h] : 0.0f; /* vector * scalar: one broadcast */
      const float* s0 = base + tap[t + h < taps ? t + h : t];
#pragma GCC unroll 4
      for (r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (v = 0; v < NV; ++v) {
          conv_v16 x;
          memcpy(&x, s0 + r * rs + 16 * v, sizeof x);
          acc[h][r][v] += wv * x;
        }
    }
  if (split == 2)
    for (r = 0; r < R; ++r)
      for (v = 0; v < NV; ++v) acc[0][r][v] += acc[1][r][v];
  for (r = 0; r < R; ++r) {
    float* dst = out + (oh + r) * g->OW + v0;
    /* a full block, or one row's only block whose spare lanes land on the plane's later rows (stored after it) */
    if (n == 16 * NV || (g->OW <= CONV_DW_BLOCK && (oh + r) * g->OW + 16 * NV <= g->OH * g->OW)) {
      memcpy(dst, acc[0][r], (size_t)NV * sizeof(conv_v16));
    } else {
      float tmp[CONV_DW_BLOCK];
      memcpy(tmp, acc[0][r], (size_t)NV * sizeof(conv_v16));
      for (t = 0; t < n; ++t) dst[t] = tmp[t];
    }
  }
}

static inline __attribute__((always_inline)) void conv_dw_rows(const ConvGeom* g, const float* pad, const int64_t* tap,
                                                               const float* wm, float* out, int64_t oh, int64_t v0,
                                                               int64_t n, const int R) {
  if (n > 16) conv_dw_block(g, pad, tap, wm, out, oh, v0, n, R, 2);
  else conv_dw_block(g, pad, tap, wm, out, oh, v0, n, R, 1);
}

void conv_depthwise_taps(const ConvGeom* g, int64_t* tap) {
  const int64_t rows = conv_padded_rows(g), qw = conv_phase_width(g);
  int64_t kh, kw;
  for (kh = 0; kh < g->KH; ++kh)
    for (kw = 0; kw < g->KW; ++kw) {
      const int64_t o = kw * g->dw;
      tap[kh * g->KW + kw] = ((o % g->sw) * rows + kh * g->dh) * qw + o / g->sw;
    }
}

CPU_KERNELS_CLONES
void conv_depthwise_plane(const ConvGeom* g, const int64_t* tap, const float* x, const float* w, const float* bias,
                          const float* z, float* y, int64_t image, int64_t m, const ConvAct* act, float* pad) {
  const int64_t c = m / g->Mg; /* the group's one input channel */
  const float* wm = w + m * g->KH * g->KW;
  float* out = y + (image * g->M + m) * g->OH * g->OW;
  int64_t oh, v0;
  conv_dw_pad(g, x + (image * g->C + c) * g->H * g->W, pad);
  for (v0 = 0; v0 < g->OW; v0 += CONV_DW_BLOCK) {
    const int64_t n = g->OW - v0 < CONV_DW_BLOCK ? g->OW - v0 : CONV_DW_BLOCK;
    for (oh = 0; oh + CONV_DW_ROWS <= g->OH; oh += CONV_DW_ROWS) conv_dw_rows(g, pad, tap, wm, out, oh, v0, n, CONV_DW_ROWS);
    if (oh + 2 <= g->OH) {
      conv_dw_rows(g, pad, tap, wm, out, oh, v0, n, 2);
      oh += 2;
    }
    if (oh < g->OH) conv_dw_rows(g, pad, tap, wm, out, oh, v0, n, 1);
  }
  conv_bias_act(out, 1, g->OH * g->OW, 0, bias != NULL ? bias + m : NULL, z != NULL ? z + (out - y) : NULL, act);
}
