/* Constant-weight pre-packing of the float32 GEMM kernels' B (sgemm_prepack.c), shared by MatMul, FusedMatMul
 * (sgemm_kernel.c) and Gemm (gemm_kernel.c). */
#ifndef ORT_CPU_EP_SGEMM_PREPACK_H_
#define ORT_CPU_EP_SGEMM_PREPACK_H_

#include "ort_kernel_abi.h"

/* B packed at initialization: the host's buffer, B's K and N, and the panel width it was packed at */
typedef struct SgPrepacked {
  const float* panels;
  int64_t K, N, nr;
  int64_t dims[2]; /* B's shape as stored (N x K for a transposed B): Compute's B once the host released it */
  int declared;    /* DeclarePrePackedBytes declared B packed: no per-call packing workspace is declared */
} SgPrepacked;

/* OrtKernelImpl::flags of the kernels that read B only from its panels once packed: the host may release B */
#define SG_PREPACK_FLAGS ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS

/* bytes to declare for constant input `input_index` (only B, index 1, a float32 matrix of known extents, is
 * packed); rows: A's rows per product, -1 unknown (a few rows stream B: nothing packed) */
size_t sg_prepack_bytes(const OrtWorkspaceInputShape* shapes, size_t num_inputs, int input_index, int b_trans,
                        int64_t rows);
/* packs B (`tensor`) into the host's buffer; *is_packed 0 when the buffer no longer fits (the panel width changed) */
OrtStatus* sg_prepack_into(const OrtKernelApi* api, const char* op, SgPrepacked* out, const OrtValue* tensor,
                           int b_trans, void* packed, size_t packed_bytes, int* is_packed);
/* the panels for a product with this K and N at the current panel width, or NULL (pack per call) */
const float* sg_prepacked(const SgPrepacked* p, int64_t K, int64_t N);
/* Compute's B input when the host released it (bv NULL): B's stored shape from the packing (rank 2), or an error
 * status when nothing was packed or the panel width changed since (the panels could not be read) */
OrtStatus* sg_released_b(const OrtKernelApi* api, const char* op, const SgPrepacked* p, const int64_t** dims,
                         size_t* rank);

#endif
