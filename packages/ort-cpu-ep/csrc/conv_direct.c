/* The direct float32 Conv path (conv.h), for constant weights packed at initialization: no im2col, no per-call
 * packing. The weights are packed once (conv_direct_pack) in blocks of CONV_DIRECT_BLOCK output channels, each
 * tap's 32 channels contiguous: Wp[group][block][c, kh, kw][32], zeros past the group's channels. The input is
 * read where it lies, or from one zero-padded copy of the image (Q) when the Conv pads. A register tile holds
 * R output pixels of one output row (up to 14 on AVX-512, any count) x 2 vectors of output channels: for each
 * (c, kh, kw) two weight vectors are loaded and each pixel's input value is broadcast into R x 2 multiply-adds, as
 * onnxruntime's NCHWc kernels do,
 * but the output is stored straight to NCHW (a tile's pixels are a run of one row). Any stride, dilation and
 * kernel size; groups. Measured on a 1-thread Sapphire Rapids core: see the CHANGELOG. */
#include <stdint.h>
#include <string.h>

#include "conv.h"
#include "sgemm.h" /* sgemm_panel_width: the ISA level */

#pragma GCC diagnostic ignored "-Wpsabi" /* the vector values never cross a call: the helpers inline */

/* 2: AVX-512, 1: AVX2 + FMA, 0: portable: the sgemm's level (its panel width says which) */
static int cd_level(void) {
  const int64_t nr = sgemm_panel_width();
  return nr == 64 ? 2 : nr == 16 ? 1 : 0;
}

/* output channels of one tile: 2 vectors (a quarter, half or all of a packed block) */
static int64_t cd_tile_channels(void) {
  const int level = cd_level();
  return level == 2 ? 32 : level == 1 ? 16 : 8;
}

static int64_t cd_blocks(int64_t Mg) { return (Mg + CONV_DIRECT_BLOCK - 1) / CONV_DIRECT_BLOCK; }

int conv_direct_packs(int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW) {
  const int64_t Mg = group > 0 ? M / group : 0, padded = cd_blocks(Mg) * CONV_DIRECT_BLOCK;
  if (group < 1 || Mg < 1 || Cg < 1 || KH < 1 || KW < 1 || (Cg == 1 && group > 1)) return 0; /* depthwise: its loop */
  if (KH * KW > CONV_DIRECT_MAX_TAPS) return 0;
  /* a 1x1 reads one input value per channel plane and product (measured 1.3-2.2x slower than the sgemm, which packs
   * X into panels), a shallow sum too few: the sgemm's paths */
  if (KH * KW < 2 || Cg * KH * KW < 8) return 0;
  return 4 * (padded - Mg) <= padded; /* a block's zero channels cost what they compute: at most a quarter */
}

size_t conv_direct_packed_floats(int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW) {
  return (size_t)group * (size_t)cd_blocks(M / group) * CONV_DIRECT_BLOCK * (size_t)(Cg * KH * KW);
}

void conv_direct_pack(const float* w, int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW, float* wp) {
  const int64_t Mg = M / group, K = Cg * KH * KW, blocks = cd_blocks(Mg);
  int64_t g, b, k, j;
  for (g = 0; g < group; ++g)
    for (b = 0; b < blocks; ++b) {
      float* dst = wp + (g * blocks + b) * K * CONV_DIRECT_BLOCK;
      for (k = 0; k < K; ++k)
        for (j = 0; j < CONV_DIRECT_BLOCK; ++j) {
          const int64_t m = b * CONV_DIRECT_BLOCK + j;
          dst[k * CONV_DIRECT_BLOCK + j] = m < Mg ? w[(g * Mg + m) * K + k] : 0.0f;
        }
    }
}

void conv_direct_geometry(const ConvGeom* g, ConvGeom* out) {
  int64_t t;
  *out = *g;
  if (!(g->W == 1 && g->KW == 1 && g->OW == 1 && g->pl == 0 && g->pr == 0 && g->OH > 1)) return;
  /* a convolution along H only: [C, H, 1] lies in memory as [C, 1, H], so run it along W, where tiles take runs
   * of 14 pixels instead of one (magika's 5 x 1 Conv over 512 rows) */
  t = out->H; out->H = out->W; out->W = t;
  t = out->KH; out->KH = out->KW; out->KW = t;
  t = out->OH; out->OH = out->OW; out->OW = t;
  t = out->sh; out->sh = out->sw; out->sw = t;
  t = out->dh; out->dh = out->dw; out->dw = t;
  out->pl = g->pt; out->pr = g->pb; out->pt = 0; out->pb = 0;
}

static int cd_pads(const ConvGeom* g) { return g->pt || g->pl || g->pb || g->pr; }

size_t conv_direct_floats(const ConvGeom* g) {
  if (!cd_pads(g)) return 0; /* the input is read where it lies */
  return conv_round16((size_t)(g->C * (g->H + g->pt + g->pb) * (g->W + g->pl + g->pr)));
}

void conv_direct_prepare(const ConvGeom* g, const float* x, float* q, int64_t c0, int64_t c1) {
  const int64_t Hp = g->H + g->pt + g->pb, Wp = g->W + g->pl + g->pr;
  int64_t c, i;
  for (c = c0; c < c1; ++c) {
    float* dst = q + c * Hp * Wp;
    const float* src = x + c * g->H * g->W;
    memset(dst, 0, (size_t)(g->pt * Wp) * sizeof(float));
    for (i = 0; i < g->H; ++i) {
      float* row = dst + (g->pt + i) * Wp;
      memset(row, 0, (size_t)g->pl * sizeof(float));
      memcpy(row + g->pl, src + i * g->W, (size_t)g->W * sizeof(float));
      memset(row + g->pl + g->W, 0, (size_t)g->pr * sizeof(float));
    }
    memset(dst + (g->pt + g->H) * Wp, 0, (size_t)(g->pb * Wp) * sizeof(float));
  }
}

int64_t conv_direct_items(const ConvGeom* g) {
  return g->group * cd_blocks(g->Mg) * (CONV_DIRECT_BLOCK / cd_tile_channels()) * g->OH;
}

/* One ISA's tiles: TILE_R(R) is R pixels x 2 vectors of VL channels, over the whole depth; `src` is the tile's
 * first pixel in channel 0 (pixels sw apart, channels cs apart, tap t at off[t]), wp the tile's weights (32
 * floats a tap); the sums go to tile[R][2 VL]. cd_row_S covers a row of OW pixels with as few tiles as RMAX allows,
 * of even widths, and stores each into y's nch channel rows (hw apart). */
/* one case of cd_fit_S's switch: R = n pixels (RMAX at most: a case past it is never reached) */
#define CD_CASE(S, RMAX, n) \
  case n: cd_tile_##S(wp, src, cs, off, taps, C, sw, (n) <= (RMAX) ? (n) : (RMAX), bias, tile); break;

#define CD_DEFINE(S, TARGET, VT, VL, RMAX)                                                                         \
  typedef float VT __attribute__((vector_size(VL * 4)));                                                           \
  __attribute__((target(TARGET), always_inline)) static inline void cd_tile_##S(                                  \
      const float* wp, const float* src, int64_t cs, const int64_t* off, int64_t taps, int64_t C, int64_t sw,      \
      const int64_t R, const float* bias, float* tile) {                                                           \
    VT acc[RMAX][2], b0, b1;                                                                                       \
    int64_t c, t, r;                                                                                               \
    memcpy(&b0, bias, sizeof b0); /* the sums start at the channels' bias (2 VL floats, zeros without one) */      \
    memcpy(&b1, bias + VL, sizeof b1);                                                                             \
    _Pragma("GCC unroll 16") for (r = 0; r < R; ++r) {                                                             \
      acc[r][0] = b0;                                                                                              \
      acc[r][1] = b1;                                                                                              \
    }                                                                                                              \
    for (c = 0; c < C; ++c, src += cs) {                                                                           \
      for (t = 0; t < taps; ++t, wp += CONV_DIRECT_BLOCK) {                                                        \
        const float* p = src + off[t];                                                                             \
        VT w0, w1;                                                                                                 \
        memcpy(&w0, wp, sizeof w0);                                                                                \
        memcpy(&w1, wp + VL, sizeof w1);                                                                           \
        _Pragma("GCC unroll 16") for (r = 0; r < R; ++r) {                                                         \
          const float xv = p[r * sw]; /* a scalar operand: broadcast from memory (AVX-512: into the FMA) */        \
          acc[r][0] += w0 * xv;                                                                                    \
          acc[r][1] += w1 * xv;                                                                                    \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
    _Pragma("GCC unroll 16") for (r = 0; r < R; ++r) {                                                             \
      memcpy(tile + r * 2 * VL, &acc[r][0], sizeof(VT));                                                           \
      memcpy(tile + r * 2 * VL + VL, &acc[r][1], sizeof(VT));                                                      \
    }                                                                                                              \
  }                                                                                                                \
  /* one tile of the pixels left, RMAX at most (so a row of up to RMAX pixels is one tile); sw 1 (most Convs) a   \
   * constant, so that each pixel's broadcast is one addressing mode off the tap's pointer */                      \
  __attribute__((target(TARGET), always_inline)) static inline int64_t cd_fit_##S(                                \
      const float* wp, const float* src, int64_t cs, const int64_t* off, int64_t taps, int64_t C, int64_t sw,      \
      int64_t left, const float* bias, float* tile) {                                                              \
    const int64_t R = left < RMAX ? left : RMAX;                                                                   \
    switch (R) { /* R a constant in each call: the tile's loops unroll */                                        \
      CD_CASE(S, RMAX, 1) CD_CASE(S, RMAX, 2) CD_CASE(S, RMAX, 3) CD_CASE(S, RMAX, 4) CD_CASE(S, RMAX, 5)           \
      CD_CASE(S, RMAX, 6) CD_CASE(S, RMAX, 7) CD_CASE(S, RMAX, 8) CD_CASE(S, RMAX, 9) CD_CASE(S, RMAX, 10)          \
      CD_CASE(S, RMAX, 11) CD_CASE(S, RMAX, 12) CD_CASE(S, RMAX, 13)                                              \
      default: cd_tile_##S(wp, src, cs, off, taps, C, sw, RMAX, bias, tile); break;                                \
    }                                                                                                              \
    return R;                                                                                                      \
  }                                                                                                                \
  __attribute__((target(TARGET))) static void cd_row_##S(const float* wp, const float* src, int64_t cs,            \
                                                         const int64_t* off, int64_t taps, int64_t C, int64_t sw,  \
                                                         int64_t OW, float* y, int64_t hw, int64_t nch,           \
                                                         const float* bias, const float* z, const ConvAct* act) {  \
    float tile[RMAX * 2 * VL];                                                                                     \
    int64_t ow = 0, r, j;                                                                                          \
    while (ow < OW) {                                                                                              \
      const int64_t tiles = (OW - ow + RMAX - 1) / RMAX, even = (OW - ow + tiles - 1) / tiles; /* 15: 8 + 7 */    \
      const int64_t R = sw == 1 ? cd_fit_##S(wp, src + ow, cs, off, taps, C, 1, even, bias, tile)                  \
                                : cd_fit_##S(wp, src + ow * sw, cs, off, taps, C, sw, even, bias, tile);           \
      if (z == NULL && act->kind != CONV_ACT_NONE) conv_act_apply(tile, tile, R * 2 * VL, act); /* in L1 */      \
      for (j = 0; j < nch; ++j) { /* channel j's run of R pixels (plus Z's, before the activation) */             \
        float* out = y + j * hw + ow;                                                                              \
        if (z != NULL) {                                                                                           \
          const float* zr = z + j * hw + ow;                                                                       \
          for (r = 0; r < R; ++r) out[r] = tile[r * 2 * VL + j] + zr[r];                                           \
        } else {                                                                                                   \
          for (r = 0; r < R; ++r) out[r] = tile[r * 2 * VL + j];                                                   \
        }                                                                                                          \
      }                                                                                                            \
      ow += R;                                                                                                     \
    }                                                                                                              \
    if (z != NULL && act->kind != CONV_ACT_NONE)                                                                   \
      for (j = 0; j < nch; ++j) conv_act_apply(y + j * hw, y + j * hw, OW, act);                                   \
  }

#if defined(__x86_64__) && defined(__GNUC__)
CD_DEFINE(avx512, "avx512f,fma", cd_v16, 16, 14)
CD_DEFINE(avx2, "avx2,fma", cd_v8, 8, 6)
#define CD_X86 1
#endif
CD_DEFINE(base, "default", cd_v4, 4, 6)

void conv_direct_rows(const ConvGeom* g, const float* q, const float* wp, const float* bias, const float* z, float* y,
                      int64_t i0, int64_t i1, const ConvAct* act) {
  const int64_t padded = cd_pads(g), Hp = g->H + g->pt + g->pb, Wp = padded ? g->W + g->pl + g->pr : g->W;
  const int64_t cs = padded ? Hp * Wp : g->H * g->W, hw = g->OH * g->OW, taps = g->KH * g->KW;
  const int64_t nt = cd_tile_channels(), subs = CONV_DIRECT_BLOCK / nt, blocks = cd_blocks(g->Mg);
  const int level = cd_level();
  int64_t off[CONV_DIRECT_MAX_TAPS];
  int64_t kh, kw, item;
  for (kh = 0; kh < g->KH; ++kh)
    for (kw = 0; kw < g->KW; ++kw) off[kh * g->KW + kw] = kh * g->dh * Wp + kw * g->dw;
  for (item = i0; item < i1; ++item) {
    const int64_t oh = item % g->OH, rest = item / g->OH, sub = rest % subs, blk = rest / subs % blocks;
    const int64_t group = rest / subs / blocks, m = blk * CONV_DIRECT_BLOCK + sub * nt; /* within the group */
    const int64_t nch = g->Mg - m < nt ? g->Mg - m : nt, m0 = group * g->Mg + m;
    const float* w = wp + (group * blocks + blk) * g->K * CONV_DIRECT_BLOCK + sub * nt;
    const float* src = q + group * g->Cg * cs + oh * g->sh * Wp;
    float* yr = y + m0 * hw + oh * g->OW;
    const float* zr = z != NULL ? z + m0 * hw + oh * g->OW : NULL;
    float bvec[CONV_DIRECT_BLOCK]; /* the tile's bias, zeros past its channels */
    if (nch <= 0) continue;        /* the zero channels of a group's last block */
    memset(bvec, 0, sizeof bvec);
    if (bias != NULL) memcpy(bvec, bias + m0, (size_t)nch * sizeof(float));
    switch (level) {
#ifdef CD_X86
      case 2: cd_row_avx512(w, src, cs, off, taps, g->Cg, g->sw, g->OW, yr, hw, nch, bvec, zr, act); break;
      case 1: cd_row_avx2(w, src, cs, off, taps, g->Cg, g->sw, g->OW, yr, hw, nch, bvec, zr, act); break;
#endif
      default: cd_row_base(w, src, cs, off, taps, g->Cg, g->sw, g->OW, yr, hw, nch, bvec, zr, act); break;
    }
  }
}
