/* Reshape (opset 5+, allowzero from 14), Identity, Flatten, Squeeze and Unsqueeze (13+ axes as an input, before it
 * the axes attribute):
 * a new shape over the same bytes. The memory plan may give the output the input's block (ort-memplan's
 * ALIAS_INPLACE): then nothing moves, else one memcpy. The shape rules are the numpy kernels'
 * (ops/ops_shape.py): a shape they refuse is an INVALID_ARGUMENT naming the op, the node and both shapes. */
#include <string.h>

#include "move.h"

#define SHAPE_TEXT 256

/* the output's bytes: the input's, unless the plan put both in one block */
static OrtStatus* move_same_bytes(OrtKernelContext* ctx, const MoveTensor* x, const int64_t* dims, size_t rank) {
  char* y = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, dims, rank, &y));
  if (y != x->data && x->count) memcpy(y, x->data, x->count * x->elem_size);
  return NULL;
}

static OrtStatus* reshape_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t shape[MOVE_MAX_RANK], dims[MOVE_MAX_RANK], known = 1;
  size_t n = 0, i, unknown = SIZE_MAX;
  int bad = 0;
  char a[SHAPE_TEXT], b[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_ints(k, ctx, 1, "shape", shape, MOVE_MAX_RANK, &n));
  if (n == SIZE_MAX) return move_error(k, "input 1 (shape) is missing; it is required");
  for (i = 0; i < n && !bad; ++i) {
    dims[i] = shape[i];
    if (shape[i] == 0 && !k->allowzero) {
      if (i >= x.rank) bad = 1; /* 0 copies an extent the input does not have */
      else dims[i] = x.dims[i];
    }
    if (dims[i] == -1) {
      if (unknown != SIZE_MAX) bad = 1; /* a second -1 */
      unknown = i;
    } else if (dims[i] < 0 || __builtin_mul_overflow(known, dims[i], &known)) {
      bad = 1;
    }
  }
  if (!bad && unknown != SIZE_MAX) {
    if (known == 0 || (int64_t)x.count % known) bad = 1; /* numpy cannot infer -1 next to a 0 extent */
    else dims[unknown] = (int64_t)x.count / known;
  } else if (!bad && known != (int64_t)x.count) {
    bad = 1;
  }
  if (bad)
    return move_error(k, "cannot reshape the input of shape %s (%zu elements) to the requested shape %s%s; "
                      "the requested extents must multiply to the input's element count (one -1 is inferred, "
                      "0 copies the input's extent unless allowzero=1)",
                      move_shape_str(a, sizeof a, x.dims, x.rank), x.count, move_shape_str(b, sizeof b, shape, n),
                      k->allowzero ? " with allowzero=1" : "");
  return move_same_bytes(ctx, &x, dims, n);
}

static OrtStatus* identity_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "input", 1, &x, &present));
  return move_same_bytes(ctx, &x, x.dims, x.rank);
}

static OrtStatus* flatten_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t axis = k->axis, dims[2] = {1, 1};
  size_t i;
  char a[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "input", 1, &x, &present));
  if (axis < 0) axis += (int64_t)x.rank;
  if (axis < 0 || axis > (int64_t)x.rank)
    return move_error(k, "axis %lld is outside [-%zu, %zu] for the input of shape %s; set axis within the rank",
                      (long long)k->axis, x.rank, x.rank, move_shape_str(a, sizeof a, x.dims, x.rank));
  for (i = 0; i < x.rank; ++i) dims[(int64_t)i < axis ? 0 : 1] *= x.dims[i];
  return move_same_bytes(ctx, &x, dims, 2);
}

/* axes[0..n) normalized against `rank` into marks[0..rank) (1 per named axis); an error names what is wrong */
static OrtStatus* mark_axes(const MoveKernel* k, const int64_t* axes, size_t n, size_t rank, const MoveTensor* x,
                            unsigned char* marks) {
  size_t i;
  char a[SHAPE_TEXT];
  memset(marks, 0, MOVE_MAX_RANK);
  for (i = 0; i < n; ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + (int64_t)rank : axes[i];
    if (axis < 0 || axis >= (int64_t)rank)
      return move_error(k, "axis %lld is outside [-%zu, %zu] (input shape %s); axes must name existing axes",
                        (long long)axes[i], rank, rank ? rank - 1 : 0, move_shape_str(a, sizeof a, x->dims, x->rank));
    if (marks[axis])
      return move_error(k, "axis %lld is repeated in axes (input shape %s); name each axis once",
                        (long long)axes[i], move_shape_str(a, sizeof a, x->dims, x->rank));
    marks[axis] = 1;
  }
  return NULL;
}

/* Squeeze / Unsqueeze's axes: the attribute before opset 13, else input 1 (*n = SIZE_MAX: none) */
static OrtStatus* move_axes(const MoveKernel* k, OrtKernelContext* ctx, int64_t* axes, size_t* n) {
  if (!k->axes_attr) return move_ints(k, ctx, 1, "axes", axes, MOVE_MAX_RANK, n);
  *n = k->n_axes;
  if (*n != SIZE_MAX) memcpy(axes, k->axes, *n * sizeof *axes);
  return NULL;
}

static OrtStatus* squeeze_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t axes[MOVE_MAX_RANK], dims[MOVE_MAX_RANK];
  unsigned char marks[MOVE_MAX_RANK];
  size_t n = 0, i, rank = 0;
  char a[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_axes(k, ctx, axes, &n));
  if (n == SIZE_MAX) { /* no axes: every extent of 1 goes */
    for (i = 0; i < x.rank; ++i) marks[i] = x.dims[i] == 1;
  } else {
    ORT_KERNEL_RETURN_IF_ERROR(mark_axes(k, axes, n, x.rank, &x, marks));
  }
  for (i = 0; i < x.rank; ++i) {
    if (!marks[i]) {
      dims[rank++] = x.dims[i];
    } else if (x.dims[i] != 1) {
      return move_error(k, "axis %zu of the input of shape %s has extent %lld; only extents of 1 can be squeezed",
                        i, move_shape_str(a, sizeof a, x.dims, x.rank), (long long)x.dims[i]);
    }
  }
  return move_same_bytes(ctx, &x, dims, rank);
}

static OrtStatus* unsqueeze_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t axes[MOVE_MAX_RANK], dims[MOVE_MAX_RANK];
  unsigned char marks[MOVE_MAX_RANK];
  size_t n = 0, i, j = 0, rank;
  char a[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_axes(k, ctx, axes, &n));
  if (n == SIZE_MAX) return move_error(k, "axes (input 1, or the attribute before opset 13) is missing; it is required");
  rank = x.rank + n;
  if (rank > MOVE_MAX_RANK)
    return move_error(k, "the output would have rank %zu (input shape %s, %zu axes); this C kernel takes ranks up "
                      "to %d", rank, move_shape_str(a, sizeof a, x.dims, x.rank), n, MOVE_MAX_RANK);
  ORT_KERNEL_RETURN_IF_ERROR(mark_axes(k, axes, n, rank, &x, marks));
  for (i = 0; i < rank; ++i) dims[i] = marks[i] ? 1 : x.dims[j++];
  return move_same_bytes(ctx, &x, dims, rank);
}

static OrtStatus* reshape_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  int64_t allowzero = 0;
  int has = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "allowzero", allowzero, &allowzero, &has));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Reshape", reshape_compute, &k));
  k->allowzero = allowzero != 0;
  *out = &k->base;
  return NULL;
}

static OrtStatus* flatten_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  int64_t axis = 1;
  int has = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "axis", axis, &axis, &has));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Flatten", flatten_compute, &k));
  k->axis = axis;
  *out = &k->base;
  return NULL;
}

#define MOVE_PLAIN_CREATE(name, op, compute)                                                  \
  static OrtStatus* name(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {      \
    MoveKernel* k;                                                                           \
    (void)state;                                                                             \
    ORT_KERNEL_RETURN_IF_ERROR(move_new(info, op, compute, &k));                              \
    *out = &k->base;                                                                         \
    return NULL;                                                                             \
  }
MOVE_PLAIN_CREATE(identity_create, "Identity", identity_compute)
MOVE_PLAIN_CREATE(squeeze_create, "Squeeze", squeeze_compute)
MOVE_PLAIN_CREATE(unsqueeze_create, "Unsqueeze", unsqueeze_compute)

/* Squeeze / Unsqueeze before opset 13: the axes attribute kept in the kernel */
static OrtStatus* axes_attr_create(const OrtKernelInfo* info, const char* op, CpuKernelCompute compute,
                                   OrtKernelImpl** out) {
  MoveKernel* k;
  const int64_t* axes = NULL;
  size_t n = 0;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelInfo_GetAttributeInts(info, "axes", &axes, &n));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, op, compute, &k));
  if (axes != NULL && n > MOVE_MAX_RANK) {
    OrtStatus* st = move_error(k, "%zu axes; this C kernel takes up to %d", n, MOVE_MAX_RANK);
    k->base.Release(&k->base);
    return st;
  }
  k->axes_attr = 1;
  k->n_axes = axes != NULL ? n : SIZE_MAX;
  if (axes != NULL) memcpy(k->axes, axes, n * sizeof *axes);
  *out = &k->base;
  return NULL;
}

static OrtStatus* squeeze_v1_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return axes_attr_create(info, "Squeeze", squeeze_compute, out);
}

static OrtStatus* unsqueeze_v1_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return axes_attr_create(info, "Unsqueeze", unsqueeze_compute, out);
}

OrtStatus* move_register_reshapes(OrtKernelRegistry* registry) {
  OrtStatus* st = move_register(registry, "Reshape", 5, "T", reshape_create);
  if (!st) st = move_register(registry, "Identity", 14, "V", identity_create); /* "T" before 14 */
  if (!st) st = move_register_until(registry, "Identity", 1, 13, "T", identity_create);
  if (!st) st = move_register(registry, "Flatten", 1, "T", flatten_create);
  if (!st) st = move_register(registry, "Squeeze", 13, "T", squeeze_create); /* axes an attribute before 13 */
  if (!st) st = move_register(registry, "Unsqueeze", 13, "T", unsqueeze_create);
  if (!st) st = move_register_until(registry, "Squeeze", 1, 12, "T", squeeze_v1_create);
  if (!st) st = move_register_until(registry, "Unsqueeze", 1, 12, "T", unsqueeze_v1_create);
  return st;
}
