/* Split (opset 13+: the sizes an optional int64 input; opset 18's num_outputs attribute, the last part smaller
 * when the axis does not divide): each output one block per outer row of the input. Sizes that do not sum to the
 * axis, a negative size, a count other than the outputs', or an axis that does not divide into the outputs with
 * neither given, are errors naming the values, as onnxruntime refuses them. */
#include <string.h>

#include "move.h"

#define SPLIT_MAX_OUTPUTS 256
#define SHAPE_TEXT 256

/* the parts along the axis: the split input, else num_outputs (ceil-sized, the last what is left), else equal */
static OrtStatus* split_sizes(const MoveKernel* k, OrtKernelContext* ctx, int64_t dim, size_t outputs, int64_t* sizes) {
  size_t given = 0, i;
  int64_t total = 0;
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 1, "split", sizes, SPLIT_MAX_OUTPUTS, &given));
  if (given != SIZE_MAX) {
    if (k->start > 0) return move_error(k, "both the split input and num_outputs=%lld are given; give one", (long long)k->start);
    if (given != outputs)
      return move_error(k, "split has %zu sizes for %zu outputs; give one size per output", given, outputs);
    for (i = 0; i < given; ++i) {
      if (sizes[i] < 0) return move_error(k, "split[%zu] = %lld is negative; sizes must be >= 0", i, (long long)sizes[i]);
      total += sizes[i];
    }
    if (total != dim)
      return move_error(k, "split sums to %lld, the axis has %lld; the sizes must add up to the axis",
                        (long long)total, (long long)dim);
    return NULL;
  }
  if (k->start > 0) { /* num_outputs */
    const int64_t part = (dim + k->start - 1) / k->start;
    if ((size_t)k->start != outputs)
      return move_error(k, "num_outputs=%lld but the node has %zu outputs", (long long)k->start, outputs);
    for (i = 0; i < outputs; ++i) {
      const int64_t left = dim - part * (int64_t)i;
      sizes[i] = left < 0 ? 0 : left < part ? left : part;
    }
    if (outputs && part * (int64_t)(outputs - 1) >= dim && dim > 0)
      return move_error(k, "an axis of %lld does not split into %zu parts of %lld (the last one would be empty)",
                        (long long)dim, outputs, (long long)part);
    return NULL;
  }
  if (outputs == 0 || dim % (int64_t)outputs)
    return move_error(k, "an axis of %lld does not split evenly into %zu outputs; give the sizes (input 1)",
                      (long long)dim, outputs);
  for (i = 0; i < outputs; ++i) sizes[i] = dim / (int64_t)outputs;
  return NULL;
}

static OrtStatus* split_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  size_t outputs = 0, i, j;
  int64_t axis = k->axis, sizes[SPLIT_MAX_OUTPUTS], dims[MOVE_MAX_RANK], outer = 1, inner = 1, o, at = 0;
  char* ys[SPLIT_MAX_OUTPUTS];
  char a[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "input", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetOutputCount(ctx, &outputs));
  if (outputs > SPLIT_MAX_OUTPUTS)
    return move_error(k, "%zu outputs; this C kernel takes at most %d", outputs, SPLIT_MAX_OUTPUTS);
  if (axis < 0) axis += (int64_t)x.rank;
  if (axis < 0 || axis >= (int64_t)x.rank)
    return move_error(k, "axis %lld is outside [-%zu, %zu] for the input of shape %s", (long long)k->axis, x.rank,
                      x.rank ? x.rank - 1 : 0, move_shape_str(a, sizeof a, x.dims, x.rank));
  ORT_KERNEL_RETURN_IF_ERROR(split_sizes(k, ctx, x.dims[axis], outputs, sizes));
  memcpy(dims, x.dims, x.rank * sizeof *dims);
  for (j = 0; j < x.rank; ++j) {
    if ((int64_t)j < axis) outer *= x.dims[j];
    else if ((int64_t)j > axis) inner *= x.dims[j];
  }
  for (i = 0; i < outputs; ++i) { /* every output asked for before any byte is written */
    dims[axis] = sizes[i];
    ORT_KERNEL_RETURN_IF_ERROR(move_output_at(ctx, i, dims, x.rank, &ys[i]));
  }
  for (i = 0; i < outputs; ++i) {
    const size_t block = (size_t)(sizes[i] * inner) * x.elem_size, row = (size_t)(x.dims[axis] * inner) * x.elem_size;
    if (block && ys[i] != NULL)
      for (o = 0; o < outer; ++o) memcpy(ys[i] + (size_t)o * block, x.data + (size_t)o * row + (size_t)at, block);
    at += (int64_t)block;
  }
  return NULL;
}

static OrtStatus* split_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  int has = 0;
  int64_t axis = 0, parts = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "axis", 0, &axis, &has));
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "num_outputs", 0, &parts, &has));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Split", split_compute, &k));
  if (has && parts < 1) {
    OrtStatus* st = move_error(k, "num_outputs=%lld; it must be at least 1", (long long)parts);
    k->base.Release(&k->base);
    return st;
  }
  k->axis = axis;
  k->start = parts; /* num_outputs (0: not given) */
  *out = &k->base;
  return NULL;
}

OrtStatus* move_register_split(OrtKernelRegistry* registry) {
  return move_register(registry, "Split", 13, "T", split_create); /* before 13 the sizes were an attribute */
}
