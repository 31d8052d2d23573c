/* The vector part of the depthwise loop (conv_depthwise.c includes it once per vector width): DW_VT, a vector of
 * DW_VL floats; DW_ROWS x DW_NV of them accumulate (DW_NV x DW_VL = CONV_DW_BLOCK); compiled for DW_TARGET; names
 * suffixed by DW_NAME. */
/* R (1, 2 or DW_ROWS) output rows from `oh` x DW_VL NV (NV <= DW_NV) output columns from v0 (n of them valid) of a
 * depthwise plane: R x NV accumulators of DW_VL floats, independent FMA chains across the taps, each tap one
 * unaligned load from its phase plane (R and NV are constants where this inlines); full blocks go straight to
 * the output rows, a tail through tmp */
static inline __attribute__((always_inline)) void DW_NAME(conv_dw_block)(const ConvGeom* g, const float* pad,
                                                                const int64_t* tap, const float* wm, float* out,
                                                                int64_t oh, int64_t v0, int64_t n, const int R,
                                                                const int NV) {
  const int64_t rs = g->sh * conv_phase_width(g), taps = g->KH * g->KW; /* floats between output rows' inputs */
  const float* base = pad + oh * rs + v0;
  const int split = R * NV <= 4 ? 2 : 1; /* few accumulators: even and odd taps in two sums, twice the FMA chains */
  DW_VT acc[2][DW_ROWS][DW_NV];
  int64_t t;
  int r, v, h;
  for (h = 0; h < 2; ++h) /* element by element: the accumulators stay in registers (no memset of the array) */
    for (r = 0; r < R; ++r)
      for (v = 0; v < NV; ++v) acc[h][r][v] = (DW_VT){0};
  for (t = 0; t < taps; t += split)
#pragma GCC unroll 2
    for (h = 0; h < split; ++h) {
      const float wv = t + h < taps ? wm[t + h] : 0.0f; /* vector * scalar: one broadcast */
      const float* s0 = base + tap[t + h < taps ? t + h : t];
#pragma GCC unroll 4
      for (r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (v = 0; v < NV; ++v) {
          DW_VT x;
          memcpy(&x, s0 + r * rs + DW_VL * v, sizeof x);
          acc[h][r][v] += wv * x;
        }
    }
  if (split == 2)
    for (r = 0; r < R; ++r)
      for (v = 0; v < NV; ++v) acc[0][r][v] += acc[1][r][v];
  for (r = 0; r < R; ++r) {
    float* dst = out + (oh + r) * g->OW + v0;
    /* a full block, or one row's only block whose spare lanes land on the plane's later rows (stored after it) */
    if (n == DW_VL * NV || (g->OW <= CONV_DW_BLOCK && (oh + r) * g->OW + DW_VL * NV <= g->OH * g->OW)) {
      for (v = 0; v < NV; ++v) memcpy(dst + DW_VL * v, &acc[0][r][v], sizeof(DW_VT));
    } else {
      float tmp[CONV_DW_BLOCK];
      for (v = 0; v < NV; ++v) memcpy(tmp + DW_VL * v, &acc[0][r][v], sizeof(DW_VT));
      for (t = 0; t < n; ++t) dst[t] = tmp[t];
    }
  }
}

static inline __attribute__((always_inline)) void DW_NAME(conv_dw_rows)(const ConvGeom* g, const float* pad,
                                                                        const int64_t* tap, const float* wm, float* out,
                                                                        int64_t oh, int64_t v0, int64_t n, const int R) {
  if (n > 3 * DW_VL && DW_NV >= 4) DW_NAME(conv_dw_block)(g, pad, tap, wm, out, oh, v0, n, R, DW_NV >= 4 ? 4 : 1);
  else if (n > 2 * DW_VL && DW_NV >= 3) DW_NAME(conv_dw_block)(g, pad, tap, wm, out, oh, v0, n, R, DW_NV >= 3 ? 3 : 1);
  else if (n > DW_VL) DW_NAME(conv_dw_block)(g, pad, tap, wm, out, oh, v0, n, R, 2);
  else DW_NAME(conv_dw_block)(g, pad, tap, wm, out, oh, v0, n, R, 1);
}

__attribute__((target(DW_TARGET))) static void DW_NAME(conv_depthwise_plane)(const ConvGeom* g, const int64_t* tap, const float* x, const float* w, const float* bias,
                          const float* z, float* y, int64_t image, int64_t m, const ConvAct* act, float* pad) {
  const int64_t c = m / g->Mg; /* the group's one input channel */
  const float* wm = w + m * g->KH * g->KW;
  float* out = y + (image * g->M + m) * g->OH * g->OW;
  int64_t oh, v0;
  conv_dw_pad(g, x + (image * g->C + c) * g->H * g->W, pad);
  for (v0 = 0; v0 < g->OW; v0 += CONV_DW_BLOCK) {
    const int64_t n = g->OW - v0 < CONV_DW_BLOCK ? g->OW - v0 : CONV_DW_BLOCK;
    for (oh = 0; oh + DW_ROWS <= g->OH; oh += DW_ROWS) DW_NAME(conv_dw_rows)(g, pad, tap, wm, out, oh, v0, n, DW_ROWS);
    if (oh + 2 <= g->OH) {
      DW_NAME(conv_dw_rows)(g, pad, tap, wm, out, oh, v0, n, 2);
      oh += 2;
    }
    if (oh < g->OH) DW_NAME(conv_dw_rows)(g, pad, tap, wm, out, oh, v0, n, 1);
  }
  conv_bias_act(out, 1, g->OH * g->OW, 0, bias != NULL ? bias + m : NULL, z != NULL ? z + (out - y) : NULL, act);
}
