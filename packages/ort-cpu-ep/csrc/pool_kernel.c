/* ONNX MaxPool (output Y only), AveragePool (2-D: X of rank 4, NCHW), GlobalAveragePool and GlobalMaxPool (X of
 * rank >= 3) as ort-abi kernels, float32, the numpy kernels' geometry (ops/ops_pool.py): kernel_shape, strides,
 * dilations, pads, auto_pad (SAME_*: ceil(in / stride) outputs, the begin pad from the total), ceil_mode (the last
 * window starts inside the input or its begin pad), count_include_pad (explicit pads count, cells past the padded
 * extent do not). MaxPool: the largest real cell (-inf where a window holds none), NaN propagates; AveragePool:
 * the float32 sum of the window's cells row by row over the count; GlobalAveragePool: each plane summed in double
 * (16 partial sums: vectorized), divided, rounded once; GlobalMaxPool: 16 vector lanes of maxima, NaN propagating. One
 * (image, channel) plane per work item across the threads. No workspace. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "vec_math.h"

#define POOL_MIN_PER_THREAD (1 << 15) /* input elements below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

enum { POOL_MAX = 0, POOL_AVG, POOL_GLOBAL_AVG, POOL_GLOBAL_MAX };

typedef struct PoolKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int kind, same, same_lower, ceil_mode, count_pad;
  int64_t k[2], s[2], d[2], pads[4];
  const char* op;
} PoolKernel;

typedef struct PoolAxis {
  int64_t size, k, s, d, pb, pe, out;
} PoolAxis;

#define POOL_FLAT_MAX_W 1024 /* the widest / tallest output PoolGeom describes: its counts are on the stack */
#define POOL_FLAT_TAPS 64    /* the most taps of a window (pool_plane_flat) or of its width (the rest) */

/* what every plane of a Compute shares, made once (pool_geometry): which columns each tap reaches, an average's
 * divisors, and pool_plane_flat's passes */
typedef struct PoolGeom {
  int flat;                                          /* the planes take pool_plane_flat */
  int64_t taps;                                      /* pool_plane_flat's passes: */
  int64_t lo[POOL_FLAT_TAPS], hi[POOL_FLAT_TAPS];     /*   the output rows the tap reaches */
  int64_t shift[POOL_FLAT_TAPS];                      /*   input index - output index in the flattened planes */
  int64_t c0[POOL_FLAT_TAPS], c1[POOL_FLAT_TAPS];     /*   the columns [c0, c1) it reaches on its own row */
  int64_t wlo[POOL_FLAT_TAPS], whi[POOL_FLAT_TAPS];   /* the output columns [wlo, whi) column tap kw reaches */
  float rows[POOL_FLAT_MAX_W], cols[POOL_FLAT_MAX_W]; /* an average's divisor: rows[oh] * cols[ow] */
} PoolGeom;

typedef struct PoolJob {
  const PoolKernel* pk;
  const PoolGeom* geom; /* NULL: a plane too large for it (pool_row computes the same on the fly) */
  int small;            /* planes pooled 8 at a time, interleaved (pool_planes8) */
  const float* x;
  float* y;
  PoolAxis h, w;
  int64_t planes, plane; /* plane: input elements of one (image, channel) */
  int64_t next;          /* the first plane no thread has taken (atomic) */
} PoolJob;

static OrtStatus* pool_fail(const char* op, const char* what) {
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s", op, what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static int64_t pool_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* one axis as the numpy kernel's _geometry resolves it */
static void pool_axis(const PoolKernel* pk, int i, int64_t size, PoolAxis* a) {
  int64_t dk;
  a->size = size; a->k = pk->k[i]; a->s = pk->s[i]; a->d = pk->d[i];
  dk = (a->k - 1) * a->d + 1;
  if (pk->same) {
    int64_t total;
    a->out = pool_ceil_div(size, a->s);
    total = (a->out - 1) * a->s + dk - size;
    if (total < 0) total = 0;
    a->pb = pk->same_lower ? total - total / 2 : total / 2;
    a->pe = total - a->pb;
    return;
  }
  a->pb = pk->pads[i]; a->pe = pk->pads[2 + i];
  {
    int64_t span = size + a->pb + a->pe - dk;
    if (pk->ceil_mode) {
      a->out = pool_ceil_div(span, a->s) + 1;
      if ((a->out - 1) * a->s >= size + a->pb) a->out -= 1;
    } else {
      a->out = span / a->s + 1; /* C division truncates toward zero, as onnxruntime's and onnx's shape rule */
    }
  }
}

/* v where v > m or v is NaN, else m, without a branch (random data mispredicts one on every other cell) */
static inline __attribute__((always_inline)) float pool_take(float v, float m) {
  uint32_t vb, mb, r;
  const uint32_t t = (uint32_t)0 - (uint32_t)((v > m) | (v != v));
  memcpy(&vb, &v, sizeof vb);
  memcpy(&mb, &m, sizeof mb);
  r = (vb & t) | (mb & ~t);
  memcpy(&v, &r, sizeof v);
  return v;
}

/* the larger of m and v, a NaN sticking once met */
static inline float pool_max_nan(float m, float v) { return (v > m || v != v) && m == m ? v : m; }

/* whether every window of the axis lies inside the input (no pads reached): the taps need no clipping */
static int pool_inside(const PoolAxis* a) { return a->pb == 0 && (a->out - 1) * a->s + (a->k - 1) * a->d < a->size; }

/* the outputs [lo, hi) of an axis whose windows lie inside the input: no tap clipped, no pad reached */
static void pool_interior(const PoolAxis* a, int64_t* lo, int64_t* hi) {
  const int64_t last = a->size - 1 + a->pb - (a->k - 1) * a->d; /* the last window start (padded coordinates) */
  int64_t l = (a->pb + a->s - 1) / a->s, h = last < 0 ? 0 : last / a->s + 1;
  if (h > a->out) h = a->out;
  if (l > h) l = h;
  *lo = l; *hi = h;
}

/* the outputs [lo, hi) of an axis whose tap t falls on a real cell: 0 <= o * s - pb + t * d < size */
static void pool_tap_outputs(const PoolAxis* a, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t off = t * a->d - a->pb; /* the cell tap t of output 0 reads */
  int64_t l = off >= 0 ? 0 : (-off + a->s - 1) / a->s, h = a->size - off <= 0 ? 0 : (a->size - off - 1) / a->s + 1;
  if (h > a->out) h = a->out;
  if (l > h) l = h;
  *lo = l; *hi = h;
}

/* how many taps t of output o fall in [from, to): from <= o * s - pb + t * d < to */
static int64_t pool_taps_in(const PoolAxis* a, int64_t o, int64_t from, int64_t to) {
  const int64_t start = o * a->s - a->pb;
  int64_t t0 = start >= from ? 0 : (from - start + a->d - 1) / a->d, t1;
  if (to - 1 - start < 0) return 0;
  t1 = (to - 1 - start) / a->d;
  if (t1 > a->k - 1) t1 = a->k - 1;
  return t1 >= t0 ? t1 - t0 + 1 : 0;
}

/* one output row: each tap that falls on a real row is one pass over the outputs it reaches (contiguous loads at
 * stride 1, so the loop vectorizes), clipped at the input's edges instead of testing every cell. A NaN sticks (the
 * select keeps it); an average adds the same cells in the same (row-major tap) order as a loop per output and
 * divides by the taps counted (inside the padded extent with count_include_pad, else on real cells) */
CPU_KERNELS_CLONES
static void pool_row(const PoolJob* job, const float* x, int64_t oh, float* yrow) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const PoolGeom* g = job->geom;
  const int is_max = job->pk->kind == POOL_MAX;
  const int64_t sw = w->s;
  int64_t ow, kh, kw, lo, hi, rows_real = 0, rows_padded = 0;
  for (ow = 0; ow < w->out; ++ow) yrow[ow] = is_max ? -INFINITY : 0.0f;
  for (kh = 0; kh < h->k; ++kh) {
    const int64_t ih = oh * h->s - h->pb + kh * h->d;
    const float* row = x + ih * w->size;
    rows_padded += ih >= -h->pb && ih < h->size + h->pe;
    if (ih < 0 || ih >= h->size) continue;
    ++rows_real;
    for (kw = 0; kw < w->k; ++kw) {
      const int64_t at = kw * w->d - w->pb; /* + ow * sw >= 0 for ow >= lo */
      if (g != NULL) {
        lo = g->wlo[kw]; hi = g->whi[kw];
      } else {
        pool_tap_outputs(w, kw, &lo, &hi);
      }
      if (is_max && sw == 1) {
        for (ow = lo; ow < hi; ++ow) { yrow[ow] = pool_take(row[at + ow], yrow[ow]); }
      } else if (is_max && sw == 2) { /* 16 contiguous cells, their even lanes: no per-cell gather */
        for (ow = lo; ow + 8 <= hi && at + 2 * ow + 16 <= w->size; ow += 8) {
          vm_v8 a, b, v, m;
          memcpy(&a, row + at + 2 * ow, sizeof a);
          memcpy(&b, row + at + 2 * ow + 8, sizeof b);
          v = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
          memcpy(&m, yrow + ow, sizeof m);
          {
            const vm_i8 take = (v > m) | (v != v); /* the larger, or a NaN met */
            m = (vm_v8)(((vm_i8)v & take) | ((vm_i8)m & ~take));
          }
          memcpy(yrow + ow, &m, sizeof m);
        }
        for (; ow < hi; ++ow) { yrow[ow] = pool_take(row[at + 2 * ow], yrow[ow]); }
      } else if (is_max) {
        for (ow = lo; ow < hi; ++ow) { yrow[ow] = pool_take(row[at + ow * sw], yrow[ow]); }
      } else if (sw == 2) {
        for (ow = lo; ow + 8 <= hi && at + 2 * ow + 16 <= w->size; ow += 8) {
          vm_v8 a, b, m;
          memcpy(&a, row + at + 2 * ow, sizeof a);
          memcpy(&b, row + at + 2 * ow + 8, sizeof b);
          memcpy(&m, yrow + ow, sizeof m);
          m += __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
          memcpy(yrow + ow, &m, sizeof m);
        }
        for (; ow < hi; ++ow) yrow[ow] += row[at + 2 * ow];
      } else if (sw == 1) {
        for (ow = lo; ow < hi; ++ow) yrow[ow] += row[at + ow];
      } else {
        for (ow = lo; ow < hi; ++ow) yrow[ow] += row[at + ow * sw];
      }
    }
  }
  if (!is_max && g != NULL) {
    const float rows = g->rows[oh];
    for (ow = 0; ow < w->out; ++ow) yrow[ow] = yrow[ow] / (rows * g->cols[ow]); /* small whole numbers: exact */
  } else if (!is_max) {
    const int count_pad = job->pk->count_pad;
    const int64_t rows = count_pad ? rows_padded : rows_real;
    const float inner = (float)(rows * w->k); /* the outputs whose windows no edge clips along W */
    pool_interior(w, &lo, &hi);
    for (ow = 0; ow < w->out; ++ow) {
      if (ow >= lo && ow < hi) {
        yrow[ow] = yrow[ow] / inner;
      } else {
        const int64_t cols = count_pad ? pool_taps_in(w, ow, -w->pb, w->size + w->pe) : pool_taps_in(w, ow, 0, w->size);
        yrow[ow] = yrow[ow] / (float)(rows * cols);
      }
    }
  }
}

/* stride 1 with as many output columns as input columns (the usual 3 x 3 window, pads 1): an output and the cell
 * a tap reads are a fixed distance apart in the flattened planes, so each tap is one vector pass over all the
 * output rows it reaches (a 14 x 14 plane one loop, not 14 short ones). Where the tap wraps into the next or the
 * previous row (the columns it does not reach on its own row), the outputs are saved before the pass and put back
 * after it, a few rows at a time: every output gets the same cells in the same order as pool_row adds them. */
static int pool_geometry(const PoolKernel* pk, const PoolAxis* h, const PoolAxis* w, PoolGeom* g) {
  int64_t kh, kw, o;
  if (w->k > POOL_FLAT_TAPS || w->out > POOL_FLAT_MAX_W || h->out > POOL_FLAT_MAX_W) return 0;
  for (kw = 0; kw < w->k; ++kw) pool_tap_outputs(w, kw, &g->wlo[kw], &g->whi[kw]);
  for (o = 0; o < w->out; ++o)
    g->cols[o] = (float)(pk->count_pad ? pool_taps_in(w, o, -w->pb, w->size + w->pe) : pool_taps_in(w, o, 0, w->size));
  for (o = 0; o < h->out; ++o)
    g->rows[o] = (float)(pk->count_pad ? pool_taps_in(h, o, -h->pb, h->size + h->pe) : pool_taps_in(h, o, 0, h->size));
  g->flat = h->s == 1 && w->s == 1 && w->out == w->size && h->k * w->k <= POOL_FLAT_TAPS;
  g->taps = 0;
  for (kh = 0; kh < h->k && g->flat; ++kh) {
    int64_t lo, hi;
    pool_tap_outputs(h, kh, &lo, &hi);
    for (kw = 0; kw < w->k && lo < hi; ++kw) {
      const int64_t off = kw * w->d - w->pb, width = w->size;
      const int64_t c0 = off < 0 ? (-off < width ? -off : width) : 0, c1 = off > 0 ? (off < width ? width - off : 0) : width;
      if (c1 <= c0) continue; /* the tap reaches no column of its row */
      g->lo[g->taps] = lo; g->hi[g->taps] = hi; g->c0[g->taps] = c0; g->c1[g->taps] = c1;
      g->shift[g->taps++] = (kh * h->d - h->pb) * width + off;
    }
  }
  return 1;
}

CPU_KERNELS_CLONES
static void pool_plane_flat(const PoolJob* job, const float* x, float* y) {
  const PoolGeom* f = job->geom;
  const int is_max = job->pk->kind == POOL_MAX;
  const int64_t width = job->w.size, n_out = job->h.out * width, n_in = job->h.size * width;
  float saved[POOL_FLAT_MAX_W];
  int64_t i, t, oh, ow;
  for (i = 0; i < n_out; ++i) y[i] = is_max ? -INFINITY : 0.0f;
  for (t = 0; t < f->taps; ++t) {
    const int64_t lo = f->lo[t], hi = f->hi[t], shift = f->shift[t], c0 = f->c0[t], c1 = f->c1[t];
    const int64_t bad = c0 + width - c1, chunk = bad ? POOL_FLAT_MAX_W / bad : hi - lo;
    int64_t r0, r, c, j;
    for (r0 = lo; r0 < hi; r0 += chunk) {
      const int64_t r1 = r0 + chunk < hi ? r0 + chunk : hi;
      int64_t a = r0 * width, b = r1 * width;
      for (j = 0, r = r0; r < r1 && bad; ++r) {
        for (c = 0; c < c0; ++c) saved[j++] = y[r * width + c];
        for (c = c1; c < width; ++c) saved[j++] = y[r * width + c];
      }
      if (a + shift < 0) a = -shift;
      if (b + shift > n_in) b = n_in - shift;
      if (is_max) {
        for (i = a; i < b; ++i) { y[i] = pool_take(x[i + shift], y[i]); }
      } else {
        for (i = a; i < b; ++i) y[i] += x[i + shift];
      }
      for (j = 0, r = r0; r < r1 && bad; ++r) {
        for (c = 0; c < c0; ++c) y[r * width + c] = saved[j++];
        for (c = c1; c < width; ++c) y[r * width + c] = saved[j++];
      }
    }
  }
  if (is_max) return;
  for (oh = 0; oh < job->h.out; ++oh) {
    const float rows = f->rows[oh];
    float* yrow = y + oh * width;
    for (ow = 0; ow < width; ++ow) yrow[ow] = yrow[ow] / (rows * f->cols[ow]); /* small whole numbers: exact */
  }
}

/* a MaxPool of column stride 2 (no dilation; resnet's and squeezenet's 3 x 3 / 2): per output row the largest
 * of each column's window rows first (contiguous vector passes over the real rows), into a row padded with -inf
 * (the pads and past the input: cells a window may hold that are not real), then the largest of each window's
 * columns (the even lanes of 16 cells). The same largest value as pool_row, a NaN sticking; -inf where a window
 * holds no real cell */
#define POOL_S2_SPAN (POOL_FLAT_MAX_W + 2 * POOL_FLAT_TAPS) /* padded columns the windows span at most */

static int pool_max_s2_applies(const PoolJob* job) {
  const PoolAxis *h = &job->h, *w = &job->w;
  return job->pk->kind == POOL_MAX && h->d == 1 && w->d == 1 && w->s == 2 && w->k <= POOL_FLAT_TAPS &&
         w->out <= POOL_FLAT_MAX_W && (w->out - 1) * 2 + w->k <= POOL_S2_SPAN && w->pb + w->size <= POOL_S2_SPAN;
}

CPU_KERNELS_CLONES
static void pool_plane_max_s2(const PoolJob* job, const float* x, float* y) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const int64_t span = (w->out - 1) * 2 + w->k; /* padded columns [0, span) the windows read */
  float t[POOL_S2_SPAN + 16];
  int64_t oh, ow, j, kh, kw;
  for (oh = 0; oh < h->out; ++oh) {
    float* out = y + oh * w->out;
    float* c = t + w->pb; /* c[iw]: real column iw */
    int first = 1;
    for (j = 0; j < span + 16; ++j) t[j] = -INFINITY;
    for (kh = 0; kh < h->k; ++kh) {
      const int64_t ih = oh * h->s - h->pb + kh;
      const float* r = x + ih * w->size;
      const int64_t n = w->size < span - w->pb ? w->size : span - w->pb; /* the real columns a window reads */
      if (ih < 0 || ih >= h->size || n <= 0) continue;
      if (first) memcpy(c, r, (size_t)n * sizeof(float));
      else
        for (j = 0; j < n; ++j) c[j] = pool_take(r[j], c[j]);
      first = 0;
    }
    for (ow = 0; ow < w->out; ++ow) out[ow] = t[2 * ow];
    for (kw = 1; kw < w->k; ++kw) {
      for (ow = 0; ow + 8 <= w->out; ow += 8) { /* even lanes of 16 cells (t has 16 spare at its end) */
        vm_v8 a, b, v, m;
        memcpy(&a, t + 2 * ow + kw, sizeof a);
        memcpy(&b, t + 2 * ow + kw + 8, sizeof b);
        v = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
        memcpy(&m, out + ow, sizeof m);
        {
          const vm_i8 take = (v > m) | (v != v); /* the larger, or a NaN met */
          m = (vm_v8)(((vm_i8)v & take) | ((vm_i8)m & ~take));
        }
        memcpy(out + ow, &m, sizeof m);
      }
      for (; ow < w->out; ++ow) out[ow] = pool_take(t[2 * ow + kw], out[ow]);
    }
  }
}

/* a plane whose windows all lie inside the input: 2 x 2 windows as four loads, a MaxPool of column stride 2 by
 * pool_plane_max_s2, the rest row by row */
CPU_KERNELS_CLONES
static void pool_plane_inside(const PoolJob* job, const float* x, float* y) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const int is_max = job->pk->kind == POOL_MAX;
  const float count = (float)(h->k * w->k);
  int64_t oh, ow;
  if (h->k == 2 && w->k == 2 && h->d == 1 && w->d == 1) { /* 2 x 2 windows: four cells, the loop vectorizes */
    for (oh = 0; oh < h->out; ++oh) {
      const float *r0 = x + oh * h->s * w->size, *r1 = r0 + w->size;
      float* out = y + oh * w->out;
      const int64_t sw = w->s;
      for (ow = 0; ow < w->out; ++ow) {
        const float a = r0[ow * sw], b = r0[ow * sw + 1], c = r1[ow * sw], d = r1[ow * sw + 1];
        if (is_max) {
          const float m0 = b > a ? b : a, m1 = d > c ? d : c, m = m1 > m0 ? m1 : m0;
          out[ow] = (a != a) | (b != b) | (c != c) | (d != d) ? NAN : m;
        } else {
          out[ow] = (((a + b) + c) + d) / count; /* the general loop's order: row by row */
        }
      }
    }
    return;
  }
  if (pool_max_s2_applies(job)) {
    pool_plane_max_s2(job, x, y);
    return;
  }
  for (oh = 0; oh < h->out; ++oh) pool_row(job, x, oh, y + oh * w->out);
}

#define POOL_SMALL_CELLS 256 /* planes of at most this many cells (and outputs) pool 8 at a time (pool_planes8) */

/* the taps [t0, t1) of output o that fall on real cells (a contiguous range: the cell grows with the tap) */
static void pool_out_taps(const PoolAxis* a, int64_t o, int64_t* t0, int64_t* t1) {
  const int64_t start = o * a->s - a->pb, last = a->size - 1 - start;
  int64_t lo = start >= 0 ? 0 : (-start + a->d - 1) / a->d, hi = last < 0 ? 0 : last / a->d + 1;
  if (hi > a->k) hi = a->k;
  if (hi < lo) hi = lo;
  *t0 = lo; *t1 = hi;
}

/* planes [p, p + n), n <= 8, of at most POOL_SMALL_CELLS cells: interleaved on the stack (cell-major, 8 planes
 * per cell, as onnxruntime's NCHWc blocks them), each output then one 8-lane vector over its window's cells in
 * row-major tap order, and spread back. The small planes of a CNN's late layers (7 x 7, 14 x 14) cost per-plane
 * overhead otherwise; the same cells in the same order as pool_row (a NaN sticks, averages divide by the same
 * counts) */
CPU_KERNELS_CLONES
static void pool_planes8(const PoolJob* job, int64_t p, int64_t n) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const PoolGeom* g = job->geom;
  const int is_max = job->pk->kind == POOL_MAX;
  const int64_t cells = h->size * w->size, outs = h->out * w->out;
  float xb[POOL_SMALL_CELLS * 8], yb[POOL_SMALL_CELLS * 8];
  int64_t i, c, oh, ow, kh, kw;
  for (c = 0; c < 8; ++c) { /* lanes past n repeat plane p: computed, never written back */
    const float* src = job->x + (p + (c < n ? c : 0)) * job->plane;
    for (i = 0; i < cells; ++i) xb[i * 8 + c] = src[i];
  }
  for (oh = 0; oh < h->out; ++oh) {
    int64_t h0, h1;
    pool_out_taps(h, oh, &h0, &h1);
    for (ow = 0; ow < w->out; ++ow) {
      int64_t w0, w1;
      vm_v8 acc = vm_splat8(is_max ? -INFINITY : 0.0f);
      pool_out_taps(w, ow, &w0, &w1);
      for (kh = h0; kh < h1; ++kh) {
        const float* row = xb + (oh * h->s - h->pb + kh * h->d) * w->size * 8;
        for (kw = w0; kw < w1; ++kw) {
          vm_v8 v;
          memcpy(&v, row + (ow * w->s - w->pb + kw * w->d) * 8, sizeof v);
          if (is_max) {
            const vm_i8 take = (v > acc) | (v != v); /* the larger, or a NaN met */
            acc = (vm_v8)(((vm_i8)v & take) | ((vm_i8)acc & ~take));
          } else {
            acc += v;
          }
        }
      }
      if (!is_max) acc = acc / vm_splat8(g->rows[oh] * g->cols[ow]);
      memcpy(yb + (oh * w->out + ow) * 8, &acc, sizeof acc);
    }
  }
  for (c = 0; c < n; ++c) {
    float* dst = job->y + (p + c) * outs;
    for (i = 0; i < outs; ++i) dst[i] = yb[i * 8 + c];
  }
}

/* a plane, row by row */
static void pool_plane(const PoolJob* job, const float* x, float* y) {
  const PoolAxis *h = &job->h, *w = &job->w;
  int64_t oh;
  if (pool_inside(h) && pool_inside(w)) {
    pool_plane_inside(job, x, y);
    return;
  }
  if (job->geom != NULL && job->geom->flat) {
    pool_plane_flat(job, x, y);
    return;
  }
  if (pool_max_s2_applies(job)) {
    pool_plane_max_s2(job, x, y);
    return;
  }
  for (oh = 0; oh < h->out; ++oh) pool_row(job, x, oh, y + oh * w->out);
}

#define POOL_LANES 16 /* independent accumulators: the reductions vectorize (two 512-bit registers of floats) */


/* the largest of x[0, n), NaN when any is: 16 lanes of vector max (the larger or the first operand), the NaNs
 * noted in a mask beside them */
CPU_KERNELS_CLONES
static float pool_plane_max(const float* x, int64_t n) {
  vm_v8 a = vm_splat8(-INFINITY), b = a, v, w;
  vm_i8 nan = {0, 0, 0, 0, 0, 0, 0, 0};
  float lanes[8], m = -INFINITY;
  int64_t i = 0, j;
  for (; i + 16 <= n; i += 16) {
    memcpy(&v, x + i, sizeof v);
    memcpy(&w, x + i + 8, sizeof w);
    a = vm_max8(a, v);
    b = vm_max8(b, w);
    nan |= (v != v) | (w != w);
  }
  a = vm_max8(a, b);
  memcpy(lanes, &a, sizeof lanes);
  for (j = 0; j < 8; ++j) m = pool_max_nan(m, nan[j] ? NAN : lanes[j]);
  for (; i < n; ++i) m = pool_max_nan(m, x[i]);
  return m;
}

/* the sum of x[0, n) in double, POOL_LANES partial sums */
CPU_KERNELS_CLONES
static double pool_plane_sum(const float* x, int64_t n) {
  double acc[POOL_LANES], sum = 0.0;
  int64_t i = 0, j;
  for (j = 0; j < POOL_LANES; ++j) acc[j] = 0.0;
  for (; i + POOL_LANES <= n; i += POOL_LANES)
    for (j = 0; j < POOL_LANES; ++j) acc[j] += (double)x[i + j];
  for (; i < n; ++i) acc[i % POOL_LANES] += (double)x[i];
  for (j = 0; j < POOL_LANES; ++j) sum += acc[j];
  return sum;
}

static void pool_global(const PoolJob* job, const float* x, float* y) {
  if (job->pk->kind == POOL_GLOBAL_MAX) *y = pool_plane_max(x, job->plane);
  else *y = (float)(pool_plane_sum(x, job->plane) / (double)job->plane);
}

static void pool_job(void* arg, int index, int count) {
  PoolJob* job = (PoolJob*)arg;
  const int64_t out_plane = job->pk->kind >= POOL_GLOBAL_AVG ? 1 : job->h.out * job->w.out;
  (void)index; (void)count;
  for (;;) {
    int64_t p = __atomic_fetch_add(&job->next, job->small ? 8 : 1, __ATOMIC_RELAXED);
    if (p >= job->planes) break;
    if (job->small) {
      pool_planes8(job, p, job->planes - p < 8 ? job->planes - p : 8);
      continue;
    }
    if (job->pk->kind >= POOL_GLOBAL_AVG) pool_global(job, job->x + p * job->plane, job->y + p);
    else pool_plane(job, job->x + p * job->plane, job->y + p * out_plane);
  }
}

static OrtStatus* pool_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  PoolKernel* k = (PoolKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  int64_t ydims[16];
  const void* x = NULL;
  void* y = NULL;
  PoolJob job;
  PoolGeom geom;
  int threads;
  char msg[200];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return pool_fail(k->op, "input X is missing");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (k->kind >= POOL_GLOBAL_AVG ? (rank < 3 || rank > 16) : rank != 4) {
    snprintf(msg, sizeof msg, "X has rank %zu; this C kernel takes %s", rank,
             k->kind >= POOL_GLOBAL_AVG ? "rank 3..16 (N, C, spatial...)" : "rank 4 (N, C, H, W)");
    return pool_fail(k->op, msg);
  }
  memset(&job, 0, sizeof job);
  job.pk = k;
  job.planes = dims[0] * dims[1];
  ydims[0] = dims[0]; ydims[1] = dims[1];
  if (k->kind >= POOL_GLOBAL_AVG) {
    for (job.plane = 1, i = 2; i < rank; ++i) {
      job.plane *= dims[i];
      ydims[i] = 1;
    }
    if (job.plane == 0 && job.planes > 0) return pool_fail(k->op, "X has an empty spatial extent: no value to pool");
  } else {
    pool_axis(k, 0, dims[2], &job.h);
    pool_axis(k, 1, dims[3], &job.w);
    /* a negative output extent: onnxruntime refuses it ("Calculated output dimension is negative"). A window
       that overhangs the input by less than a stride still has one output position, pooled over the cells it
       covers (ppocr_mobile_v2_cls's 2x2/2 MaxPool on a 1-row input) */
    if (job.h.out < 0 || job.w.out < 0)
      return pool_fail(k->op, "the pooling window is larger than the padded input (no output position); give an "
                              "input at least as large as the kernel, or pads");
    ydims[2] = job.h.out; ydims[3] = job.w.out;
    job.plane = dims[2] * dims[3];
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, ydims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (job.planes == 0 || (k->kind < POOL_GLOBAL_AVG && job.h.out * job.w.out == 0)) return NULL;
  job.x = (const float*)x;
  if (k->kind == POOL_MAX || k->kind == POOL_AVG) {
    job.geom = pool_geometry(k, &job.h, &job.w, &geom) ? &geom : NULL;
    job.small = job.geom != NULL && job.planes >= 4 && job.plane <= POOL_SMALL_CELLS &&
                job.h.out * job.w.out <= POOL_SMALL_CELLS;
  }
  job.y = (float*)y;
  threads = mnb_threads();
  if ((double)threads > (double)job.planes * (double)job.plane / POOL_MIN_PER_THREAD)
    threads = (int)((double)job.planes * (double)job.plane / POOL_MIN_PER_THREAD);
  if (threads > job.planes) threads = (int)job.planes;
  if (threads < 1) threads = 1;
  mnb_parallel(threads, pool_job, &job);
  return NULL;
}

static OrtStatus* pool_ints(const OrtKernelInfo* info, const char* op, const char* name, size_t want, int64_t* dst,
                            int64_t dflt) {
  const int64_t* v = NULL;
  size_t n = 0, i;
  char msg[200];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, name, &v, &n));
  for (i = 0; i < want; ++i) dst[i] = dflt;
  if (v == NULL) return NULL;
  if (n != want) {
    snprintf(msg, sizeof msg, "attribute %s has %zu values; this C kernel takes %zu (2-D pooling)", name, n, want);
    return pool_fail(op, msg);
  }
  for (i = 0; i < n; ++i)
    if (v[i] < (dflt == 0 ? 0 : 1)) {
      snprintf(msg, sizeof msg, "attribute %s has value %lld; it must be >= %d", name, (long long)v[i], dflt == 0 ? 0 : 1);
      return pool_fail(op, msg);
    }
  memcpy(dst, v, n * sizeof *v);
  return NULL;
}

static OrtStatus* pool_new(const OrtKernelInfo* info, const char* op, int kind, OrtKernelImpl** out) {
  PoolKernel* k;
  PoolKernel a;
  const char* pad = NULL;
  int64_t v = 0;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  a.op = op;
  if (kind < POOL_GLOBAL_AVG) {
    const int64_t* ks = NULL;
    size_t nk = 0;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, "kernel_shape", &ks, &nk));
    if (ks == NULL) return pool_fail(op, "attribute kernel_shape is missing; set it (two values for 2-D pooling)");
    ORT_KERNEL_RETURN_IF_ERROR(pool_ints(info, op, "kernel_shape", 2, a.k, 1));
    ORT_KERNEL_RETURN_IF_ERROR(pool_ints(info, op, "strides", 2, a.s, 1));
    ORT_KERNEL_RETURN_IF_ERROR(pool_ints(info, op, "dilations", 2, a.d, 1));
    ORT_KERNEL_RETURN_IF_ERROR(pool_ints(info, op, "pads", 4, a.pads, 0));
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "ceil_mode", 0, &v, NULL));
    a.ceil_mode = v != 0;
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "count_include_pad", 0, &v, NULL));
    a.count_pad = v != 0;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "auto_pad", &pad));
    if (pad != NULL && (strcmp(pad, "SAME_UPPER") == 0 || strcmp(pad, "SAME_LOWER") == 0)) {
      a.same = 1;
      a.same_lower = pad[5] == 'L';
    } else if (pad != NULL && strcmp(pad, "VALID") == 0) {
      memset(a.pads, 0, sizeof a.pads);
    } else if (pad != NULL && strcmp(pad, "NOTSET") != 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "auto_pad '%.64s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", pad);
      return pool_fail(op, msg);
    }
  }
  k = (PoolKernel*)cpu_kernels_new(sizeof *k, pool_compute, cpu_kernels_declare_none);
  if (k == NULL) return pool_fail(op, "out of memory creating the kernel");
  a.base = k->base;
  *k = a;
  *out = &k->base;
  return NULL;
}

#define POOL_CREATE(fn, op, kind)                                                         \
  static OrtStatus* fn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state;                                                                      \
    return pool_new(info, op, kind, out);                                             \
  }
POOL_CREATE(pool_max, "MaxPool", POOL_MAX)
POOL_CREATE(pool_avg, "AveragePool", POOL_AVG)
POOL_CREATE(pool_global_avg, "GlobalAveragePool", POOL_GLOBAL_AVG)
POOL_CREATE(pool_global_max, "GlobalMaxPool", POOL_GLOBAL_MAX)

OrtStatus* ort_cpu_ep_register_pool(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st;
  g_api = api;
  st = cpu_kernels_add_onnx(api, registry, "MaxPool", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, pool_max, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "AveragePool", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, pool_avg, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "GlobalAveragePool", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, pool_global_avg, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "GlobalMaxPool", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, pool_global_max, cpu_kernels_estimate_none);
  return st;
}
