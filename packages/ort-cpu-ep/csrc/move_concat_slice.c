/* Concat (opset 4+: the axis attribute, negative counting from the end; inputs of one rank whose extents match
 * off the axis; empty inputs add nothing) and Slice (opset 10+: starts, ends, axes, steps as int64 or int32
 * inputs; negative indices count from the end, then clamp: [0, dim] for a positive step, starts [0, dim-1] and
 * ends [-1, dim-1] for a negative one; omitted axes are 0..n-1, omitted steps 1). Concat copies one block per
 * input per outer row; Slice is one strided read (move_strided_copy). */
#include <stdlib.h>
#include <string.h>

#include "move.h"

#define SHAPE_TEXT 256

#define CONCAT_STACK_INPUTS 16

/* the copy once every input is read and checked: per outer row, each input's block */
static void concat_copy(char* y, const MoveTensor* xs, size_t count, int64_t axis, int64_t outer, int64_t inner) {
  int64_t o;
  size_t i;
  for (o = 0; o < outer; ++o) {
    for (i = 0; i < count; ++i) {
      size_t block = (size_t)(xs[i].dims[axis] * inner) * xs[i].elem_size;
      if (block) memcpy(y, xs[i].data + (size_t)o * block, block);
      y += block;
    }
  }
}

static OrtStatus* concat_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor stack[CONCAT_STACK_INPUTS], *xs = stack;
  int present = 0;
  size_t inputs = 0, count = 0, i, j, rank;
  int64_t axis = k->axis, dims[MOVE_MAX_RANK], outer = 1, inner = 1;
  char* y = NULL;
  char a[SHAPE_TEXT], b[SHAPE_TEXT];
  OrtStatus* st = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInputCount(ctx, &inputs));
  if (inputs > CONCAT_STACK_INPUTS) {
    xs = (MoveTensor*)malloc(inputs * sizeof *xs);
    if (xs == NULL) return move_api->CreateStatus(ORT_FAIL, "Concat: out of memory for the inputs' descriptions");
  }
  for (i = 0; i < inputs && !st; ++i) { /* every input read and checked before any byte is written */
    st = move_input(k, ctx, i, "inputs", 0, &xs[count], &present);
    if (!st && present) ++count;
  }
  if (!st && count == 0) st = move_error(k, "no inputs; Concat needs at least one");
  if (!st) {
    rank = xs[0].rank;
    if (axis < 0) axis += (int64_t)rank;
    if (axis < 0 || axis >= (int64_t)rank)
      st = move_error(k, "axis %lld is outside [-%zu, %zu] for inputs of shape %s; set axis within the rank",
                      (long long)k->axis, rank, rank ? rank - 1 : 0, move_shape_str(a, sizeof a, xs[0].dims, rank));
  }
  if (!st) {
    memcpy(dims, xs[0].dims, rank * sizeof *dims);
    dims[axis] = 0;
    for (i = 0; i < count && !st; ++i) {
      int mismatch = xs[i].rank != rank || xs[i].elem_size != xs[0].elem_size;
      for (j = 0; j < rank && !mismatch; ++j) mismatch = (int64_t)j != axis && xs[i].dims[j] != xs[0].dims[j];
      if (mismatch)
        st = move_error(k, "input %zu has shape %s, input %zu %s; the inputs must have one rank, one element type "
                        "and the same extents except on axis %lld", xs[i].input,
                        move_shape_str(a, sizeof a, xs[i].dims, xs[i].rank), xs[0].input,
                        move_shape_str(b, sizeof b, xs[0].dims, rank), (long long)axis);
      else
        dims[axis] += xs[i].dims[axis];
    }
  }
  if (!st) {
    for (j = 0; j < rank; ++j) {
      if ((int64_t)j < axis) outer *= dims[j];
      else if ((int64_t)j > axis) inner *= dims[j];
    }
    st = move_output(ctx, dims, rank, &y);
  }
  if (!st) concat_copy(y, xs, count, axis, outer, inner);
  if (xs != stack) free(xs);
  return st;
}

/* the elements a slice of `dim` from start to end by step takes; *first: the first one's index */
static int64_t slice_count(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first) {
  uint64_t magnitude;
  *first = 0;
  if (dim == 0) return 0; /* nothing to take (the clamps below assume an element) */
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    *first = start;
    return end > start ? (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step + 1) : 0;
  }
  start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start;
  end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
  *first = start;
  magnitude = (uint64_t)0 - (uint64_t)step;
  return start > end ? (int64_t)((uint64_t)(start - end - 1) / magnitude + 1) : 0;
}

static OrtStatus* slice_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t starts[MOVE_MAX_RANK], ends[MOVE_MAX_RANK], axes[MOVE_MAX_RANK], steps[MOVE_MAX_RANK];
  int64_t first[MOVE_MAX_RANK], dims[MOVE_MAX_RANK], strides[MOVE_MAX_RANK], in_strides[MOVE_MAX_RANK];
  int64_t offset = 0, count = 1;
  size_t n = 0, ne = 0, na = 0, ns = 0, i;
  char* y = NULL;
  char a[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 1, "starts", starts, MOVE_MAX_RANK, &n));
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 2, "ends", ends, MOVE_MAX_RANK, &ne));
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 3, "axes", axes, MOVE_MAX_RANK, &na));
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 4, "steps", steps, MOVE_MAX_RANK, &ns));
  if (n == SIZE_MAX || ne == SIZE_MAX) return move_error(k, "inputs 1 (starts) and 2 (ends) are required");
  if (ne != n || (na != SIZE_MAX && na != n) || (ns != SIZE_MAX && ns != n))
    return move_error(k, "starts has %zu values, ends %zu, axes %lld, steps %lld (-1: omitted); they must have one "
                      "length", n, ne, na == SIZE_MAX ? -1LL : (long long)na, ns == SIZE_MAX ? -1LL : (long long)ns);
  for (i = 0; i < x.rank; ++i) {
    dims[i] = x.dims[i];
    first[i] = 0;
    strides[i] = 1;
  }
  for (i = x.rank; i-- > 0;) in_strides[i] = i + 1 == x.rank ? 1 : in_strides[i + 1] * x.dims[i + 1];
  for (i = 0; i < n; ++i) {
    int64_t axis = na == SIZE_MAX ? (int64_t)i : axes[i], step = ns == SIZE_MAX ? 1 : steps[i];
    if (axis < 0) axis += (int64_t)x.rank;
    if (axis < 0 || axis >= (int64_t)x.rank)
      return move_error(k, "axes[%zu] = %lld is outside [-%zu, %zu] for the input of shape %s", i,
                        (long long)(na == SIZE_MAX ? (int64_t)i : axes[i]), x.rank, x.rank ? x.rank - 1 : 0,
                        move_shape_str(a, sizeof a, x.dims, x.rank));
    if (step == 0) return move_error(k, "steps[%zu] is 0; a step must be nonzero", i);
    dims[axis] = slice_count(x.dims[axis], starts[i], ends[i], step, &first[axis]);
    strides[axis] = step;
  }
  for (i = 0; i < x.rank; ++i) {
    offset += first[i] * in_strides[i];
    strides[i] = (int64_t)((uint64_t)strides[i] * (uint64_t)in_strides[i]); /* wraps only where the extent is 1 */
    count *= dims[i];
  }
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, dims, x.rank, &y));
  if (count) move_strided_copy(y, x.data + offset * (int64_t)x.elem_size, x.elem_size, x.rank, dims, strides);
  return NULL;
}

static OrtStatus* concat_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  int has = 0;
  int64_t axis = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "axis", axis, &axis, &has));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Concat", concat_compute, &k));
  if (!has) { /* the provider declines such a node (Concat-4+ requires axis); called directly, say so */
    OrtStatus* st = move_error(k, "no axis attribute; Concat needs one from opset 4");
    k->base.Release(&k->base);
    return st;
  }
  k->axis = axis;
  *out = &k->base;
  return NULL;
}

static OrtStatus* slice_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Slice", slice_compute, &k));
  *out = &k->base;
  return NULL;
}

OrtStatus* move_register_concat_slice(OrtKernelRegistry* registry) {
  OrtStatus* st = move_register(registry, "Concat", 4, "T", concat_create);
  if (!st) st = move_register(registry, "Slice", 10, "T", slice_create); /* attributes before 10 */
  return st;
}
