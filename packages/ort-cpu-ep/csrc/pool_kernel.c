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

typedef struct PoolJob {
  const PoolKernel* pk;
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

/* the taps [t0, t1) of output o that fall on real cells, and how many fall inside the padded extent */
static void pool_taps(const PoolAxis* a, int64_t o, int64_t* t0, int64_t* t1, int64_t* padded) {
  int64_t start = o * a->s - a->pb, t, lo = a->k, hi = 0, n = 0;
  for (t = 0; t < a->k; ++t) {
    int64_t p = start + t * a->d;
    if (p >= -a->pb && p < a->size + a->pe) ++n;
    if (p >= 0 && p < a->size) {
      if (t < lo) lo = t;
      hi = t + 1;
    }
  }
  *t0 = lo; *t1 = hi > lo ? hi : lo; *padded = n;
}

/* the larger of m and v, a NaN sticking once met */
static inline float pool_max_nan(float m, float v) { return (v > m || v != v) && m == m ? v : m; }

/* whether every window of the axis lies inside the input (no pads reached): the taps need no clipping */
static int pool_inside(const PoolAxis* a) { return a->pb == 0 && (a->out - 1) * a->s + (a->k - 1) * a->d < a->size; }

/* a plane whose windows all lie inside the input: each window's k x k cells, no clipping, count k * k */
CPU_KERNELS_CLONES
static void pool_plane_inside(const PoolJob* job, const float* x, float* y) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const int is_max = job->pk->kind == POOL_MAX;
  const float count = (float)(h->k * w->k);
  int64_t oh, ow, kh, kw;
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
  for (oh = 0; oh < h->out; ++oh)
    for (ow = 0; ow < w->out; ++ow) {
      const float* base = x + oh * h->s * w->size + ow * w->s;
      float acc = is_max ? -INFINITY : 0.0f;
      int nan = 0;
      for (kh = 0; kh < h->k; ++kh) {
        const float* row = base + kh * h->d * w->size;
        for (kw = 0; kw < w->k; ++kw) {
          const float v = row[kw * w->d];
          if (is_max) { /* branch-free: the larger, NaNs noted beside */
            acc = v > acc ? v : acc;
            nan |= v != v;
          } else {
            acc += v;
          }
        }
      }
      y[oh * w->out + ow] = is_max ? (nan ? NAN : acc) : acc / count;
    }
}

CPU_KERNELS_CLONES
static void pool_plane(const PoolJob* job, const float* x, float* y) {
  const PoolAxis *h = &job->h, *w = &job->w;
  const int is_max = job->pk->kind == POOL_MAX;
  int64_t oh, ow, kh, kw;
  if (pool_inside(h) && pool_inside(w)) {
    pool_plane_inside(job, x, y);
    return;
  }
  for (oh = 0; oh < h->out; ++oh) {
    int64_t h0, h1, hp;
    pool_taps(h, oh, &h0, &h1, &hp);
    for (ow = 0; ow < w->out; ++ow) {
      int64_t w0, w1, wp, ih0 = oh * h->s - h->pb, iw0 = ow * w->s - w->pb;
      float acc = is_max ? -INFINITY : 0.0f;
      pool_taps(w, ow, &w0, &w1, &wp);
      for (kh = h0; kh < h1; ++kh) {
        const float* row = x + (ih0 + kh * h->d) * w->size + iw0;
        for (kw = w0; kw < w1; ++kw) {
          const float v = row[kw * w->d];
          if (is_max) {
            if (acc == acc && (v > acc || v != v)) acc = v; /* a NaN stays */
          } else {
            acc += v;
          }
        }
      }
      if (!is_max) {
        const int64_t count = job->pk->count_pad ? hp * wp : (h1 - h0) * (w1 - w0);
        acc = acc / (float)count;
      }
      y[oh * w->out + ow] = acc;
    }
  }
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
    int64_t p = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (p >= job->planes) break;
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
