/* The float32 elementwise activations of CNNs as ort-abi kernels: Relu, Clip (opset 6's min / max attributes or
 * opset 11's optional scalar inputs), HardSigmoid (alpha 0.2, beta 0.5), LeakyRelu (alpha 0.01), HardSwish and
 * Sigmoid; the math is act_math.c (numpy's bits; Sigmoid within a few ulp). Elementwise at the same index, so the
 * plan may write Y over X. Threads split the elements when there are enough of them. No workspace. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conv.h" /* ConvAct, conv_act_apply */
#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define UNARY_MIN_PER_THREAD (1 << 16) /* elements below which an extra thread does not pay */
#define UNARY_MAX_RANK 64

static const OrtKernelApi* g_api = NULL;

typedef struct UnaryKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  ConvAct act;
  int bounds_from_inputs; /* Clip: min / max are inputs 1 and 2 (opset >= 11) */
  const char* op;
} UnaryKernel;

typedef struct UnaryJob {
  const float* x;
  float* y;
  int64_t n;
  ConvAct act;
} UnaryJob;

static void unary_job(void* arg, int index, int count) {
  const UnaryJob* job = (const UnaryJob*)arg;
  int64_t i0, i1;
  cpu_kernels_share(job->n, index, count, 16, &i0, &i1);
  if (i0 < i1) conv_act_apply(job->x + i0, job->y + i0, i1 - i0, &job->act);
}

static OrtStatus* unary_fail(const char* op, const char* what) {
  char msg[320];
  snprintf(msg, sizeof msg, "%s: %s", op, what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* Clip's optional input `index` (a float32 scalar or one-element tensor) into *bound; absent: unchanged */
static OrtStatus* unary_bound(OrtKernelContext* ctx, size_t n_in, size_t index, float* bound) {
  const OrtValue* v = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  int64_t count = 1;
  const void* data = NULL;
  if (index >= n_in) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &dims, &rank));
  for (i = 0; i < rank; ++i) count *= dims[i];
  if (count != 1) {
    char msg[160];
    snprintf(msg, sizeof msg, "input %s has %lld elements; it must be a scalar (one value)", index == 1 ? "min" : "max",
             (long long)count);
    return unary_fail("Clip", msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(v, &data));
  *bound = *(const float*)data;
  return NULL;
}

static OrtStatus* unary_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  UnaryKernel* k = (UnaryKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i, n_in = 0;
  const void* x = NULL;
  void* y = NULL;
  UnaryJob job;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return unary_fail(k->op, "input X is missing");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (rank > UNARY_MAX_RANK) return unary_fail(k->op, "X has rank above 64");
  job.act = k->act;
  if (k->bounds_from_inputs) {
    ORT_KERNEL_RETURN_IF_ERROR(unary_bound(ctx, n_in, 1, &job.act.a));
    ORT_KERNEL_RETURN_IF_ERROR(unary_bound(ctx, n_in, 2, &job.act.b));
  }
  for (job.n = 1, i = 0; i < rank; ++i) job.n *= dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (job.n == 0) return NULL;
  job.x = (const float*)x;
  job.y = (float*)y;
  mnb_parallel(mnb_threads_for(job.n, UNARY_MIN_PER_THREAD), unary_job, &job);
  return NULL;
}

static OrtStatus* unary_float_attr(const OrtKernelInfo* info, const char* name, float* out) {
  int has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, name, &has));
  return has ? g_api->KernelInfo_GetAttributeFloat(info, name, out) : NULL;
}

static OrtStatus* unary_new(const OrtKernelInfo* info, const char* op, int kind, OrtKernelImpl** out) {
  UnaryKernel* k;
  ConvAct act;
  int has_min = 0, has_max = 0;
  act.kind = kind;
  act.a = act.b = 0.0f;
  if (kind == CONV_ACT_CLIP) {
    act.a = -FLT_MAX; act.b = FLT_MAX; /* onnxruntime's absent bounds: the lowest and largest float */
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "min", &has_min));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "max", &has_max));
    ORT_KERNEL_RETURN_IF_ERROR(unary_float_attr(info, "min", &act.a));
    ORT_KERNEL_RETURN_IF_ERROR(unary_float_attr(info, "max", &act.b));
  } else if (kind == CONV_ACT_HARD_SIGMOID) {
    act.a = 0.2f; act.b = 0.5f;
    ORT_KERNEL_RETURN_IF_ERROR(unary_float_attr(info, "alpha", &act.a));
    ORT_KERNEL_RETURN_IF_ERROR(unary_float_attr(info, "beta", &act.b));
  } else if (kind == CONV_ACT_LEAKY_RELU) {
    act.a = 0.01f;
    ORT_KERNEL_RETURN_IF_ERROR(unary_float_attr(info, "alpha", &act.a));
  }
  k = (UnaryKernel*)cpu_kernels_new(sizeof *k, unary_compute, cpu_kernels_declare_none);
  if (k == NULL) return unary_fail(op, "out of memory creating the kernel");
  k->act = act;
  k->op = op;
  k->bounds_from_inputs = kind == CONV_ACT_CLIP && !has_min && !has_max; /* the numpy kernel's rule */
  *out = &k->base;
  return NULL;
}

#define UNARY_CREATE(fn, op, kind)                                                        \
  static OrtStatus* fn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state;                                                                      \
    return unary_new(info, op, kind, out);                                            \
  }
UNARY_CREATE(unary_relu, "Relu", CONV_ACT_RELU)
UNARY_CREATE(unary_clip, "Clip", CONV_ACT_CLIP)
UNARY_CREATE(unary_hard_sigmoid, "HardSigmoid", CONV_ACT_HARD_SIGMOID)
UNARY_CREATE(unary_leaky_relu, "LeakyRelu", CONV_ACT_LEAKY_RELU)
UNARY_CREATE(unary_hard_swish, "HardSwish", CONV_ACT_HARD_SWISH)
UNARY_CREATE(unary_sigmoid, "Sigmoid", CONV_ACT_SIGMOID)

OrtStatus* ort_cpu_ep_register_unary(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const struct {
    const char* op;
    int since;
    OrtKernelCreateFunc create;
  } ops[6] = {{"Relu", 6, unary_relu}, {"Clip", 6, unary_clip}, {"HardSigmoid", 6, unary_hard_sigmoid},
              {"LeakyRelu", 6, unary_leaky_relu}, {"HardSwish", 14, unary_hard_swish}, {"Sigmoid", 6, unary_sigmoid}};
  OrtStatus* st = NULL;
  int i;
  g_api = api;
  for (i = 0; i < 6 && !st; ++i)
    st = cpu_kernels_add_onnx(api, registry, ops[i].op, ops[i].since, "T", ORT_TENSOR_ELEMENT_FLOAT, ops[i].create,
                              cpu_kernels_estimate_none);
  return st;
}
