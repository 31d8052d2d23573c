/* Shape (since 1; start / end attributes since 15): the input's dims [start, end) as int64, a negative bound
 * counting from the end, both clamped to [0, rank] (start past end: an empty output), as ONNX and onnxruntime
 * say. (Cast, the integer casts of the attention-mask subgraph included, is cast_kernel.c's.) */
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

OrtStatus* move_register_shape(OrtKernelRegistry* registry) {
  return move_register(registry, "Shape", 1, "T", shape_create); /* start / end read when given (15) */
}
