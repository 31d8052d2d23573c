/* What the data-movement kernels share (move_common.c): the element types they take (every fixed-size
 * numeric type and bool: they move bytes, never read values), reading inputs and int32/int64 index tensors,
 * errors that name the op and show shapes, and one strided copy (Transpose and Slice gather through it).
 * The kernels: Reshape, Identity, Flatten, Squeeze, Unsqueeze (move_reshape.c), Transpose
 * (move_transpose.c), Concat and Slice (move_concat_slice.c), Gather (move_gather.c), Shape
 * (move_shape.c), Split (move_split.c). None needs workspace. */
#ifndef ORT_CPU_EP_MOVE_H_
#define ORT_CPU_EP_MOVE_H_

#include <stddef.h>
#include <stdint.h>

#include "cpu_kernels.h"

#define MOVE_MAX_RANK 16
#define MOVE_NAME_MAX 96 /* the node name kept for messages (longer names are cut) */

extern const OrtKernelApi* move_api; /* set by ort_cpu_ep_register_movement */

/* a data-movement kernel: its attributes (which ones depends on the op) */
typedef struct MoveKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  const char* op;
  char node[MOVE_NAME_MAX];
  int64_t axis;
  int allowzero;
  size_t perm_rank; /* Transpose: entries of perm (0: no perm attribute, the axes reversed) */
  int64_t perm[MOVE_MAX_RANK];
  int axes_attr;    /* Squeeze / Unsqueeze before opset 13: axes is the attribute below, not input 1 */
  size_t n_axes;    /* its entries (SIZE_MAX: no attribute) */
  int64_t axes[MOVE_MAX_RANK];
  int64_t start, end; /* Shape: the dims [start, end) given (end: INT64_MAX when the attribute is absent) */
} MoveKernel;

/* one input tensor as the kernels see it */
typedef struct MoveTensor {
  const char* data;
  const int64_t* dims;
  size_t rank;
  size_t elem_size;
  size_t count; /* elements */
  size_t input; /* its index among the node's inputs */
} MoveTensor;

/* bytes per element of an element type the kernels take; 0 for any other (string, sub-byte types) */
size_t move_elem_size(int32_t type);

/* an INVALID_ARGUMENT status, "<op>: " followed by the formatted message */
OrtStatus* move_error(const MoveKernel* k, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* "[2, 3, 4]" into buf (cut with "..." when it does not fit) */
const char* move_shape_str(char* buf, size_t size, const int64_t* dims, size_t rank);

/* input `index` (what: its name for messages); *present = 0 (and an error when required) for an omitted one */
OrtStatus* move_input(const MoveKernel* k, OrtKernelContext* ctx, size_t index, const char* what, int required,
                      MoveTensor* t, int* present);

/* a 1-D (or scalar) int32/int64 tensor at input `index` into out[0..*count), at most `max` values;
 * *count = SIZE_MAX for an omitted input */
OrtStatus* move_ints(const MoveKernel* k, OrtKernelContext* ctx, size_t index, const char* what, int64_t* out,
                     size_t max, size_t* count);

/* the output of `rank` dims and its data; move_output_at: output `index` (*data NULL for an omitted output) */
OrtStatus* move_output(OrtKernelContext* ctx, const int64_t* dims, size_t rank, char** data);
OrtStatus* move_output_at(OrtKernelContext* ctx, size_t index, const int64_t* dims, size_t rank, char** data);

/* out (dense, the dims' order) = in[base + sum_j i_j * strides[j]] for every index i < dims (strides in
 * elements, any sign); axes of extent 1 are dropped and axes contiguous in the input merged first, the
 * innermost copied with memcpy when its stride is 1 */
void move_strided_copy(char* out, const char* in, size_t elem_size, size_t rank, const int64_t* dims,
                       const int64_t* strides);

/* a kernel object for op `op` with Compute `compute` (no workspace); the node name kept for messages */
OrtStatus* move_new(const OrtKernelInfo* info, const char* op, CpuKernelCompute compute, MoveKernel** out);

/* registers `op` since `since` for every element type the kernels take, bound to the schema's `constraint`;
 * move_register_until: for opsets [since, end] only */
OrtStatus* move_register(OrtKernelRegistry* registry, const char* op, int since, const char* constraint,
                         OrtKernelCreateFunc create);
OrtStatus* move_register_until(OrtKernelRegistry* registry, const char* op, int since, int end, const char* constraint,
                               OrtKernelCreateFunc create);

OrtStatus* move_register_reshapes(OrtKernelRegistry* registry);
OrtStatus* move_register_transpose(OrtKernelRegistry* registry);
OrtStatus* move_register_concat_slice(OrtKernelRegistry* registry);
OrtStatus* move_register_gather(OrtKernelRegistry* registry);
OrtStatus* move_register_shape(OrtKernelRegistry* registry);
OrtStatus* move_register_split(OrtKernelRegistry* registry);

#endif
