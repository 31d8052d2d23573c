/* The recurrence of the RNN / GRU / LSTM C kernel (see rnn.h): one direction of one call, on the calling thread.
 *
 * Workspace blocks (floats, each aligned to SG_ALIGN_FLOATS): xw (rows x G*H: X @ W^T plus the biases, X's row
 * order), hr (batch x G*H: H_{t-1} @ R^T, then the gates in place), h and c (batch x H: the
 * state), rh (batch x H: GRU's r * H_{t-1} without linear_before_reset) and the projection's sgemm packing buffer
 * (none for up to RNN_DOT_ROWS rows of X: those are dot products over W's rows, as the steps are over R's).
 * A step's H_{t-1} @ R^T is rnn_dots(4): R read once per 4 batch rows in its stored layout (no transposed copy). Sigmoid and Tanh are 8-float vector loops over vm_exp8 (vec_math.h);
 * tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|), within a few 1e-7 of tanhf. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h" /* CPU_KERNELS_CLONES */
#include "rnn.h"
#include "sgemm.h"
#include "vec_math.h"

#define RNN_DOT_ROWS 8 /* X rows up to which the projection is dot products over W's rows instead of an sgemm */

static int64_t rnn_up(int64_t n) { return (n + SG_ALIGN_FLOATS - 1) / SG_ALIGN_FLOATS * SG_ALIGN_FLOATS; }


size_t rnn_work_floats(const RnnAttrs* a, const RnnDims* d) {
  int64_t n = rnn_up(d->seq * d->batch * d->gh) + rnn_up(d->batch * d->gh);
  n += 2 * rnn_up(d->batch * d->hidden);
  if (a->kind == RNN_KIND_GRU && !a->lbr) n += rnn_up(d->batch * d->hidden);
  if (d->seq * d->batch > RNN_DOT_ROWS) n += (int64_t)sgemm_thread_floats(d->seq * d->batch, d->input, d->gh, 1);
  return (size_t)n + SG_ALIGN_FLOATS;
}

static inline __attribute__((always_inline)) void rnn_load8(const float* v, int64_t n, vm_v8* out) {
  float t[8] = {0};
  if (n == 8) { /* a constant-size copy: one vector load */
    memcpy(out, v, sizeof *out);
    return;
  }
  memcpy(t, v, (size_t)n * sizeof(float));
  memcpy(out, t, sizeof t);
}

static inline __attribute__((always_inline)) void rnn_store8(float* v, int64_t n, vm_v8 x) {
  float t[8];
  if (n == 8) {
    memcpy(v, &x, sizeof x);
    return;
  }
  memcpy(t, &x, sizeof t);
  memcpy(v, t, (size_t)n * sizeof(float));
}

CPU_KERNELS_CLONES static void rnn_sigmoid(float* v, int64_t n) {
  int64_t i;
  for (i = 0; i < n; i += 8) {
    int64_t m = n - i < 8 ? n - i : 8;
    vm_v8 x;
    rnn_load8(v + i, m, &x);
    rnn_store8(v + i, m, vm_splat8(1.0f) / (vm_splat8(1.0f) + vm_exp8(-x)));
  }
}

CPU_KERNELS_CLONES static void rnn_tanh(float* v, int64_t n) {
  int64_t i;
  for (i = 0; i < n; i += 8) {
    int64_t m = n - i < 8 ? n - i : 8;
    vm_v8 x, ax, e, t;
    vm_i8 neg;
    rnn_load8(v + i, m, &x);
    neg = x < vm_splat8(0.0f);
    ax = (vm_v8)((vm_i8)x & ~(vm_i8)vm_splat8(-0.0f)); /* |x| */
    e = vm_exp8(vm_splat8(-2.0f) * ax);
    t = (vm_splat8(1.0f) - e) / (vm_splat8(1.0f) + e);
    rnn_store8(v + i, m, (vm_v8)(((vm_i8)-t & neg) | ((vm_i8)t & ~neg)));
  }
}

/* v[k] = clip(v[k] + add[k]) (add may be NULL) */
static void rnn_add_clip(float* v, const float* add, int64_t n, const RnnAttrs* a) {
  int64_t k;
  if (add != NULL)
    for (k = 0; k < n; ++k) v[k] += add[k];
  if (a->has_clip)
    for (k = 0; k < n; ++k) v[k] = v[k] < -a->clip ? -a->clip : (v[k] > a->clip ? a->clip : v[k]);
}

/* X rows [t][b] (layout 0) or [b][t] (layout 1): the row of step t, entry b */
static int64_t rnn_xrow(const RnnAttrs* a, const RnnDims* d, int64_t t, int64_t b) {
  return a->layout ? b * d->seq + t : t * d->batch + b;
}

/* Y_h / Y_c / initial_h / initial_c: [dir][b] (layout 0) or [b][dir] (layout 1), rows of H */
static int64_t rnn_srow(const RnnAttrs* a, const RnnDims* d, int64_t dir, int64_t b) {
  return a->layout ? b * d->dirs + dir : dir * d->batch + b;
}

/* Y: [t][dir][b] (layout 0) or [b][t][dir] (layout 1), rows of H */
static int64_t rnn_yrow(const RnnAttrs* a, const RnnDims* d, int64_t t, int64_t dir, int64_t b) {
  return a->layout ? (b * d->seq + t) * d->dirs + dir : (t * d->dirs + dir) * d->batch + b;
}

typedef float rnn_v4 __attribute__((vector_size(16)));

/* lanes of a and b picked by 8 indices (b's lanes from 8): clang and GCC >= 12 spell it shufflevector, older GCC
 * __builtin_shuffle with a mask vector */
#if defined(__clang__) || !defined(__GNUC__) || __GNUC__ >= 12
#define RNN_SHUF(a, b, i0, i1, i2, i3, i4, i5, i6, i7) __builtin_shufflevector(a, b, i0, i1, i2, i3, i4, i5, i6, i7)
#else
#define RNN_SHUF(a, b, i0, i1, i2, i3, i4, i5, i6, i7) __builtin_shuffle(a, b, (vm_i8){i0, i1, i2, i3, i4, i5, i6, i7})
#endif

/* out[j] = the sum of a_j's 8 lanes, j < 4: two rounds of pairwise shuffles and adds, then the halves */
static inline __attribute__((always_inline)) void rnn_hsum4(vm_v8 a0, vm_v8 a1, vm_v8 a2, vm_v8 a3, float* out) {
  vm_v8 u = RNN_SHUF(a0, a1, 0, 8, 2, 10, 4, 12, 6, 14) + RNN_SHUF(a0, a1, 1, 9, 3, 11, 5, 13, 7, 15);
  vm_v8 v = RNN_SHUF(a2, a3, 0, 8, 2, 10, 4, 12, 6, 14) + RNN_SHUF(a2, a3, 1, 9, 3, 11, 5, 13, 7, 15);
  vm_v8 w = RNN_SHUF(u, v, 0, 1, 8, 9, 4, 5, 12, 13) + RNN_SHUF(u, v, 2, 3, 10, 11, 6, 7, 14, 15);
  rnn_v4 lo, hi;
  memcpy(&lo, &w, sizeof lo);
  memcpy(&hi, (const char*)&w + sizeof lo, sizeof hi);
  lo += hi;
  memcpy(out, &lo, sizeof lo);
}

static inline __attribute__((always_inline)) vm_v8 rnn_ld(const float* p) {
  vm_v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* one row of R against one or two state rows, every k (the tail of 4-row blocks) */
static float rnn_dot(const float* x, const float* w, int64_t hs) {
  float acc = 0.0f;
  int64_t k;
  for (k = 0; k < hs; ++k) acc += x[k] * w[k];
  return acc;
}

/* hr[b][n] = s[b] . r[n] for batch rows b in [0, m), m 1 or 2, and R's rows [n0, n1): four rows of R at a time
 * into 4 x m named 8-float accumulators (registers: independent multiply-add chains), the state rows in L1 */
CPU_KERNELS_CLONES static void rnn_dots(const float* s, const float* r, float* hr, int64_t hs, int64_t ld,
                                        int64_t m, int64_t n0, int64_t n1) {
  int64_t n = n0, k, j, full = hs / 8 * 8;
  const float* s1 = s + (m > 1 ? hs : 0);
  for (; n + 4 <= n1; n += 4) {
    const float *w0 = r + n * hs, *w1 = w0 + hs, *w2 = w1 + hs, *w3 = w2 + hs;
    vm_v8 a0 = vm_splat8(0.0f), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    float out[2][4];
    for (k = 0; k < full; k += 8) {
      vm_v8 x = rnn_ld(s + k), y = rnn_ld(s1 + k), v0 = rnn_ld(w0 + k), v1 = rnn_ld(w1 + k);
      vm_v8 v2 = rnn_ld(w2 + k), v3 = rnn_ld(w3 + k);
      a0 += v0 * x; a1 += v1 * x; a2 += v2 * x; a3 += v3 * x;
      if (m > 1) { b0 += v0 * y; b1 += v1 * y; b2 += v2 * y; b3 += v3 * y; }
    }
    rnn_hsum4(a0, a1, a2, a3, out[0]);
    rnn_hsum4(b0, b1, b2, b3, out[1]);
    for (j = 0; j < 4; ++j) {
      const float* w = r + (n + j) * hs + full;
      hr[n + j] = full < hs ? out[0][j] + rnn_dot(s + full, w, hs - full) : out[0][j];
      if (m > 1) hr[ld + n + j] = full < hs ? out[1][j] + rnn_dot(s1 + full, w, hs - full) : out[1][j];
    }
  }
  for (; n < n1; ++n) {
    hr[n] = rnn_dot(s, r + n * hs, hs);
    if (m > 1) hr[ld + n] = rnn_dot(s1, r + n * hs, hs);
  }
}

/* the same for m = 4 state rows (a batch above 2): two rows of R at a time into 2 x 4 accumulators, so R is read once
 * per 4 state rows (at hidden 256 R is 1 MiB a direction: its passes over L2, not the multiply-adds, bound a step) */
CPU_KERNELS_CLONES static void rnn_dots4(const float* s, const float* r, float* hr, int64_t hs, int64_t ld,
                                         int64_t n0, int64_t n1) {
  int64_t n = n0, k, j, b, full = hs / 8 * 8;
  const float *s0 = s, *s1 = s + hs, *s2 = s + 2 * hs, *s3 = s + 3 * hs;
  for (; n + 2 <= n1; n += 2) {
    const float *w0 = r + n * hs, *w1 = w0 + hs;
    vm_v8 a0 = vm_splat8(0.0f), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    float out[2][4];
    for (k = 0; k < full; k += 8) {
      vm_v8 v0 = rnn_ld(w0 + k), v1 = rnn_ld(w1 + k), x0 = rnn_ld(s0 + k), x1 = rnn_ld(s1 + k);
      vm_v8 x2 = rnn_ld(s2 + k), x3 = rnn_ld(s3 + k);
      a0 += v0 * x0; a1 += v0 * x1; a2 += v0 * x2; a3 += v0 * x3;
      b0 += v1 * x0; b1 += v1 * x1; b2 += v1 * x2; b3 += v1 * x3;
    }
    rnn_hsum4(a0, a1, a2, a3, out[0]);
    rnn_hsum4(b0, b1, b2, b3, out[1]);
    for (j = 0; j < 2; ++j)
      for (b = 0; b < 4; ++b)
        hr[b * ld + n + j] = out[j][b] + (full < hs ? rnn_dot(s + b * hs + full, r + (n + j) * hs + full, hs - full) : 0.0f);
  }
  for (; n < n1; ++n)
    for (b = 0; b < 4; ++b) hr[b * ld + n] = rnn_dot(s + b * hs, r + n * hs, hs);
}

/* hr[:, n0:n1] = s @ R[n0:n1]^T for every batch row of s (H floats each): a GEMV over R's rows as stored (R is
 * N x K; sgemm streams only a K x N B, and transposing R on each call costs a step of a short sequence), 4 state
 * rows per pass over R, then the last 1-3 by 2 */
static void rnn_recur(const RnnDims* d, const float* s, const float* r, float* hr, int64_t n0, int64_t n1) {
  int64_t b;
  for (b = 0; b + 4 <= d->batch; b += 4) rnn_dots4(s + b * d->hidden, r, hr + b * d->gh, d->hidden, d->gh, n0, n1);
  for (; b < d->batch; b += 2)
    rnn_dots(s + b * d->hidden, r, hr + b * d->gh, d->hidden, d->gh, d->batch - b < 2 ? d->batch - b : 2, n0, n1);
}

/* xw = X @ W[dir]^T + Wb (+ Rb but for GRU's h gate, which stays apart), every step at once */
static void rnn_project(const RnnAttrs* a, const RnnDims* d, const RnnIo* io, int64_t dir, float* xw, float* pack) {
  int64_t rows = d->seq * d->batch, gh = d->gh, i, j, h = d->hidden;
  const float* wb = io->b ? io->b + dir * 2 * gh : NULL;
  SgProblem p;
  if (d->input == 0) {
    memset(xw, 0, (size_t)(rows * gh) * sizeof(float));
  } else if (rows <= RNN_DOT_ROWS) { /* packing W (a transposed B) would cost more than the product */
    for (i = 0; i < rows; i += 2)
      rnn_dots(io->x + i * d->input, io->w + dir * gh * d->input, xw + i * gh, d->input, gh, rows - i < 2 ? rows - i : 2, 0, gh);
  } else {
    memset(&p, 0, sizeof p);
    p.a = io->x; p.b = io->w + dir * gh * d->input; p.c = xw;
    p.M = rows; p.N = gh; p.K = d->input; p.lda = d->input; p.ldb = d->input; p.ldc = gh;
    p.b_trans = 1; p.alpha = 1.0f;
    sgemm_columns(&p, 0, gh, pack);
  }
  if (wb == NULL) return;
  for (i = 0; i < rows; ++i) {
    float* row = xw + i * gh;
    for (j = 0; j < gh; ++j) row[j] += wb[j];
    for (j = 0; j < (a->kind == RNN_KIND_GRU ? 2 * h : gh); ++j) row[j] += wb[gh + j];
  }
}

/* LSTM gates of one row in place (g: i, o, f, c pre-activations from R, xr: from X), state h and c updated */
static void rnn_lstm_row(const RnnAttrs* a, int64_t hs, float* g, const float* xr, const float* p, float* h, float* c) {
  float *gi = g, *go = g + hs, *gf = g + 2 * hs, *gc = g + 3 * hs;
  int64_t k;
  for (k = 0; k < 4 * hs; ++k) g[k] += xr[k];
  if (p != NULL)
    for (k = 0; k < hs; ++k) {
      gi[k] += p[k] * c[k];
      gf[k] += p[2 * hs + k] * c[k];
    }
  rnn_add_clip(gi, NULL, hs, a);
  rnn_sigmoid(gi, hs);
  if (a->input_forget) {
    for (k = 0; k < hs; ++k) gf[k] = 1.0f - gi[k];
  } else {
    rnn_add_clip(gf, NULL, hs, a);
    rnn_sigmoid(gf, hs);
  }
  rnn_add_clip(gc, NULL, hs, a);
  rnn_tanh(gc, hs);
  for (k = 0; k < hs; ++k) c[k] = gf[k] * c[k] + gi[k] * gc[k];
  if (p != NULL)
    for (k = 0; k < hs; ++k) go[k] += p[hs + k] * c[k];
  rnn_add_clip(go, NULL, hs, a);
  rnn_sigmoid(go, hs);
  memcpy(gc, c, (size_t)hs * sizeof(float));
  rnn_tanh(gc, hs);
  for (k = 0; k < hs; ++k) h[k] = go[k] * gc[k];
}

/* GRU z and r of one row in place (g[0:2H] += xr, clip, Sigmoid) */
static void rnn_gru_zr(const RnnAttrs* a, int64_t hs, float* g, const float* xr) {
  rnn_add_clip(g, xr, 2 * hs, a);
  rnn_sigmoid(g, 2 * hs);
}

/* GRU's new state of one row from z (g[0:H]) and the h gate's pre-activation in g[2H:3H] */
static void rnn_gru_state(const RnnAttrs* a, int64_t hs, float* g, float* h) {
  float *z = g, *hh = g + 2 * hs;
  int64_t k;
  rnn_add_clip(hh, NULL, hs, a);
  rnn_tanh(hh, hs);
  for (k = 0; k < hs; ++k) h[k] = (1.0f - z[k]) * hh[k] + z[k] * h[k];
}

static int rnn_active(const RnnIo* io, int64_t t, int64_t b) { return io->lens == NULL || t < (int64_t)io->lens[b]; }

/* one step t: hr from the state, then each active row's gates and state; Y's rows (zeros where inactive) */
static void rnn_step(const RnnAttrs* a, const RnnDims* d, const RnnIo* io, int64_t dir, int64_t t, float** blk) {
  float *xw = blk[0], *hr = blk[2], *h = blk[3], *c = blk[4], *rh = blk[5];
  int64_t hs = d->hidden, gh = d->gh, b, k;
  const float* r = io->r + dir * gh * hs;
  const float* rb_h = io->b ? io->b + dir * 2 * gh + gh + 2 * hs : NULL; /* GRU: Rb of the h gate */
  const float* p = io->p ? io->p + dir * 3 * hs : NULL;
  int gru_split = a->kind == RNN_KIND_GRU && !a->lbr;
  rnn_recur(d, h, r, hr, 0, gru_split ? 2 * hs : gh);
  if (gru_split) { /* z, r first; then (r * h) @ Rh^T */
    for (b = 0; b < d->batch; ++b) {
      float* g = hr + b * gh;
      rnn_gru_zr(a, hs, g, xw + rnn_xrow(a, d, t, b) * gh);
      for (k = 0; k < hs; ++k) rh[b * hs + k] = g[hs + k] * h[b * hs + k];
    }
    rnn_recur(d, rh, r, hr, 2 * hs, gh);
  }
  for (b = 0; b < d->batch; ++b) {
    float *g = hr + b * gh, *hb = h + b * hs, *cb = c + b * hs;
    const float* xr = xw + rnn_xrow(a, d, t, b) * gh;
    if (rnn_active(io, t, b)) {
      if (a->kind == RNN_KIND_LSTM) {
        rnn_lstm_row(a, hs, g, xr, p, hb, cb);
      } else if (a->kind == RNN_KIND_RNN) {
        rnn_add_clip(g, xr, hs, a);
        rnn_tanh(g, hs);
        memcpy(hb, g, (size_t)hs * sizeof(float));
      } else {
        float* hh = g + 2 * hs;
        if (!gru_split) rnn_gru_zr(a, hs, g, xr);
        for (k = 0; k < hs; ++k) {
          float rec = hh[k] + (rb_h ? rb_h[k] : 0.0f);
          hh[k] = xr[2 * hs + k] + (gru_split ? rec : g[hs + k] * rec);
        }
        rnn_gru_state(a, hs, g, hb);
      }
    }
    if (io->y != NULL) {
      float* yr = io->y + rnn_yrow(a, d, t, dir, b) * hs;
      if (rnn_active(io, t, b)) memcpy(yr, hb, (size_t)hs * sizeof(float));
      else memset(yr, 0, (size_t)hs * sizeof(float));
    }
  }
}

void rnn_direction(const RnnAttrs* a, const RnnDims* d, const RnnIo* io, int64_t dir, float* work) {
  int64_t hs = d->hidden, gh = d->gh, b, k;
  int reverse = a->direction == RNN_REVERSE || dir == 1;
  float* blk[7];
  float* at = (float*)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  blk[0] = at; at += rnn_up(d->seq * d->batch * gh);
  blk[1] = NULL;
  blk[2] = at; at += rnn_up(d->batch * gh);
  blk[3] = at; at += rnn_up(d->batch * hs);
  blk[4] = at; at += rnn_up(d->batch * hs);
  blk[5] = at; at += a->kind == RNN_KIND_GRU && !a->lbr ? rnn_up(d->batch * hs) : 0;
  blk[6] = at;
  if (d->seq * d->batch > 0) rnn_project(a, d, io, dir, blk[0], blk[6]);
  for (b = 0; b < d->batch; ++b) {
    int64_t s = rnn_srow(a, d, dir, b) * hs;
    if (io->h0) memcpy(blk[3] + b * hs, io->h0 + s, (size_t)hs * sizeof(float));
    else memset(blk[3] + b * hs, 0, (size_t)hs * sizeof(float));
    if (io->c0) memcpy(blk[4] + b * hs, io->c0 + s, (size_t)hs * sizeof(float));
    else memset(blk[4] + b * hs, 0, (size_t)hs * sizeof(float));
  }
  for (k = 0; k < d->seq; ++k) rnn_step(a, d, io, dir, reverse ? d->seq - 1 - k : k, blk);
  for (b = 0; b < d->batch; ++b) { /* an entry of sequence length 0 ends in zeros, as onnxruntime's */
    int64_t s = rnn_srow(a, d, dir, b) * hs;
    int empty = io->lens != NULL && io->lens[b] == 0;
    if (empty) memset(blk[3] + b * hs, 0, (size_t)hs * sizeof(float));
    if (empty) memset(blk[4] + b * hs, 0, (size_t)hs * sizeof(float));
    if (io->yh) memcpy(io->yh + s, blk[3] + b * hs, (size_t)hs * sizeof(float));
    if (io->yc) memcpy(io->yc + s, blk[4] + b * hs, (size_t)hs * sizeof(float));
  }
}
