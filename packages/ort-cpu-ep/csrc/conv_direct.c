/* The direct float32 Conv path (conv.h): no im2col, no packing. One image's input is copied once into Q:
 * zero-padded and split by stride phase, so that every tap (kh, kw) of every output pixel is one constant offset
 * from that pixel's index in a "wide" output of OH x Wq pixels (Wq = OW + the kernel's reach in phase columns; the
 * columns past OW are computed and dropped). Then Y[m, p] = sum over (c, kh, kw) of W[m, c, kh, kw] times
 * Q[c, phase(kh, kw)][p + offset(kh, kw)]: the sgemm's micro-kernel shape (MR rows of W broadcast from the weights
 * as they lie, NR wide pixels loaded straight from Q) with the whole depth summed in registers. Measured against
 * im2col into the sgemm's panels on a 1-thread Sapphire Rapids core: see the CHANGELOG. Bias, Z and the activation
 * are applied to each run of valid pixels as it is stored (conv_bias_act). */
#include <stdint.h>
#include <string.h>

#include "conv.h"
#include "sgemm.h" /* sgemm_panel_width */

#pragma GCC diagnostic ignored "-Wpsabi" /* the vector values never cross a call: the helpers inline */

/* 2: AVX-512, 1: AVX2 + FMA, 0: portable: the sgemm's level (its panel width says which) */
static int cd_level(void) {
  const int64_t nr = sgemm_panel_width();
  return nr == 64 ? 2 : nr == 16 ? 1 : 0;
}

static void cd_tile_shape(int64_t* mr, int64_t* nr) {
  const int level = cd_level();
  *mr = level >= 1 ? 6 : 4;
  *nr = level == 2 ? 64 : level == 1 ? 16 : 8;
}

/* Q's layout: the distinct row and column phases the taps use, each phase plane Hq x Wq */
typedef struct CdLayout {
  int64_t Hq, Wq, nph, npw, plane, channel; /* channel: floats per input channel (nph * npw planes) */
  int64_t row_phase[CONV_DIRECT_MAX_TAPS], col_phase[CONV_DIRECT_MAX_TAPS]; /* phase -> compact index, or -1 */
} CdLayout;

static void cd_layout(const ConvGeom* g, CdLayout* l) {
  int64_t kh, kw, i;
  memset(l, 0, sizeof *l);
  for (i = 0; i < CONV_DIRECT_MAX_TAPS; ++i) l->row_phase[i] = l->col_phase[i] = -1;
  for (kh = 0; kh < g->KH; ++kh) {
    const int64_t ph = kh * g->dh % g->sh;
    if (l->row_phase[ph] < 0) l->row_phase[ph] = l->nph++;
  }
  for (kw = 0; kw < g->KW; ++kw) {
    const int64_t pw = kw * g->dw % g->sw;
    if (l->col_phase[pw] < 0) l->col_phase[pw] = l->npw++;
  }
  l->Hq = g->OH + (g->KH - 1) * g->dh / g->sh;
  l->Wq = g->OW + (g->KW - 1) * g->dw / g->sw;
  l->plane = l->Hq * l->Wq;
  l->channel = l->nph * l->npw * l->plane;
}

int conv_direct_applies(const ConvGeom* g) {
  CdLayout l;
  int64_t mr, nr;
  /* measured against im2col (1 thread, Sapphire Rapids): 3x3 stride 1 2-10% faster at 14x14..56x56 and 1.7x on
   * a 40-channel 30x30 image; stride 2 (four phase planes) up to 1.5x slower, 1x1 2x slower (B read across
   * channel planes instead of packed panels): those stay on im2col + sgemm */
  if (g->depthwise || g->KH * g->KW < 9 || g->KH * g->KW > CONV_DIRECT_MAX_TAPS || g->sh != 1 || g->sw != 1 ||
      g->OH * g->OW <= 1)
    return 0;
  cd_tile_shape(&mr, &nr);
  if (g->Mg < mr || g->K < 16) return 0; /* a few output channels or a shallow sum: the sgemm's paths */
  cd_layout(g, &l);
  /* the dropped columns cost what they compute: at most a third more than the valid ones */
  if (3 * l.Wq > 4 * g->OW) return 0;
  return (double)l.channel * (double)g->C < (double)(1 << 26); /* Q at most 256 MiB */
}

size_t conv_direct_floats(const ConvGeom* g) {
  CdLayout l;
  cd_layout(g, &l);
  return conv_round16((size_t)(g->C * l.channel + l.Wq + 64)); /* tiles read at most a vector past the last channel */
}

void conv_direct_prepare(const ConvGeom* g, const float* x, float* q, int64_t c0, int64_t c1) {
  CdLayout l;
  int64_t c, ph, pw, i, j;
  cd_layout(g, &l);
  for (c = c0; c < c1; ++c) {
    const float* plane = x + c * g->H * g->W;
    for (ph = 0; ph < g->sh; ++ph) {
      if (l.row_phase[ph] < 0) continue;
      for (pw = 0; pw < g->sw; ++pw) {
        float* dst;
        if (l.col_phase[pw] < 0) continue;
        dst = q + c * l.channel + (l.row_phase[ph] * l.npw + l.col_phase[pw]) * l.plane;
        for (i = 0; i < l.Hq; ++i, dst += l.Wq) {
          const int64_t ih = i * g->sh + ph - g->pt;
          /* iw = j * sw + pw - pl inside [0, W) for j in [lo, hi) */
          const int64_t off = pw - g->pl;
          int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw, hi = g->W - off <= 0 ? 0 : (g->W - off - 1) / g->sw + 1;
          if (hi > l.Wq) hi = l.Wq;
          if (lo > hi) lo = hi;
          if (ih < 0 || ih >= g->H || lo >= hi) {
            memset(dst, 0, (size_t)l.Wq * sizeof(float));
            continue;
          }
          if (lo > 0) memset(dst, 0, (size_t)lo * sizeof(float));
          if (g->sw == 1) memcpy(dst + lo, plane + ih * g->W + lo + off, (size_t)(hi - lo) * sizeof(float));
          else
            for (j = lo; j < hi; ++j) dst[j] = plane[ih * g->W + j * g->sw + off];
          if (hi < l.Wq) memset(dst + hi, 0, (size_t)(l.Wq - hi) * sizeof(float));
        }
      }
    }
  }
  if (c1 == g->C) memset(q + g->C * l.channel, 0, (size_t)(l.Wq + 64) * sizeof(float));
}

int64_t conv_direct_items(const ConvGeom* g) {
  CdLayout l;
  int64_t mr, nr;
  cd_tile_shape(&mr, &nr);
  cd_layout(g, &l);
  return g->group * ((g->Mg + mr - 1) / mr) * (((g->OH - 1) * l.Wq + g->OW + nr - 1) / nr);
}

/* the micro-kernel for one ISA: an RT x (NV x VL) tile of the wide output at q (+ each tap's offset), rows of W
 * `taps` x C floats from w (ldw apart), rows [0, mr) valid (rows past mr repeat the last), into tile (MR x NR) */
#define CD_DEFINE(S, TARGET, VT, VL, MR, NR)                                                                       \
  typedef float VT __attribute__((vector_size(VL * 4)));                                                           \
  __attribute__((target(TARGET), always_inline)) static inline void cd_rows_##S(                                  \
      const float* w, int64_t ldw, const float* q, int64_t cs, const int64_t* off, int64_t taps, int64_t C,        \
      const int64_t RT, const int64_t NV, int64_t mr, float* tile) {                                               \
    VT acc[MR][NR / VL];                                                                                           \
    const float* row[MR];                                                                                          \
    int64_t i, j, c, t;                                                                                            \
    memset(acc, 0, sizeof acc);                                                                                    \
    for (i = 0; i < RT; ++i) row[i] = w + (i < mr ? i : mr - 1) * ldw;                                             \
    for (c = 0; c < C; ++c, q += cs) {                                                                             \
      for (t = 0; t < taps; ++t) {                                                                                 \
        const float* src = q + off[t];                                                                             \
        VT bv[NR / VL];                                                                                            \
        _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) memcpy(&bv[j], src + j * VL, sizeof(VT));                \
        _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                        \
          const float av = row[i][t];                                                                              \
          _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) acc[i][j] += bv[j] * av;                               \
        }                                                                                                          \
      }                                                                                                            \
      _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) row[i] += taps;                                            \
    }                                                                                                              \
    _Pragma("GCC unroll 16") for (i = 0; i < RT; ++i) {                                                            \
      _Pragma("GCC unroll 8") for (j = 0; j < NV; ++j) memcpy(tile + i * NR + j * VL, &acc[i][j], sizeof(VT));     \
    }                                                                                                              \
  }                                                                                                                \
  __attribute__((target(TARGET))) static void cd_tile_##S(const float* w, int64_t ldw, const float* q, int64_t cs, \
                                                          const int64_t* off, int64_t taps, int64_t C, int64_t mr, \
                                                          int64_t cols, float* tile) {                             \
    switch (cols < NR ? (cols + VL - 1) / VL : NR / VL) {                                                          \
      case 1:                                                                                                      \
        if (NR / VL > 1) { cd_rows_##S(w, ldw, q, cs, off, taps, C, MR, 1, mr, tile); return; }                    \
        break;                                                                                                     \
      case 2:                                                                                                      \
        if (NR / VL > 2) { cd_rows_##S(w, ldw, q, cs, off, taps, C, MR, 2, mr, tile); return; }                    \
        break;                                                                                                     \
      case 3:                                                                                                      \
        if (NR / VL > 3) { cd_rows_##S(w, ldw, q, cs, off, taps, C, MR, 3, mr, tile); return; }                    \
        break;                                                                                                     \
      default: break;                                                                                              \
    }                                                                                                              \
    cd_rows_##S(w, ldw, q, cs, off, taps, C, MR, NR / VL, mr, tile);                                               \
  }

#if defined(__x86_64__) && defined(__GNUC__)
CD_DEFINE(avx512, "avx512f,fma", cd_v16, 16, 6, 64)
CD_DEFINE(avx2, "avx2,fma", cd_v8, 8, 6, 16)
#define CD_X86 1
#endif
CD_DEFINE(base, "default", cd_v4, 4, 4, 8)

void conv_direct_tiles(const ConvGeom* g, const float* q, const float* w, const float* bias, const float* z, float* y,
                       int64_t i0, int64_t i1, const ConvAct* act) {
  CdLayout l;
  int64_t mr_max, nr, mtiles, ptiles, wide, item, kh, kw, taps = g->KH * g->KW;
  const int64_t hw = g->OH * g->OW;
  const int level = cd_level();
  int64_t off[CONV_DIRECT_MAX_TAPS];
  float tile[6 * 64];
  cd_tile_shape(&mr_max, &nr);
  cd_layout(g, &l);
  for (kh = 0; kh < g->KH; ++kh)
    for (kw = 0; kw < g->KW; ++kw) {
      const int64_t rh = kh * g->dh, cw = kw * g->dw;
      off[kh * g->KW + kw] = (l.row_phase[rh % g->sh] * l.npw + l.col_phase[cw % g->sw]) * l.plane +
                             rh / g->sh * l.Wq + cw / g->sw;
    }
  wide = (g->OH - 1) * l.Wq + g->OW; /* through the last row's last valid column */
  mtiles = (g->Mg + mr_max - 1) / mr_max;
  ptiles = (wide + nr - 1) / nr;
  for (item = i0; item < i1; ++item) {
    const int64_t pt = item % ptiles, mt = item / ptiles % mtiles, group = item / ptiles / mtiles;
    const int64_t m0 = group * g->Mg + mt * mr_max, p0 = pt * nr;
    const int64_t mr = g->Mg - mt * mr_max < mr_max ? g->Mg - mt * mr_max : mr_max;
    const int64_t cols = wide - p0 < nr ? wide - p0 : nr;
    const float* wm = w + m0 * g->K;
    const float* qg = q + group * g->Cg * l.channel + p0;
    int64_t p;
    switch (level) {
#ifdef CD_X86
      case 2: cd_tile_avx512(wm, g->K, qg, l.channel, off, taps, g->Cg, mr, cols, tile); break;
      case 1: cd_tile_avx2(wm, g->K, qg, l.channel, off, taps, g->Cg, mr, cols, tile); break;
#endif
      default: cd_tile_base(wm, g->K, qg, l.channel, off, taps, g->Cg, mr, cols, tile); break;
    }
    for (p = p0; p < p0 + cols;) { /* the valid runs of each output row the tile covers */
      const int64_t oh = p / l.Wq, ow = p % l.Wq;
      const int64_t run = l.Wq - ow < p0 + cols - p ? l.Wq - ow : p0 + cols - p;
      const int64_t valid = ow >= g->OW ? 0 : (g->OW - ow < run ? g->OW - ow : run);
      if (valid > 0) {
        const int64_t at = m0 * hw + oh * g->OW + ow;
        int64_t i;
        for (i = 0; i < mr; ++i) memcpy(y + at + i * hw, tile + i * nr + (p - p0), (size_t)valid * sizeof(float));
        conv_bias_act(y + at, mr, valid, hw, bias != NULL ? bias + m0 : NULL, z != NULL ? z + at : NULL, act);
      }
      p += run;
    }
  }
}
