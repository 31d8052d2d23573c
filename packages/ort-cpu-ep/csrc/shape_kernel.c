/* ONNX Shape as an ort-abi kernel: the input's extents as a 1-D int64 tensor, from opset 15 the [start, end) slice of
 * them (negative counts from the back, both clamped into [0, rank]), for an input of any element type this library
 * moves (its bytes are never read). No workspace. */
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"

static const OrtKernelApi* g_api = NULL;

typedef struct ShapeKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int64_t start, end;
  int has_end;
} ShapeKernel;

static int64_t shape_clamp(int64_t v, int64_t rank) {
  if (v < 0) v += rank;
  return v < 0 ? 0 : (v > rank ? rank : v);
}

static OrtStatus* shape_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const ShapeKernel* k = (const ShapeKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0;
  int64_t start, end, n;
  void* y = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "Shape: input data is missing; it is required");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  start = shape_clamp(k->start, (int64_t)rank);
  end = k->has_end ? shape_clamp(k->end, (int64_t)rank) : (int64_t)rank;
  n = end > start ? end - start : 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, &n, 1, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (n > 0) memcpy(y, dims + start, (size_t)n * sizeof(int64_t));
  return NULL;
}

static OrtStatus* shape_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ShapeKernel* k;
  int64_t start = 0, end = 0;
  int has_end = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "start", 0, &start, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "end", 0, &end, &has_end));
  k = (ShapeKernel*)cpu_kernels_new(sizeof *k, shape_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Shape: out of memory creating the kernel");
  k->start = start;
  k->end = end;
  k->has_end = has_end;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_shape(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t types[] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_UINT8, ORT_TENSOR_ELEMENT_INT8,
                                  ORT_TENSOR_ELEMENT_UINT16, ORT_TENSOR_ELEMENT_INT16, ORT_TENSOR_ELEMENT_INT32,
                                  ORT_TENSOR_ELEMENT_INT64, ORT_TENSOR_ELEMENT_BOOL, ORT_TENSOR_ELEMENT_FLOAT16,
                                  ORT_TENSOR_ELEMENT_DOUBLE, ORT_TENSOR_ELEMENT_UINT32, ORT_TENSOR_ELEMENT_UINT64,
                                  ORT_TENSOR_ELEMENT_BFLOAT16};
  g_api = api;
  /* 1: start / end (opset 15) are absent before, which reads as the whole shape */
  return cpu_kernels_add_onnx_types(api, registry, "Shape", 1, "T", types, (int)(sizeof types / sizeof types[0]),
                                    shape_create, cpu_kernels_estimate_none);
}
