/* Gather (any opset; the axis attribute, negative counting from the end): out[outer, i..., inner] =
 * data[outer, indices[i...], inner] for int64 or int32 indices, a negative index counting from the end. Every
 * index is checked before any byte is written: one outside [-n, n-1] is an INVALID_ARGUMENT naming the op, the
 * node, the index, its position, the data axis and its extent (the numpy kernel's IndexOutOfRangeError
 * message; both reach a session as its KernelRunError). */
#include <string.h>

#include "move.h"

#define SHAPE_TEXT 256

static int64_t gather_index(const void* indices, int wide, size_t i) {
  return wide ? ((const int64_t*)indices)[i] : (int64_t)((const int32_t*)indices)[i];
}

/* "[1, 2]": the position of flat index `flat` in an array of `dims` */
static const char* gather_position(char* buf, size_t size, size_t flat, const int64_t* dims, size_t rank) {
  int64_t pos[MOVE_MAX_RANK];
  size_t i;
  for (i = rank; i-- > 0;) {
    pos[i] = dims[i] ? (int64_t)(flat % (size_t)dims[i]) : 0;
    flat = dims[i] ? flat / (size_t)dims[i] : 0;
  }
  return move_shape_str(buf, size, pos, rank);
}

static OrtStatus* gather_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  const OrtValue* iv = NULL;
  const int64_t* idims = NULL;
  const void* indices = NULL;
  int present, wide;
  int32_t itype = 0;
  size_t irank = 0, icount = 1, rank, i, j;
  int64_t axis = k->axis, dims[MOVE_MAX_RANK], n, outer = 1, inner = 1, o;
  char* y = NULL;
  char a[SHAPE_TEXT], b[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInput(ctx, 1, &iv));
  if (iv == NULL) return move_error(k, "input 1 (indices) is missing; it is required");
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetElementType(iv, &itype));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetShape(iv, &idims, &irank));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetTensorData(iv, &indices));
  if (itype != ORT_TENSOR_ELEMENT_INT64 && itype != ORT_TENSOR_ELEMENT_INT32)
    return move_error(k, "indices have element type %d; expected int64 or int32", (int)itype);
  wide = itype == ORT_TENSOR_ELEMENT_INT64;
  if (axis < 0) axis += (int64_t)x.rank;
  if (axis < 0 || axis >= (int64_t)x.rank)
    return move_error(k, "axis %lld is outside [-%zu, %zu] for data of shape %s; set axis within the rank",
                      (long long)k->axis, x.rank, x.rank ? x.rank - 1 : 0, move_shape_str(a, sizeof a, x.dims, x.rank));
  rank = x.rank - 1 + irank;
  if (rank > MOVE_MAX_RANK)
    return move_error(k, "the output would have rank %zu (data %s, indices %s); this C kernel takes ranks up to %d",
                      rank, move_shape_str(a, sizeof a, x.dims, x.rank), move_shape_str(b, sizeof b, idims, irank),
                      MOVE_MAX_RANK);
  for (i = 0; i < irank; ++i) icount *= (size_t)idims[i];
  n = x.dims[axis];
  for (i = 0; i < icount; ++i) {
    int64_t v = gather_index(indices, wide, i);
    if (v < -n || v >= n)
      return move_error(k, "index %lld at position %s of the indices is outside the valid range [%lld, %lld] for "
                        "data axis %lld (size %lld); indices must address an existing element (negative values "
                        "count from the end)", (long long)v, gather_position(a, sizeof a, i, idims, irank),
                        (long long)-n, (long long)(n - 1), (long long)axis, (long long)n);
  }
  for (i = 0, j = 0; i < x.rank; ++i) {
    if ((int64_t)i < axis) {
      dims[j++] = x.dims[i];
      outer *= x.dims[i];
    } else if ((int64_t)i == axis) {
      memcpy(dims + j, idims, irank * sizeof *dims);
      j += irank;
    } else {
      dims[j++] = x.dims[i];
      inner *= x.dims[i];
    }
  }
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, dims, rank, &y));
  if (icount == 0 || outer == 0 || inner == 0) return NULL;
  {
    size_t row = (size_t)inner * x.elem_size;
    for (o = 0; o < outer; ++o) {
      const char* base = x.data + (size_t)(o * n) * row;
      for (i = 0; i < icount; ++i) {
        int64_t v = gather_index(indices, wide, i);
        if (v < 0) v += n;
        memcpy(y, base + (size_t)v * row, row);
        y += row;
      }
    }
  }
  return NULL;
}

static OrtStatus* gather_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  int has = 0;
  int64_t axis = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(move_api, info, "axis", axis, &axis, &has));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Gather", gather_compute, &k));
  k->axis = axis;
  *out = &k->base;
  return NULL;
}

OrtStatus* move_register_gather(OrtKernelRegistry* registry) {
  return move_register(registry, "Gather", 1, "T", gather_create);
}
