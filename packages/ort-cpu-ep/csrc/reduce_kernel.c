/* float32 ReduceSum, ReduceMean, ReduceMax and ReduceMin as ort-abi kernels, over one contiguous run of axes: the
 * axes from the attribute (ReduceSum before 13, the others before 18) or from input 1 (int64), keepdims,
 * noop_with_empty_axes (empty axes: X as it is, else every axis). ort_cpu_ep._ckernels sends axes that are not one run
 * (after dropping extents of 1) or that are computed at run time to the numpy kernel; this kernel refuses them too.
 *
 * X is seen as [outer, R, inner] (R the reduced extent). inner == 1: each output reduces R contiguous floats in 16
 * lanes, the lanes then combined pairwise; else the rows of `inner` floats are combined one after another (numpy's
 * order for a reduced leading axis). Sums are float32, as numpy's and onnxruntime's; the mean divides the sum once.
 * Max / Min propagate NaN (numpy's maximum / minimum); over no values Sum and Mean give 0 and NaN, Max -inf, Min +inf
 * (the numpy kernel's). No workspace. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"

#define RD_MAX_RANK 16
#define RD_LANES 16

enum { RD_SUM = 0, RD_MEAN, RD_MAX, RD_MIN };
static const char* const RD_NAMES[4] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"};

static const OrtKernelApi* g_api = NULL;

typedef struct RdKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int op, keepdims, noop_empty, axes_input; /* axes_input: axes are input 1 (else the attribute) */
  size_t n_attr_axes;
  int64_t attr_axes[RD_MAX_RANK];
} RdKernel;

/* a op b for the reduction: b's NaN sticks for Max / Min */
static inline float rd_combine(int op, float a, float b) {
  if (op == RD_MAX) return a != a ? a : (b > a || b != b ? b : a);
  if (op == RD_MIN) return a != a ? a : (b < a || b != b ? b : a);
  return a + b;
}

static float rd_identity(int op) { return op == RD_MAX ? -INFINITY : op == RD_MIN ? INFINITY : 0.0f; }

/* the reduction of x[0, n) contiguous */
CPU_KERNELS_CLONES
static float rd_contiguous(int op, const float* x, int64_t n) {
  float acc[RD_LANES];
  int64_t i = 0, j, w;
  for (j = 0; j < RD_LANES; ++j) acc[j] = rd_identity(op);
  if (op == RD_SUM || op == RD_MEAN) {
    for (; i + RD_LANES <= n; i += RD_LANES)
      for (j = 0; j < RD_LANES; ++j) acc[j] += x[i + j];
  } else {
    for (; i + RD_LANES <= n; i += RD_LANES)
      for (j = 0; j < RD_LANES; ++j) acc[j] = rd_combine(op, acc[j], x[i + j]);
  }
  for (; i < n; ++i) acc[i % RD_LANES] = rd_combine(op, acc[i % RD_LANES], x[i]);
  for (w = RD_LANES / 2; w >= 1; w /= 2)
    for (j = 0; j < w; ++j) acc[j] = rd_combine(op, acc[j], acc[j + w]);
  return acc[0];
}

/* y[0, inner) = the reduction of the `rows` rows of x (rows `inner` apart) */
CPU_KERNELS_CLONES
static void rd_rows(int op, const float* x, int64_t rows, int64_t inner, float* y) {
  int64_t r, i;
  for (i = 0; i < inner; ++i) y[i] = rd_identity(op);
  for (r = 0; r < rows; ++r) {
    const float* row = x + r * inner;
    if (op == RD_SUM || op == RD_MEAN)
      for (i = 0; i < inner; ++i) y[i] += row[i];
    else
      for (i = 0; i < inner; ++i) y[i] = rd_combine(op, y[i], row[i]);
  }
}

static OrtStatus* rd_fail(const RdKernel* k, const char* what) {
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s", RD_NAMES[k->op], what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* the axes to reduce into marks[0, rank); *all: no axes given (every axis, or none with noop_with_empty_axes) */
static OrtStatus* rd_axes(const RdKernel* k, OrtKernelContext* ctx, size_t rank, unsigned char* marks, int* empty) {
  const int64_t* axes = k->attr_axes;
  size_t n = k->n_attr_axes, i, n_in = 0;
  char msg[200];
  memset(marks, 0, RD_MAX_RANK);
  if (k->axes_input) {
    const OrtValue* v = NULL;
    const int64_t* dims = NULL;
    size_t r = 0, j;
    const void* data = NULL;
    int32_t type = 0;
    n = 0;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
    if (n_in > 1) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, &v));
    if (v != NULL) {
      ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(v, &type));
      if (type != ORT_TENSOR_ELEMENT_INT64) return rd_fail(k, "input axes must be int64");
      ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &dims, &r));
      for (n = 1, j = 0; j < r; ++j) n *= (size_t)dims[j];
      ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(v, &data));
      axes = (const int64_t*)data;
    }
  }
  *empty = n == 0;
  for (i = 0; i < n; ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + (int64_t)rank : axes[i];
    if (a < 0 || a >= (int64_t)rank) {
      snprintf(msg, sizeof msg, "axis %lld is outside the input's rank %zu; give axes in [-%zu, %zu)",
               (long long)axes[i], rank, rank, rank);
      return rd_fail(k, msg);
    }
    marks[a] = 1;
  }
  if (n == 0 && !k->noop_empty) memset(marks, 1, rank);
  return NULL;
}

static OrtStatus* rd_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const RdKernel* k = (const RdKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i, out_rank = 0;
  unsigned char marks[RD_MAX_RANK];
  int64_t out_dims[RD_MAX_RANK], outer = 1, red = 1, inner = 1, count = 1, o;
  int empty = 0, phase = 0; /* 0: before the reduced run, 1: in it, 2: after it */
  const void* xd = NULL;
  void* yd = NULL;
  const float* x;
  float* y;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return rd_fail(k, "input data is missing; it is required");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (rank > RD_MAX_RANK) return rd_fail(k, "the input has rank above 16; the numpy kernel takes it");
  ORT_KERNEL_RETURN_IF_ERROR(rd_axes(k, ctx, rank, marks, &empty));
  for (i = 0; i < rank; ++i) {
    count *= dims[i];
    if (marks[i] && dims[i] != 1) {
      if (phase == 2) return rd_fail(k, "the reduced axes are not one run of neighbouring axes; the numpy kernel takes them");
      phase = 1;
      red *= dims[i];
    } else if (!marks[i]) { /* kept; an extent of 1 (kept or reduced) ends no run */
      if (phase == 1 && dims[i] != 1) phase = 2;
      if (phase == 0) outer *= dims[i];
      else inner *= dims[i];
    }
    if (!marks[i]) out_dims[out_rank++] = dims[i];
    else if (k->keepdims) out_dims[out_rank++] = 1;
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &xd));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, out_rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &yd));
  x = (const float*)xd;
  y = (float*)yd;
  if (outer == 0 || inner == 0) return NULL; /* no outputs */
  if (empty && k->noop_empty) { /* X as it is */
    if (y != x) memcpy(y, x, (size_t)count * sizeof(float));
    return NULL;
  }
  for (o = 0; o < outer; ++o) {
    float* yo = y + o * inner;
    if (inner == 1) *yo = rd_contiguous(k->op, x + o * red, red);
    else rd_rows(k->op, x + o * red * inner, red, inner, yo);
    if (k->op == RD_MEAN)
      for (i = 0; i < (size_t)inner; ++i) yo[i] = yo[i] / (float)red;
  }
  return NULL;
}

static OrtStatus* rd_new(const OrtKernelInfo* info, int op, int axes_input, OrtKernelImpl** out) {
  RdKernel* k;
  int64_t keepdims = 1, noop = 0;
  const int64_t* axes = NULL;
  size_t n = 0;
  char msg[96];
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "keepdims", 1, &keepdims, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "noop_with_empty_axes", 0, &noop, NULL));
  if (!axes_input) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, "axes", &axes, &n));
  k = (RdKernel*)cpu_kernels_new(sizeof *k, rd_compute, cpu_kernels_declare_none);
  if (k == NULL) {
    snprintf(msg, sizeof msg, "%s: out of memory creating the kernel", RD_NAMES[op]);
    return g_api->CreateStatus(ORT_FAIL, msg);
  }
  k->op = op;
  k->keepdims = keepdims != 0;
  k->noop_empty = noop != 0;
  k->axes_input = axes_input;
  if (axes != NULL && n > RD_MAX_RANK) {
    snprintf(msg, sizeof msg, "%s: %zu axes; this C kernel takes up to 16", RD_NAMES[op], n);
    k->base.Release(&k->base);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  if (axes != NULL) memcpy(k->attr_axes, axes, n * sizeof *axes);
  k->n_attr_axes = axes != NULL ? n : 0;
  *out = &k->base;
  return NULL;
}

#define RD_CREATE(fn, op, axes_input)                                                      \
  static OrtStatus* fn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state;                                                                      \
    return rd_new(info, op, axes_input, out);                                         \
  }
RD_CREATE(rd_sum_attr, RD_SUM, 0)
RD_CREATE(rd_sum_input, RD_SUM, 1)
RD_CREATE(rd_mean_attr, RD_MEAN, 0)
RD_CREATE(rd_mean_input, RD_MEAN, 1)
RD_CREATE(rd_max_attr, RD_MAX, 0)
RD_CREATE(rd_max_input, RD_MAX, 1)
RD_CREATE(rd_min_attr, RD_MIN, 0)
RD_CREATE(rd_min_input, RD_MIN, 1)

OrtStatus* ort_cpu_ep_register_float_reduce(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  /* axes became an input at 13 (ReduceSum) or 18 (the others) */
  static const struct {
    int op, switch_at;
    OrtKernelCreateFunc attr, input;
  } ops[4] = {{RD_SUM, 13, rd_sum_attr, rd_sum_input}, {RD_MEAN, 18, rd_mean_attr, rd_mean_input},
              {RD_MAX, 18, rd_max_attr, rd_max_input}, {RD_MIN, 18, rd_min_attr, rd_min_input}};
  OrtStatus* st = NULL;
  int i;
  g_api = api;
  for (i = 0; i < 4 && !st; ++i) {
    st = cpu_kernels_add_onnx_until(api, registry, RD_NAMES[ops[i].op], 1, ops[i].switch_at - 1, "T",
                                    ORT_TENSOR_ELEMENT_FLOAT, ops[i].attr, cpu_kernels_estimate_none);
    if (!st) st = cpu_kernels_add_onnx(api, registry, RD_NAMES[ops[i].op], ops[i].switch_at, "T",
                                       ORT_TENSOR_ELEMENT_FLOAT, ops[i].input, cpu_kernels_estimate_none);
  }
  return st;
}
