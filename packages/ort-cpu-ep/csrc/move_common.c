/* What the data-movement kernels share (see move.h): element sizes, inputs, index tensors, errors, the strided
 * copy, kernel objects and registration. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "move.h"

const OrtKernelApi* move_api = NULL;

/* every fixed-size numeric type and bool */
static const int32_t move_types[] = {
    ORT_TENSOR_ELEMENT_FLOAT,  ORT_TENSOR_ELEMENT_UINT8,   ORT_TENSOR_ELEMENT_INT8,   ORT_TENSOR_ELEMENT_UINT16,
    ORT_TENSOR_ELEMENT_INT16,  ORT_TENSOR_ELEMENT_INT32,   ORT_TENSOR_ELEMENT_INT64,  ORT_TENSOR_ELEMENT_BOOL,
    ORT_TENSOR_ELEMENT_FLOAT16, ORT_TENSOR_ELEMENT_DOUBLE, ORT_TENSOR_ELEMENT_UINT32, ORT_TENSOR_ELEMENT_UINT64,
    ORT_TENSOR_ELEMENT_BFLOAT16};

size_t move_elem_size(int32_t type) {
  switch (type) {
    case ORT_TENSOR_ELEMENT_UINT8: case ORT_TENSOR_ELEMENT_INT8: case ORT_TENSOR_ELEMENT_BOOL: return 1;
    case ORT_TENSOR_ELEMENT_UINT16: case ORT_TENSOR_ELEMENT_INT16: case ORT_TENSOR_ELEMENT_FLOAT16:
    case ORT_TENSOR_ELEMENT_BFLOAT16: return 2;
    case ORT_TENSOR_ELEMENT_FLOAT: case ORT_TENSOR_ELEMENT_INT32: case ORT_TENSOR_ELEMENT_UINT32: return 4;
    case ORT_TENSOR_ELEMENT_INT64: case ORT_TENSOR_ELEMENT_DOUBLE: case ORT_TENSOR_ELEMENT_UINT64: return 8;
    default: return 0;
  }
}

OrtStatus* move_error(const MoveKernel* k, const char* fmt, ...) {
  char msg[1024];
  int n = snprintf(msg, sizeof msg, "%s node '%s': ", k->op, k->node);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  return move_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

const char* move_shape_str(char* buf, size_t size, const int64_t* dims, size_t rank) {
  size_t used = 0, i;
  buf[0] = '\0';
  for (i = 0; i <= rank && used < size; ++i) {
    int n = i == rank ? snprintf(buf + used, size - used, "]")
                      : snprintf(buf + used, size - used, "%s%lld", i ? ", " : "[", (long long)dims[i]);
    if (n < 0 || (size_t)n >= size - used) {
      if (size >= 4) memcpy(buf + size - 4, "...", 4);
      return buf;
    }
    used += (size_t)n;
  }
  if (rank == 0 && size >= 3) memcpy(buf, "[]", 3);
  return buf;
}

OrtStatus* move_input(const MoveKernel* k, OrtKernelContext* ctx, size_t index, const char* what, int required,
                      MoveTensor* t, int* present) {
  const OrtValue* v = NULL;
  int32_t type = 0;
  const void* data = NULL;
  size_t i;
  memset(t, 0, sizeof *t);
  t->input = index;
  *present = 0;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return required ? move_error(k, "input %zu (%s) is missing; it is required", index, what) : NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetElementType(v, &type));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetShape(v, &t->dims, &t->rank));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetTensorData(v, &data));
  t->elem_size = move_elem_size(type);
  if (t->elem_size == 0)
    return move_error(k, "input %zu (%s) has element type %d; this C kernel moves fixed-size numeric and bool "
                      "elements only", index, what, (int)type);
  if (t->rank > MOVE_MAX_RANK)
    return move_error(k, "input %zu (%s) has rank %zu; this C kernel takes ranks up to %d", index, what, t->rank,
                      MOVE_MAX_RANK);
  for (t->count = 1, i = 0; i < t->rank; ++i) t->count *= (size_t)t->dims[i];
  t->data = (const char*)data;
  *present = 1;
  return NULL;
}

OrtStatus* move_ints(const MoveKernel* k, OrtKernelContext* ctx, size_t index, const char* what, int64_t* out,
                     size_t max, size_t* count) {
  const OrtValue* v = NULL;
  int32_t type = 0;
  const int64_t* dims = NULL;
  const void* data = NULL;
  size_t rank = 0, n = 1, i, inputs = 0;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInputCount(ctx, &inputs));
  if (index < inputs) ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) {
    *count = SIZE_MAX;
    return NULL;
  }
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetElementType(v, &type));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetShape(v, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetTensorData(v, &data));
  if (type != ORT_TENSOR_ELEMENT_INT64 && type != ORT_TENSOR_ELEMENT_INT32)
    return move_error(k, "input %zu (%s) has element type %d; expected int64 or int32", index, what, (int)type);
  for (i = 0; i < rank; ++i) n *= (size_t)dims[i]; /* a 1-D tensor; a scalar or any shape reads as its values */
  if (n > max) return move_error(k, "input %zu (%s) has %zu values; at most %zu are possible here", index, what, n, max);
  for (i = 0; i < n; ++i)
    out[i] = type == ORT_TENSOR_ELEMENT_INT64 ? ((const int64_t*)data)[i] : (int64_t)((const int32_t*)data)[i];
  *count = n;
  return NULL;
}

OrtStatus* move_output_at(OrtKernelContext* ctx, size_t index, const int64_t* dims, size_t rank, char** data) {
  OrtValue* v = NULL;
  void* p = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelContext_GetOutput(ctx, index, dims, rank, &v));
  if (v != NULL) ORT_KERNEL_RETURN_IF_ERROR(move_api->Value_GetTensorMutableData(v, &p));
  *data = (char*)p;
  return NULL;
}

OrtStatus* move_output(OrtKernelContext* ctx, const int64_t* dims, size_t rank, char** data) {
  return move_output_at(ctx, 0, dims, rank, data);
}

/* the innermost axis: n elements `stride` apart (stride != 1) into dense out */
static void move_strided_row(char* out, const char* in, size_t elem_size, int64_t n, int64_t stride) {
  int64_t i;
  switch (elem_size) {
    case 1: for (i = 0; i < n; ++i) out[i] = in[i * stride]; break;
    case 2: for (i = 0; i < n; ++i) memcpy(out + 2 * i, in + 2 * i * stride, 2); break;
    case 4: for (i = 0; i < n; ++i) memcpy(out + 4 * i, in + 4 * i * stride, 4); break;
    case 8: for (i = 0; i < n; ++i) memcpy(out + 8 * i, in + 8 * i * stride, 8); break;
    default: for (i = 0; i < n; ++i) memcpy(out + elem_size * (size_t)i, in + (int64_t)elem_size * i * stride, elem_size);
  }
}

#define MOVE_TILE 8 /* elements per side of a transposed tile (8 measured best of 8, 16, 32) */

/* out[i * out_stride + j] = in[i + j * in_stride] for i < rows, j < cols, in tiles: the input read along i, the
 * output written along j, neither beyond L1 */
#define MOVE_TILED(type)                                                                        \
  do {                                                                                          \
    const type* src = (const type*)in;                                                          \
    type* dst = (type*)out;                                                                     \
    for (i0 = 0; i0 < rows; i0 += MOVE_TILE)                                                    \
      for (j0 = 0; j0 < cols; j0 += MOVE_TILE) {                                                \
        int64_t i1 = i0 + MOVE_TILE < rows ? i0 + MOVE_TILE : rows;                             \
        int64_t j1 = j0 + MOVE_TILE < cols ? j0 + MOVE_TILE : cols;                             \
        for (i = i0; i < i1; ++i)                                                               \
          for (j = j0; j < j1; ++j) memcpy(dst + i * out_stride + j, src + i + j * in_stride, sizeof(type)); \
      }                                                                                         \
  } while (0)

static void move_tiled(char* out, const char* in, size_t elem_size, int64_t rows, int64_t cols, int64_t out_stride,
                       int64_t in_stride) {
  int64_t i0, j0, i, j;
  switch (elem_size) {
    case 1: MOVE_TILED(uint8_t); break;
    case 2: MOVE_TILED(uint16_t); break;
    case 4: MOVE_TILED(uint32_t); break;
    default: MOVE_TILED(uint64_t); break;
  }
}

void move_strided_copy(char* out, const char* in, size_t elem_size, size_t rank, const int64_t* dims,
                       const int64_t* strides) {
  int64_t d[MOVE_MAX_RANK], s[MOVE_MAX_RANK], os[MOVE_MAX_RANK], idx[MOVE_MAX_RANK];
  size_t n = 0, i, tile = SIZE_MAX;
  int64_t inner, inner_stride, rows = 1, r;
  for (i = 0; i < rank; ++i) {
    if (dims[i] == 0) return;
    if (dims[i] == 1) continue;
    if (n > 0 && s[n - 1] == strides[i] * dims[i]) { /* contiguous with the axis before: one axis */
      d[n - 1] *= dims[i];
      s[n - 1] = strides[i];
      continue;
    }
    d[n] = dims[i];
    s[n] = strides[i];
    ++n;
  }
  if (n == 0) {
    memcpy(out, in, elem_size);
    return;
  }
  inner = d[n - 1];
  inner_stride = s[n - 1];
  for (i = n; i-- > 0;) os[i] = i + 1 == n ? 1 : os[i + 1] * d[i + 1];
  if (inner_stride != 1 && (elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8))
    for (i = 0; i + 1 < n; ++i)
      if (s[i] == 1) tile = i; /* an outer axis read contiguously: tiles of it and the innermost */
  memset(idx, 0, sizeof idx);
  if (tile != SIZE_MAX) { /* a transpose of two axes, once per index of the others */
    for (i = 0; i + 1 < n; ++i)
      if (i != tile) rows *= d[i];
    for (r = 0; r < rows; ++r) {
      int64_t in_off = 0, out_off = 0;
      size_t j;
      for (j = 0; j + 1 < n; ++j)
        if (j != tile) {
          in_off += idx[j] * s[j];
          out_off += idx[j] * os[j];
        }
      move_tiled(out + out_off * (int64_t)elem_size, in + in_off * (int64_t)elem_size, elem_size, d[tile], inner,
                 os[tile], inner_stride);
      for (j = n - 1; j-- > 0;) { /* the odometer over the other outer axes */
        if (j == tile) continue;
        if (++idx[j] < d[j]) break;
        idx[j] = 0;
      }
    }
    return;
  }
  for (i = 0; i + 1 < n; ++i) rows *= d[i];
  for (r = 0; r < rows; ++r) {
    int64_t offset = 0;
    size_t j;
    for (j = 0; j + 1 < n; ++j) offset += idx[j] * s[j];
    if (inner_stride == 1)
      memcpy(out, in + offset * (int64_t)elem_size, (size_t)inner * elem_size);
    else
      move_strided_row(out, in + offset * (int64_t)elem_size, elem_size, inner, inner_stride);
    out += (size_t)inner * elem_size;
    for (j = n - 1; j-- > 0;) { /* the odometer over the outer axes */
      if (++idx[j] < d[j]) break;
      idx[j] = 0;
    }
  }
}

OrtStatus* move_new(const OrtKernelInfo* info, const char* op, CpuKernelCompute compute, MoveKernel** out) {
  const char* name = NULL;
  OrtStatus* st;
  MoveKernel* k = (MoveKernel*)cpu_kernels_new(sizeof *k, compute, cpu_kernels_declare_none);
  if (k == NULL) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s: out of memory creating the kernel", op);
    return move_api->CreateStatus(ORT_FAIL, msg);
  }
  k->op = op;
  st = move_api->KernelInfo_GetNodeName(info, &name);
  if (st != NULL)
    move_api->ReleaseStatus(st); /* no name: the messages say '' */
  else if (name != NULL)
    snprintf(k->node, sizeof k->node, "%s", name);
  *out = k;
  return NULL;
}

OrtStatus* move_register(OrtKernelRegistry* registry, const char* op, int since, const char* constraint,
                         OrtKernelCreateFunc create) {
  return cpu_kernels_add_onnx_types(move_api, registry, op, since, constraint, move_types,
                                    (int)(sizeof move_types / sizeof move_types[0]), create, cpu_kernels_estimate_none);
}

OrtStatus* move_register_until(OrtKernelRegistry* registry, const char* op, int since, int end, const char* constraint,
                               OrtKernelCreateFunc create) {
  return cpu_kernels_add_onnx_types_until(move_api, registry, op, since, end, constraint, move_types,
                                          (int)(sizeof move_types / sizeof move_types[0]), create,
                                          cpu_kernels_estimate_none);
}

OrtStatus* ort_cpu_ep_register_movement(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st;
  move_api = api;
  st = move_register_reshapes(registry);
  if (!st) st = move_register_transpose(registry);
  if (!st) st = move_register_concat_slice(registry);
  if (!st) st = move_register_gather(registry);
  if (!st) st = move_register_shape(registry);
  if (!st) st = move_register_split(registry);
  return st;
}
