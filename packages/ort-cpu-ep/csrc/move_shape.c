/* Shape (since 1; start / end attributes since 15): the input's dims [start, end) as int64, a negative bound
 * counting from the end, both clamped to [0, rank] (start past end: an empty output), as ONNX and onnxruntime
 * say. Cast between integer types (int64, int32) and from them to float32 (the attention-mask subgraph's
 * int64 -> int32 casts): each element converted as C converts it, the same values numpy's astype and
 * onnxruntime give (an integer narrowed keeps its low bits; float32 rounds to nearest). Other Casts (from
 * float, to or from float16, strings, bool) are the numpy kernel's: `_c_move_applies` in ort_cpu_ep says so. */
#include <string.h>

#include "move.h"

static OrtStatus* shape_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t r, start, end, n;
  char* y = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  r = (int64_t)x.rank;
  start = k->start < 0 ? k->start + r : k->start;
  end = k->end < 0 ? k->end + r : k->end;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  n = end > start ? end - start : 0;
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, &n, 1, &y));
  if (n) memcpy(y, x.dims + start, (size_t)n * sizeof(int64_t));
  return NULL;
}

static OrtStatus* shape_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k = NULL;
  OrtStatus* st;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Shape", shape_compute, &k));
  st = cpu_kernels_attr_int(move_api, info, "start", 0, &k->start, NULL);
  if (!st) st = cpu_kernels_attr_int(move_api, info, "end", INT64_MAX, &k->end, NULL);
  if (st) {
    k->base.Release(&k->base);
    return st;
  }
  *out = &k->base;
  return NULL;
}

/* y[i] = (TO)x[i] for the pairs cast_supported accepts */
#define CAST_LOOP(FROM, TO)                                                   \
  do {                                                                        \
    const FROM* src = (const FROM*)x;                                         \
    TO* dst = (TO*)y;                                                         \
    for (size_t i = 0; i < n; ++i) dst[i] = (TO)src[i];                       \
  } while (0)

static int cast_integer(int32_t t) { return t == ORT_TENSOR_ELEMENT_INT64 || t == ORT_TENSOR_ELEMENT_INT32; }

CPU_KERNELS_CLONES
static void cast_convert(int32_t from, int32_t to, const char* x, char* y, size_t n) {
  if (from == ORT_TENSOR_ELEMENT_INT64 && to == ORT_TENSOR_ELEMENT_INT32) CAST_LOOP(int64_t, int32_t);
  else if (from == ORT_TENSOR_ELEMENT_INT32 && to == ORT_TENSOR_ELEMENT_INT64) CAST_LOOP(int32_t, int64_t);
  else if (from == ORT_TENSOR_ELEMENT_INT64) CAST_LOOP(int64_t, float);
  else CAST_LOOP(int32_t, float);
}

static OrtStatus* cast_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  const OrtValue* v = NULL;
  int32_t from = 0;
  MoveTensor x;
  int present;
  char* y = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "input", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInput(ctx, 0, &v));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetElementType(v, &from));
  if (!cast_integer(from))
    return move_error(k, "input 0 has element type %d; this C kernel casts from int64 (7) or int32 (6) only",
                      (int)from);
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, x.dims, x.rank, &y));
  if (x.count == 0) return NULL;
  if (from == k->to)
    memcpy(y, x.data, x.count * x.elem_size);
  else
    cast_convert(from, k->to, x.data, y, x.count);
  return NULL;
}

static OrtStatus* cast_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k = NULL;
  int64_t to = 0;
  int has = 0;
  OrtStatus* st;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Cast", cast_compute, &k));
  st = cpu_kernels_attr_int(move_api, info, "to", 0, &to, &has);
  if (!st && (!has || !(cast_integer((int32_t)to) || to == ORT_TENSOR_ELEMENT_FLOAT)))
    st = move_error(k, "attribute 'to' is %lld%s; this C kernel casts to int64 (7), int32 (6) or float32 (1) only",
                    (long long)to, has ? "" : " (absent: it is required)");
  if (st) {
    k->base.Release(&k->base);
    return st;
  }
  k->to = (int32_t)to;
  *out = &k->base;
  return NULL;
}

OrtStatus* move_register_shape(OrtKernelRegistry* registry) {
  static const int32_t ints[2] = {ORT_TENSOR_ELEMENT_INT64, ORT_TENSOR_ELEMENT_INT32};
  OrtStatus* st = move_register(registry, "Shape", 1, "T", shape_create); /* start / end read when given (15) */
  /* since 6: `to` an integer (a string before); 13, 19 and 21 add types (bfloat16, float8, int4), not these */
  if (!st) st = cpu_kernels_add_onnx_types(move_api, registry, "Cast", 6, "T1", ints, 2, cast_create,
                                           cpu_kernels_estimate_none);
  return st;
}
