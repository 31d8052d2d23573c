/* The depthwise loop of the float32 Conv C kernel (conv.h): one input channel per group, a direct loop over the
 * zero-padded input plane split by column phase, rows x 32 output columns in registers across every tap: in the
 * vectors of the CPU (conv_dw_body.h twice): AVX-512 4 rows x 2 x 16 floats, AVX2 (and the portable build) 2 rows x
 * 4 x 8 floats, eight accumulators either way. A 16-float vector type on AVX2 kept its accumulators in memory and
 * rebuilt each tap's broadcast through the stack (GCC lowers vectors wider than the target's through memory):
 * ppocrv4_det's depthwise planes ran 4-6x onnxruntime's time. */
#include <string.h>

#include "conv.h"
#include "cpu_kernels.h"
#include "sgemm.h" /* sgemm_panel_width: the vector ISA in use (64 AVX-512, 16 AVX2, 8 portable) */

#define CONV_DW_BLOCK 32 /* output pixels of a row a depthwise pass keeps in registers */

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

void conv_depthwise_taps(const ConvGeom* g, int64_t* tap) {
  const int64_t rows = conv_padded_rows(g), qw = conv_phase_width(g);
  int64_t kh, kw;
  for (kh = 0; kh < g->KH; ++kh)
    for (kw = 0; kw < g->KW; ++kw) {
      const int64_t o = kw * g->dw;
      tap[kh * g->KW + kw] = ((o % g->sw) * rows + kh * g->dh) * qw + o / g->sw;
    }
}

#define DW_NAME(f) f##_v16
#define DW_VT conv_v16
#define DW_VL 16
#define DW_ROWS 4
#define DW_NV 2
#define DW_TARGET "arch=x86-64-v4"
#include "conv_dw_body.h"
#undef DW_NAME
#undef DW_VT
#undef DW_VL
#undef DW_ROWS
#undef DW_NV
#undef DW_TARGET

typedef float conv_v8 __attribute__((vector_size(32)));
#define DW_VT conv_v8
#define DW_VL 8
#define DW_ROWS 2
#define DW_NV 4
#define DW_NAME(f) f##_v8
#define DW_TARGET "arch=x86-64-v3"
#include "conv_dw_body.h"
#undef DW_NAME
#undef DW_TARGET
#define DW_NAME(f) f##_base
#define DW_TARGET "default"
#include "conv_dw_body.h"

void conv_depthwise_plane(const ConvGeom* g, const int64_t* tap, const float* x, const float* w, const float* bias,
                          const float* z, float* y, int64_t image, int64_t m, const ConvAct* act, float* pad) {
  switch (sgemm_panel_width()) { /* the CPU's vectors, lowered by ort_cpu_ep_set_isa_cap as the GEMM's */
    case 64: conv_depthwise_plane_v16(g, tap, x, w, bias, z, y, image, m, act, pad); return;
    case 16: conv_depthwise_plane_v8(g, tap, x, w, bias, z, y, image, m, act, pad); return;
    default: conv_depthwise_plane_base(g, tap, x, w, bias, z, y, image, m, act, pad); return;
  }
}
