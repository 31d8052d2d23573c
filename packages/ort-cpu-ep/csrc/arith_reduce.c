/* ReduceSum on int64 and int32 (the attention-mask subgraph's sum of the mask), since 13: the axes are input 1
 * (int64, omitted or empty: every axis, or none with noop_with_empty_axes; before 13 an attribute, the numpy
 * kernel's); keepdims (default 1) keeps each reduced axis as extent 1. A negative axis counts from the end; an axis
 * outside [-rank, rank-1] or given twice is an INVALID_ARGUMENT naming the op, the node and the axes. Sums wrap
 * around on overflow (through the unsigned type), as onnxruntime's and numpy's do. float32 sums stay with the
 * numpy kernel (their order of additions is onnxruntime's business). No workspace, one thread. */
#include <stdio.h>
#include <string.h>

#include "move.h"

#define RED_MAX_RANK MOVE_MAX_RANK

typedef struct RedKernel {
  MoveKernel m; /* first: the host sees an OrtKernelImpl*, the messages a MoveKernel */
  int keepdims, noop;
} RedKernel;

/* out[o] += x[i] over x's elements in row-major order, o the index with the reduced axes dropped: `ostride` per
 * axis (0 along a reduced one) */
#define RED_LOOP(T, U)                                                                             \
  do {                                                                                             \
    const T* src = (const T*)x->data;                                                              \
    T* dst = (T*)y;                                                                                \
    int64_t idx[RED_MAX_RANK] = {0}, o = 0;                                                        \
    for (size_t j = 0; j < count; ++j) dst[j] = 0;                                                 \
    for (size_t i = 0; i < x->count; ++i) {                                                        \
      dst[o] = (T)((U)dst[o] + (U)src[i]);                                                         \
      for (size_t d = rank; d-- > 0;) { /* the odometer */                                         \
        o += ostride[d];                                                                           \
        if (++idx[d] < x->dims[d]) break;                                                          \
        o -= ostride[d] * x->dims[d];                                                              \
        idx[d] = 0;                                                                                \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void red_sum(int wide, const MoveTensor* x, const int64_t* ostride, char* y, size_t count) {
  const size_t rank = x->rank;
  if (wide)
    RED_LOOP(int64_t, uint64_t);
  else
    RED_LOOP(int32_t, uint32_t);
}

static OrtStatus* red_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const RedKernel* k = (const RedKernel*)this_ptr;
  const MoveKernel* m = &k->m;
  MoveTensor x;
  const OrtValue* v = NULL;
  int32_t type = 0;
  int present, reduced[RED_MAX_RANK] = {0};
  int64_t axes[RED_MAX_RANK], out[RED_MAX_RANK], ostride[RED_MAX_RANK], step = 1;
  size_t naxes = SIZE_MAX, i, orank = 0, count = 1;
  char* y = NULL;
  char a[160];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(m, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInput(ctx, 0, &v));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetElementType(v, &type));
  if (type != ORT_TENSOR_ELEMENT_INT64 && type != ORT_TENSOR_ELEMENT_INT32)
    return move_error(m, "input 0 has element type %d; this C kernel sums int64 (7) or int32 (6) only", (int)type);
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(m, ctx, 1, "axes", axes, RED_MAX_RANK, &naxes));
  if (naxes == SIZE_MAX) naxes = 0;
  if (naxes == 0 && k->noop) { /* the input as it is */
    ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, x.dims, x.rank, &y));
    if (x.count) memcpy(y, x.data, x.count * x.elem_size);
    return NULL;
  }
  for (i = 0; i < naxes; ++i) {
    int64_t ax = axes[i] < 0 ? axes[i] + (int64_t)x.rank : axes[i];
    if (ax < 0 || ax >= (int64_t)x.rank || reduced[ax])
      return move_error(m, "axes %s %s for the input of rank %zu; give each axis in [-%zu, %zu] once",
                        move_shape_str(a, sizeof a, axes, naxes), ax < 0 || ax >= (int64_t)x.rank ? "are out of range"
                        : "repeat an axis", x.rank, x.rank, x.rank ? x.rank - 1 : 0);
    reduced[ax] = 1;
  }
  for (i = 0; i < x.rank; ++i) {
    if (naxes == 0) reduced[i] = 1; /* no axes: every axis */
    if (!reduced[i] || k->keepdims) out[orank++] = reduced[i] ? 1 : x.dims[i];
    if (!reduced[i]) count *= (size_t)x.dims[i];
  }
  for (i = x.rank; i-- > 0;) { /* the output's strides along the input's axes */
    ostride[i] = reduced[i] ? 0 : step;
    if (!reduced[i]) step *= x.dims[i];
  }
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, out, orank, &y));
  if (count) red_sum(type == ORT_TENSOR_ELEMENT_INT64, &x, ostride, y, count);
  return NULL;
}

static OrtStatus* red_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  RedKernel* k = (RedKernel*)cpu_kernels_new(sizeof *k, red_compute, cpu_kernels_declare_none);
  const char* name = NULL;
  int64_t keepdims = 1, noop = 0;
  OrtStatus* st;
  (void)state;
  if (k == NULL) return move_api->CreateStatus(ORT_FAIL, "ReduceSum: out of memory creating the kernel");
  k->m.op = "ReduceSum";
  st = move_api->KernelInfo_GetNodeName(info, &name);
  if (st != NULL)
    move_api->ReleaseStatus(st); /* no name: the messages say '' */
  else if (name != NULL)
    snprintf(k->m.node, sizeof k->m.node, "%s", name);
  st = cpu_kernels_attr_int(move_api, info, "keepdims", 1, &keepdims, NULL);
  if (!st) st = cpu_kernels_attr_int(move_api, info, "noop_with_empty_axes", 0, &noop, NULL);
  if (st) {
    k->m.base.Release(&k->m.base);
    return st;
  }
  k->keepdims = keepdims != 0;
  k->noop = noop != 0;
  *out = &k->m.base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_reduce(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t ints[2] = {ORT_TENSOR_ELEMENT_INT64, ORT_TENSOR_ELEMENT_INT32};
  move_api = api;
  return cpu_kernels_add_onnx_types(api, registry, "ReduceSum", 13, "T", ints, 2, red_create, cpu_kernels_estimate_none);
}
