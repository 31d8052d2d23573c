/* ONNX Resize (opset >= 11), float32, mode nearest or linear, X of rank 4 (NCHW) resized on H and W by scales or
 * sizes, as an ort-abi kernel. Linear: onnxruntime's bilinear in float32 (resize_tap: the coordinate clamped into the
 * input, the two neighbours' weights, then four products summed in its order), within float32 rounding of the numpy
 * kernel's float64 weights. Source coordinates in float32 exactly as the numpy kernel's _source_coords
 * (asymmetric, half_pixel, pytorch_half_pixel, align_corners); nearest then applies nearest_mode (floor, ceil,
 * round_prefer_floor / round_prefer_ceil: a tie goes to the lower / upper pixel), clamped into the input; an axis
 * whose scale is 1 with an unchanged length is copied as it is (the numpy kernel skips it), and bytes move from input
 * to output: the numpy kernel's bits. Output sizes: sizes, else int(scale * length) in double. One (image, channel)
 * plane per work item; an output row whose source row is the previous one's is a copy of it, a whole-number
 * upsampling along W writes each input value f times; the column table lives on the stack (up to RESIZE_TABLE columns, RESIZE_LINEAR_TABLE for
 * linear, else each row recomputes it). No workspace. */
#pragma GCC optimize("fp-contract=off") /* each float32 operation rounds as numpy's does */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define RESIZE_TABLE 4096
#define RESIZE_MIN_PER_THREAD (1 << 16) /* output elements below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

enum { RS_ASYMMETRIC = 0, RS_HALF_PIXEL, RS_PYTORCH_HALF_PIXEL, RS_ALIGN_CORNERS };
enum { RS_ROUND_PREFER_FLOOR = 0, RS_ROUND_PREFER_CEIL, RS_FLOOR, RS_CEIL };

typedef struct ResizeKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int coords, nearest;
  int linear; /* mode linear (bilinear on H and W) */
} ResizeKernel;

typedef struct ResizeAxis {
  int64_t in, out;
  float scale;
  int identity;
} ResizeAxis;

typedef struct ResizeJob {
  const ResizeKernel* k;
  const float* x;
  float* y;
  ResizeAxis h, w;
  int64_t planes, next; /* next: the first plane no thread has taken (atomic) */
} ResizeJob;

static OrtStatus* resize_fail(const char* what) {
  char msg[400];
  snprintf(msg, sizeof msg, "Resize: %s", what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* the input coordinate of output position o along axis a, in float32 as the numpy kernel's _source_coords */
static float resize_coord(const ResizeKernel* k, const ResizeAxis* a, int64_t o) {
  const float x = (float)o, sc = a->scale;
  float xs;
  switch (k->coords) {
    case RS_ASYMMETRIC: xs = x / sc; break;
    case RS_PYTORCH_HALF_PIXEL: xs = a->out == 1 ? 0.0f : (x + 0.5f) / sc - 0.5f; break;
    case RS_ALIGN_CORNERS: {
      const float out_w = sc * (float)a->in;
      xs = out_w == 1.0f ? 0.0f : x * (float)(a->in - 1) / (out_w - 1.0f);
      break;
    }
    default: xs = (x + 0.5f) / sc - 0.5f; break;
  }
  return xs;
}

/* the input index output position o reads along axis a */
static int64_t resize_source(const ResizeKernel* k, const ResizeAxis* a, int64_t o) {
  float xs, base;
  double ratio;
  int64_t idx;
  if (a->identity) return o;
  xs = resize_coord(k, a, o);
  base = ceilf(xs) - 1.0f; /* ratio in (0, 1]: the pixel on the left first, as the numpy kernel */
  ratio = (double)xs - (double)base; /* in double, as the numpy kernel compares it */
  switch (k->nearest) {
    case RS_ROUND_PREFER_FLOOR: idx = (int64_t)base + (ratio > 0.5); break;
    case RS_ROUND_PREFER_CEIL: idx = (int64_t)base + (ratio >= 0.5); break;
    case RS_FLOOR: idx = (int64_t)base + (ratio == 1.0); break;
    default: idx = (int64_t)base + 1; break;
  }
  return idx < 0 ? 0 : (idx > a->in - 1 ? a->in - 1 : idx);
}

/* linear: the two input indices output position o reads along axis a and their weights, onnxruntime's (the
 * coordinate clamped into the input; w1 = |c - i2| for i1, w2 = |c - i1| for i2; one pixel: 0.5 each) */
typedef struct ResizeTap {
  int32_t i1, i2;
  float w1, w2;
} ResizeTap;

static ResizeTap resize_tap(const ResizeKernel* k, const ResizeAxis* a, int64_t o) {
  const float hi = (float)(a->in - 1);
  float c = a->identity ? (float)o : resize_coord(k, a, o);
  ResizeTap t;
  c = c < 0.0f ? 0.0f : (c > hi ? hi : c);
  t.i1 = (int32_t)c < a->in - 1 ? (int32_t)c : (int32_t)(a->in - 1);
  t.i2 = t.i1 + 1 < a->in - 1 ? t.i1 + 1 : (int32_t)(a->in - 1);
  t.w2 = fabsf(c - (float)t.i1);
  t.w1 = fabsf(c - (float)t.i2);
  if (t.i1 == t.i2) t.w1 = t.w2 = 0.5f;
  return t;
}

#define RESIZE_LINEAR_TABLE 1024 /* columns whose taps live on the stack (16 KiB); wider rows recompute them */

/* one plane, bilinear: y = w1x w1y X11 + w2x w1y X12 + w1x w2y X21 + w2x w2y X22 in onnxruntime's order */
static void resize_linear_plane(const ResizeJob* job, const ResizeTap* cols, const float* plane, float* out) {
  int64_t oh, ow;
  for (oh = 0; oh < job->h.out; ++oh) {
    const ResizeTap r = resize_tap(job->k, &job->h, oh);
    const float *row1 = plane + (int64_t)r.i1 * job->w.in, *row2 = plane + (int64_t)r.i2 * job->w.in;
    float* dst = out + oh * job->w.out;
    for (ow = 0; ow < job->w.out; ++ow) {
      const ResizeTap c = cols != NULL ? cols[ow] : resize_tap(job->k, &job->w, ow);
      dst[ow] = c.w1 * r.w1 * row1[c.i1] + c.w2 * r.w1 * row1[c.i2] + c.w1 * r.w2 * row2[c.i1] +
                c.w2 * r.w2 * row2[c.i2];
    }
  }
}

static void resize_linear_job(ResizeJob* job) {
  ResizeTap cols[RESIZE_LINEAR_TABLE];
  const int tabled = job->w.out <= RESIZE_LINEAR_TABLE;
  int64_t ow;
  for (ow = 0; tabled && ow < job->w.out; ++ow) cols[ow] = resize_tap(job->k, &job->w, ow);
  for (;;) {
    int64_t p = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (p >= job->planes) break;
    resize_linear_plane(job, tabled ? cols : NULL, job->x + p * job->h.in * job->w.in,
                        job->y + p * job->h.out * job->w.out);
  }
}

/* dst[i * f + k] = row[i] for k < f (a whole-number upsampling along W: table[ow] == ow / f) */
CPU_KERNELS_CLONES
static void resize_repeat_row(const float* row, int64_t n, int64_t f, float* dst) {
  int64_t i, k;
  if (f == 2) {
    for (i = 0; i < n; ++i) dst[2 * i] = dst[2 * i + 1] = row[i];
    return;
  }
  for (i = 0; i < n; ++i)
    for (k = 0; k < f; ++k) dst[i * f + k] = row[i];
}

/* f when table[0, out) reads input column ow / f for a whole number f >= 2 and out == in * f, else 0 */
static int64_t resize_repeat_factor(const int32_t* table, int64_t in, int64_t out) {
  int64_t f = in > 0 ? out / in : 0, ow;
  if (f < 2 || out != in * f) return 0;
  for (ow = 0; ow < out; ++ow)
    if (table[ow] != ow / f) return 0;
  return f;
}

static void resize_job(void* arg, int index, int count) {
  ResizeJob* job = (ResizeJob*)arg;
  int32_t table[RESIZE_TABLE];
  const int tabled = job->w.out <= RESIZE_TABLE;
  int64_t ow, oh, prev, repeat = 0;
  (void)index; (void)count;
  if (job->k->linear) {
    resize_linear_job(job);
    return;
  }
  for (ow = 0; tabled && ow < job->w.out; ++ow) table[ow] = (int32_t)resize_source(job->k, &job->w, ow);
  if (tabled && !job->w.identity) repeat = resize_repeat_factor(table, job->w.in, job->w.out);
  for (;;) {
    int64_t p = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    const float* plane;
    float* out;
    if (p >= job->planes) break;
    plane = job->x + p * job->h.in * job->w.in;
    out = job->y + p * job->h.out * job->w.out;
    prev = -1;
    for (oh = 0; oh < job->h.out; ++oh) {
      const int64_t src = resize_source(job->k, &job->h, oh);
      const float* row = plane + src * job->w.in;
      float* dst = out + oh * job->w.out;
      if (src == prev) memcpy(dst, dst - job->w.out, (size_t)job->w.out * sizeof(float)); /* upsampled: a repeat */
      else if (job->w.identity) memcpy(dst, row, (size_t)job->w.in * sizeof(float));
      else if (repeat) resize_repeat_row(row, job->w.in, repeat, dst);
      else if (tabled)
        for (ow = 0; ow < job->w.out; ++ow) dst[ow] = row[table[ow]];
      else
        for (ow = 0; ow < job->w.out; ++ow) dst[ow] = row[resize_source(job->k, &job->w, ow)];
      prev = src;
    }
  }
}

/* input `index` as a host tensor of `want` elements (NULL: absent or empty) */
static OrtStatus* resize_input(OrtKernelContext* ctx, size_t n_in, size_t index, const void** data, int64_t* count) {
  const OrtValue* v = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  *data = NULL;
  *count = 0;
  if (index >= n_in) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &dims, &rank));
  for (*count = 1, i = 0; i < rank; ++i) *count *= dims[i];
  if (*count == 0) return NULL;
  return g_api->Value_GetTensorData(v, data);
}

static OrtStatus* resize_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  ResizeKernel* k = (ResizeKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, n_in = 0;
  const void *x = NULL, *scales = NULL, *sizes = NULL;
  void* y = NULL;
  int64_t n_scales = 0, n_sizes = 0, ydims[4], i;
  ResizeJob job;
  char msg[300];
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return resize_fail("input X is missing");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (rank != 4) {
    snprintf(msg, sizeof msg, "X has rank %zu; this C kernel takes rank 4 (N, C, H, W)", rank);
    return resize_fail(msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(resize_input(ctx, n_in, 2, &scales, &n_scales));
  ORT_KERNEL_RETURN_IF_ERROR(resize_input(ctx, n_in, 3, &sizes, &n_sizes));
  if ((sizes != NULL && n_sizes != 4) || (sizes == NULL && n_scales != 4)) {
    snprintf(msg, sizeof msg, "%s has %lld values; give 4 (one per axis of X) as scales or sizes",
             sizes != NULL ? "sizes" : "scales", (long long)(sizes != NULL ? n_sizes : n_scales));
    return resize_fail(msg);
  }
  memset(&job, 0, sizeof job);
  for (i = 0; i < 4; ++i) {
    double scale;
    if (sizes != NULL) {
      ydims[i] = ((const int64_t*)sizes)[i];
      scale = dims[i] > 0 ? (double)ydims[i] / (double)dims[i] : 1.0;
    } else {
      scale = (double)((const float*)scales)[i];
      ydims[i] = (int64_t)(scale * (double)dims[i]);
    }
    if (ydims[i] < 0 || !(scale > 0.0)) {
      snprintf(msg, sizeof msg, "axis %lld: scale %g / size %lld; scales must be > 0 and sizes >= 0", (long long)i,
               scale, (long long)ydims[i]);
      return resize_fail(msg);
    }
    if (i < 2 && ydims[i] != dims[i]) {
      snprintf(msg, sizeof msg, "axis %lld (N or C) resized from %lld to %lld; this C kernel resizes H and W only",
               (long long)i, (long long)dims[i], (long long)ydims[i]);
      return resize_fail(msg);
    }
    if (i >= 2) {
      ResizeAxis* a = i == 2 ? &job.h : &job.w;
      a->in = dims[i]; a->out = ydims[i]; a->scale = (float)scale;
      a->identity = fabs(scale - 1.0) <= 1e-9 && a->out == a->in; /* the numpy kernel's math.isclose */
    }
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, ydims, 4, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  job.planes = dims[0] * dims[1];
  if (job.planes == 0 || job.h.out == 0 || job.w.out == 0) return NULL;
  if (job.h.in == 0 || job.w.in == 0) return resize_fail("X has an empty spatial axis and the output does not");
  job.k = k; job.x = (const float*)x; job.y = (float*)y;
  threads = mnb_threads();
  if ((double)threads > (double)job.planes * (double)(job.h.out * job.w.out) / RESIZE_MIN_PER_THREAD)
    threads = (int)((double)job.planes * (double)(job.h.out * job.w.out) / RESIZE_MIN_PER_THREAD);
  if (threads > job.planes) threads = (int)job.planes;
  if (threads < 1) threads = 1;
  mnb_parallel(threads, resize_job, &job);
  return NULL;
}

static OrtStatus* resize_choice(const OrtKernelInfo* info, const char* name, const char* dflt, const char* const* names,
                                int count, int* out) {
  const char* s = NULL;
  char msg[300];
  int i;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, name, &s));
  if (s == NULL) s = dflt;
  for (i = 0; i < count; ++i)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return NULL;
    }
  snprintf(msg, sizeof msg, "attribute %s='%.64s' is not taken by this C kernel", name, s);
  return resize_fail(msg);
}

static OrtStatus* resize_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  static const char* coords[4] = {"asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"};
  static const char* nearest[4] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  static const char* modes[2] = {"nearest", "linear"};
  ResizeKernel* k;
  int c = 0, n = 0, m = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(resize_choice(info, "mode", "nearest", modes, 2, &m));
  ORT_KERNEL_RETURN_IF_ERROR(resize_choice(info, "coordinate_transformation_mode", "half_pixel", coords, 4, &c));
  ORT_KERNEL_RETURN_IF_ERROR(resize_choice(info, "nearest_mode", "round_prefer_floor", nearest, 4, &n));
  k = (ResizeKernel*)cpu_kernels_new(sizeof *k, resize_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Resize: out of memory creating the kernel");
  k->coords = c;
  k->nearest = n;
  k->linear = m == 1;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_resize(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t f[1] = {ORT_TENSOR_ELEMENT_FLOAT};
  g_api = api;
  return cpu_kernels_add_onnx_types(api, registry, "Resize", 11, "T1", f, 1, resize_create, cpu_kernels_estimate_none);
}
