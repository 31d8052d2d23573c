/* The math of the float32 Conv C kernel (conv.h): geometry, im2col by chunks of output pixels into the MatMul
 * kernel's sgemm, the one-pixel matrix-vector product, bias and fused activation (the depthwise loop:
 * conv_depthwise.c). */
#include <stdio.h>
#include <string.h>

#include "conv.h"
#include "cpu_kernels.h"
#include "sgemm.h"


static int64_t conv_attr(const int64_t* v, size_t n, size_t i, int64_t dflt) { return i < n ? v[i] : dflt; }

int conv_geometry(const ConvAttrs* a, const int64_t* x, const int64_t* w, ConvGeom* g, char* err, size_t err_len) {
  int64_t ekh, ekw, i;
  memset(g, 0, sizeof *g);
  g->N = x[0]; g->C = x[1]; g->H = x[2]; g->W = x[3];
  g->M = w[0]; g->KH = conv_attr(a->kernel, a->n_kernel, 0, w[2]); g->KW = conv_attr(a->kernel, a->n_kernel, 1, w[3]);
  g->group = a->group;
  if (g->group < 1 || g->C % g->group || g->M % g->group || w[1] != g->C / g->group) {
    snprintf(err, err_len, "X has %lld channels and W shape [%lld, %lld, %lld, %lld] with group=%lld: W's dimension 1 must be "
             "channels / group and both channel counts divisible by group", (long long)g->C, (long long)w[0],
             (long long)w[1], (long long)w[2], (long long)w[3], (long long)g->group);
    return 1;
  }
  if (g->KH != w[2] || g->KW != w[3]) {
    snprintf(err, err_len, "kernel_shape [%lld, %lld] differs from W's spatial dimensions [%lld, %lld]", (long long)g->KH,
             (long long)g->KW, (long long)w[2], (long long)w[3]);
    return 1;
  }
  g->Cg = g->C / g->group; g->Mg = g->M / g->group;
  g->sh = conv_attr(a->strides, a->n_strides, 0, 1); g->sw = conv_attr(a->strides, a->n_strides, 1, 1);
  g->dh = conv_attr(a->dil, a->n_dil, 0, 1); g->dw = conv_attr(a->dil, a->n_dil, 1, 1);
  if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1) {
    snprintf(err, err_len, "strides [%lld, %lld] and dilations [%lld, %lld] must be >= 1", (long long)g->sh,
             (long long)g->sw, (long long)g->dh, (long long)g->dw);
    return 1;
  }
  ekh = (g->KH - 1) * g->dh + 1; ekw = (g->KW - 1) * g->dw + 1;
  if (a->auto_pad == CONV_AUTO_SAME_UPPER || a->auto_pad == CONV_AUTO_SAME_LOWER) {
    int64_t in[2] = {g->H, g->W}, s[2] = {g->sh, g->sw}, ek[2] = {ekh, ekw}, begin[2], end[2];
    for (i = 0; i < 2; ++i) {
      int64_t out = (in[i] + s[i] - 1) / s[i], total = (out - 1) * s[i] + ek[i] - in[i];
      if (total < 0) total = 0;
      begin[i] = a->auto_pad == CONV_AUTO_SAME_UPPER ? total / 2 : total - total / 2;
      end[i] = total - begin[i];
    }
    g->pt = begin[0]; g->pl = begin[1]; g->pb = end[0]; g->pr = end[1];
  } else if (a->auto_pad == CONV_AUTO_NOTSET) {
    g->pt = conv_attr(a->pads, a->n_pads, 0, 0); g->pl = conv_attr(a->pads, a->n_pads, 1, 0);
    g->pb = conv_attr(a->pads, a->n_pads, 2, 0); g->pr = conv_attr(a->pads, a->n_pads, 3, 0);
  }
  if (g->pt < 0 || g->pl < 0 || g->pb < 0 || g->pr < 0) {
    snprintf(err, err_len, "pads [%lld, %lld, %lld, %lld] must be >= 0", (long long)g->pt, (long long)g->pl,
             (long long)g->pb, (long long)g->pr);
    return 1;
  }
  if (g->H + g->pt + g->pb < ekh || g->W + g->pl + g->pr < ekw) { /* onnxruntime refuses it too */
    snprintf(err, err_len, "the padded input %lld x %lld is smaller than the dilated kernel %lld x %lld; pad it or "
             "use a smaller kernel", (long long)(g->H + g->pt + g->pb), (long long)(g->W + g->pl + g->pr),
             (long long)ekh, (long long)ekw);
    return 1;
  }
  g->OH = (g->H + g->pt + g->pb - ekh) / g->sh + 1;
  g->OW = (g->W + g->pl + g->pr - ekw) / g->sw + 1;
  g->K = g->Cg * g->KH * g->KW;
  g->depthwise = g->Cg == 1 && g->group > 1; /* one input channel, one group: a single GEMM (an STFT filter bank) */
  if (!g->depthwise && !(g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && !g->pt && !g->pl && !g->pb && !g->pr)) {
    int64_t n = g->OH * g->OW, chunk = CONV_COLS_FLOATS / (g->K > 0 ? g->K : 1) / 64 * 64;
    if (chunk < 64) chunk = 64;
    if (chunk > CONV_CHUNK) chunk = CONV_CHUNK;
    g->chunk = chunk < n ? chunk : (n > 0 ? n : 1);
  }
  return 0;
}

size_t conv_round16(size_t n) { return (n + 15) / 16 * 16; }

/* whether an im2col chunk goes straight into the sgemm's packed panels (not for a few output channels: the
 * sgemm streams their B, row by row, from the whole chunk's im2col) */
static int conv_packs(const ConvGeom* g) { return g->Mg > SG_SKINNY_ROWS; }

/* whether the output has so few pixels that its im2col columns, transposed (a pixel's K taps contiguous), are
 * dotted with the weight rows directly (conv_few_pixels): the sgemm's panels of 16+ columns would hold a few */
static int conv_few(const ConvGeom* g) { return g->chunk && g->OH * g->OW <= CONV_FEW_PIXELS; }

size_t conv_thread_floats(const ConvGeom* g) {
  int64_t n = g->chunk ? g->chunk : (g->OH * g->OW < SG_NC ? g->OH * g->OW : SG_NC);
  if (g->depthwise) return conv_round16(conv_padded_floats(g));
  if (conv_few(g)) /* the transposed columns, and one im2col row */
    return conv_round16((size_t)(g->K * g->OH * g->OW)) + conv_round16((size_t)(g->OH * g->OW));
  if (g->chunk && conv_packs(g)) /* one im2col row of the chunk, one packed block */
    return conv_round16((size_t)g->chunk) + sgemm_thread_floats(g->Mg, g->K, n, 0);
  return conv_round16((size_t)(g->K * g->chunk)) + sgemm_thread_floats(g->Mg, g->K, n > 0 ? n : 1, 0);
}

void conv_bias_act(float* y, int64_t rows, int64_t n, int64_t ld, const float* bias, const float* z, const ConvAct* act) {
  int64_t m, j;
  for (m = 0; m < rows; ++m) {
    float* r = y + m * ld;
    if (bias != NULL) {
      const float b = bias[m];
      for (j = 0; j < n; ++j) r[j] += b;
    }
    if (z != NULL) { /* after the bias, as Conv then Add compute it */
      const float* zr = z + m * ld;
      for (j = 0; j < n; ++j) r[j] += zr[j];
    }
    if (act->kind != CONV_ACT_NONE) conv_act_apply(r, r, n, act);
  }
}

/* row k = (c, kh, kw) of one image's group's im2col, output pixels [n0, n1) into dst: X[c, ih, iw] or 0 in the pads */
static inline __attribute__((always_inline)) void conv_im2col_row(const ConvGeom* g, const float* x, int64_t k,
                                                                  int64_t n0, int64_t n1, float* dst) {
  const int64_t c = k / (g->KH * g->KW), kh = k / g->KW % g->KH, kw = k % g->KW;
  const float* plane = x + c * g->H * g->W;
  const int64_t off = kw * g->dw - g->pl; /* iw = ow * sw + off */
  /* the ow whose iw falls inside [0, W) */
  const int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  const int64_t hi = g->W - off <= 0 ? 0 : (g->W - off - 1) / g->sw + 1;
  int64_t j = n0;
  if (g->W == 1 && g->OW == 1 && g->KW == 1) { /* a 1-D convolution along H: a strided run of one column */
    const int64_t offh = kh * g->dh - g->pt; /* ih = oh * sh + offh */
    int64_t a = offh >= 0 ? 0 : (-offh + g->sh - 1) / g->sh, b = g->H - offh <= 0 ? 0 : (g->H - offh - 1) / g->sh + 1;
    a = a < n0 ? n0 : a > n1 ? n1 : a; /* the real cells of [n0, n1): [a, b); pads before and after */
    b = b < a ? a : b > n1 ? n1 : b;
    if (a > n0) memset(dst, 0, (size_t)(a - n0) * sizeof(float));
    if (g->sh == 1 && b > a) memcpy(dst + (a - n0), plane + a + offh, (size_t)(b - a) * sizeof(float));
    else
      for (j = a; j < b; ++j) dst[j - n0] = plane[j * g->sh + offh];
    if (n1 > b) memset(dst + (b - n0), 0, (size_t)(n1 - b) * sizeof(float));
    return;
  }
  while (j < n1) {
    const int64_t oh = j / g->OW, ow0 = j % g->OW;
    const int64_t ow1 = g->OW - ow0 < n1 - j ? g->OW : ow0 + (n1 - j);
    const int64_t ih = oh * g->sh - g->pt + kh * g->dh;
    int64_t ow;
    if (ih < 0 || ih >= g->H) {
      memset(dst, 0, (size_t)(ow1 - ow0) * sizeof(float));
    } else {
      const float* row = plane + ih * g->W + off;
      const int64_t a = ow0 > lo ? ow0 : lo, b = ow1 < hi ? ow1 : hi;
      for (ow = ow0; ow < a && ow < ow1; ++ow) dst[ow - ow0] = 0.0f;
      if (g->sw == 1 && a < b) memcpy(dst + (a - ow0), row + a, (size_t)(b - a) * sizeof(float));
      else
        for (ow = a; ow < b; ++ow) dst[ow - ow0] = row[ow * g->sw];
      for (ow = b > ow0 ? b : ow0; ow < ow1; ++ow) dst[ow - ow0] = 0.0f;
    }
    dst += ow1 - ow0;
    j += ow1 - ow0;
  }
}

/* cols[K x (n1 - n0)] of one image's group (the streamed sgemm's B: a few output channels) */
CPU_KERNELS_CLONES
static void conv_im2col(const ConvGeom* g, const float* x, int64_t n0, int64_t n1, float* cols) {
  int64_t k;
  for (k = 0; k < g->K; ++k) conv_im2col_row(g, x, k, n0, n1, cols + k * (n1 - n0));
}

/* the sgemm's B packer for one image's group: im2col rows [k0, k0 + kc) of output pixels [n0, n0 + cols)
 * straight into the micro-kernel's panels (sgemm.h SgPackFn), each row built in `row` (L1) and cut into panels */
typedef struct ConvPack {
  const ConvGeom* g;
  const float* x;
  float* row; /* `chunk` floats */
  int64_t n0; /* the chunk's first output pixel: the sgemm's column 0 */
} ConvPack;

CPU_KERNELS_CLONES
static void conv_pack_cols(void* ctx, int64_t k0, int64_t kc, int64_t n0, int64_t cols, int64_t nr, float* bp) {
  const ConvPack* cp = (const ConvPack*)ctx;
  int64_t k, q;
  for (k = 0; k < kc; ++k) {
    conv_im2col_row(cp->g, cp->x, k0 + k, cp->n0 + n0, cp->n0 + n0 + cols, cp->row);
    for (q = 0; (q + 1) * nr <= cols; ++q) { /* full panels: constant-size copies, inlined as vector moves */
      float* dst = bp + q * kc * nr + k * nr;
      const float* src = cp->row + q * nr;
      switch (nr) {
        case 8: memcpy(dst, src, 8 * sizeof(float)); break;
        case 16: memcpy(dst, src, 16 * sizeof(float)); break;
        case 64: memcpy(dst, src, 64 * sizeof(float)); break;
        default: memcpy(dst, src, (size_t)nr * sizeof(float)); break;
      }
    }
    if (q * nr < cols) { /* the ragged last panel, zeros past cols */
      float* dst = bp + q * kc * nr + k * nr;
      const int64_t w = cols - q * nr;
      memcpy(dst, cp->row + q * nr, (size_t)w * sizeof(float));
      memset(dst + w, 0, (size_t)(nr - w) * sizeof(float));
    }
  }
}

/* y[m * ldy] = W[m, :] . x for m in [0, M) (W rows K floats apart): a 1x1 convolution of a one-pixel image (the
 * squeeze-and-excite blocks after a global pool), where the sgemm's 64-column panels would hold one column; four
 * rows at a time, 16-float partial sums */
CPU_KERNELS_CLONES
static void conv_gemv(const float* w, const float* x, int64_t M, int64_t K, float* y, int64_t ldy) {
  int64_t m = 0, k, r;
  for (; m < M; m += 4) {
    const int rows = M - m < 4 ? (int)(M - m) : 4;
    conv_v16 acc[4] = {{0}, {0}, {0}, {0}};
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (k = 0; k + 16 <= K; k += 16) {
      conv_v16 xv;
      memcpy(&xv, x + k, sizeof xv);
      for (r = 0; r < rows; ++r) {
        conv_v16 wv;
        memcpy(&wv, w + (m + r) * K + k, sizeof wv);
        acc[r] += wv * xv;
      }
    }
    for (r = 0; r < rows; ++r) {
      float lanes[16];
      int l;
      memcpy(lanes, &acc[r], sizeof lanes);
      for (l = 0; l < 16; ++l) sum[r] += lanes[l];
      for (int64_t j = k; j < K; ++j) sum[r] += w[(m + r) * K + j] * x[j];
      y[(m + r) * ldy] = sum[r];
    }
  }
}

/* y[(m) * ldy + j] = W[m, :] . cols[j, :] for m in [0, M), j in [0, N) (N <= CONV_FEW_PIXELS; cols: one row of
 * K taps per output pixel): 4 rows x 4 pixels of 16-float partial sums, each weight row read once per 4 pixels */
CPU_KERNELS_CLONES
static void conv_few_pixels(const float* w, const float* cols, int64_t M, int64_t K, int64_t N, float* y, int64_t ldy) {
  int64_t m, j, k;
  for (m = 0; m < M; m += 4) {
    const int rows = M - m < 4 ? (int)(M - m) : 4;
    for (j = 0; j < N; j += 4) {
      const int pix = N - j < 4 ? (int)(N - j) : 4;
      conv_v16 acc[4][4];
      int r, c;
      memset(acc, 0, sizeof acc);
      for (k = 0; k + 16 <= K; k += 16) {
        conv_v16 xv[4];
        for (c = 0; c < 4; ++c) {
          if (c < pix) memcpy(&xv[c], cols + (j + c) * K + k, sizeof xv[c]);
          else memset(&xv[c], 0, sizeof xv[c]);
        }
        for (r = 0; r < rows; ++r) {
          conv_v16 wv;
          memcpy(&wv, w + (m + r) * K + k, sizeof wv);
          acc[r][0] += wv * xv[0];
          acc[r][1] += wv * xv[1];
          acc[r][2] += wv * xv[2];
          acc[r][3] += wv * xv[3];
        }
      }
      for (r = 0; r < rows; ++r) {
        for (c = 0; c < pix; ++c) {
          float lanes[16], sum = 0.0f;
          int l;
          int64_t t;
          memcpy(lanes, &acc[r][c], sizeof lanes);
          for (l = 0; l < 16; ++l) sum += lanes[l];
          for (t = k; t < K; ++t) sum += w[(m + r) * K + t] * cols[(j + c) * K + t];
          y[(m + r) * ldy + j + c] = sum;
        }
      }
    }
  }
}

/* cols[j * K + k] = im2col[k][n0 + j]: the chunk's columns, a pixel's taps contiguous (`row`: n1 - n0 floats) */
static void conv_im2col_transposed(const ConvGeom* g, const float* x, int64_t n0, int64_t n1, float* cols, float* row) {
  int64_t k, j;
  for (k = 0; k < g->K; ++k) {
    conv_im2col_row(g, x, k, n0, n1, row);
    for (j = 0; j < n1 - n0; ++j) cols[j * g->K + k] = row[j];
  }
}

void conv_gemm_chunk(const ConvGeom* g, const float* x, const float* w, const float* bias, const float* z, float* y,
                     int64_t image, int64_t group, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const ConvAct* act,
                     float* work) {
  const int64_t hw = g->OH * g->OW;
  const float* xg = x + (image * g->C + group * g->Cg) * g->H * g->W;
  float* yg = y + (image * g->M + group * g->Mg + m0) * hw;
  SgProblem p;
  memset(&p, 0, sizeof p);
  p.a = w + (group * g->Mg + m0) * g->K;
  p.M = m1 - m0; p.K = g->K; p.lda = g->K; p.alpha = 1.0f;
  p.ldc = hw;
  if (conv_few(g)) { /* a few output pixels: dot products of the weight rows with each pixel's taps */
    float* cols = work;
    conv_im2col_transposed(g, xg, n0, n1, cols, work + conv_round16((size_t)(g->K * g->OH * g->OW)));
    conv_few_pixels(p.a, cols, m1 - m0, g->K, n1 - n0, yg + n0, hw);
  } else if (g->chunk && conv_packs(g)) { /* B: this chunk's im2col, packed as the sgemm reads it */
    ConvPack cp;
    cp.g = g; cp.x = xg; cp.row = work; cp.n0 = n0;
    p.N = n1 - n0; p.c = yg + n0;
    sgemm_columns_packed(&p, 0, n1 - n0, conv_pack_cols, &cp, work + conv_round16((size_t)g->chunk));
  } else if (g->chunk) { /* B: this chunk's columns of im2col */
    float* cols = work;
    conv_im2col(g, xg, n0, n1, cols);
    p.b = cols; p.ldb = n1 - n0; p.N = n1 - n0; p.c = yg + n0;
    sgemm_columns(&p, 0, n1 - n0, work + conv_round16((size_t)(g->K * g->chunk)));
  } else if (hw == 1 && !sgemm_streams(&p)) { /* a 1x1 convolution of one pixel: a matrix-vector product */
    conv_gemv(p.a, xg, m1 - m0, g->K, yg, hw);
  } else { /* a 1x1 stride-1 unpadded convolution: B is X itself */
    p.b = xg; p.ldb = hw; p.N = hw; p.c = yg;
    sgemm_columns(&p, n0, n1, work);
  }
  conv_bias_act(yg + n0, m1 - m0, n1 - n0, hw, bias != NULL ? bias + group * g->Mg + m0 : NULL,
                z != NULL ? z + (yg - y) + n0 : NULL, act);
}
