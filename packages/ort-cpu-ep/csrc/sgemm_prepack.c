/* Constant-weight pre-packing for the float32 GEMM kernels (MatMul, FusedMatMul, Gemm), ABI version 5
 * (OrtKernelImpl::DeclarePrePackedBytes / PrePackWeightInto): a constant 2-D B is packed once at initialization
 * into the micro-kernel's panels, the whole of it (sgemm_pack_b), in a buffer the host allocates from the
 * declaration and counts as the node's weights; Compute then reads the panels in place (sgemm_math.c,
 * sg_columns_pre) instead of packing a block of B per call, as onnxruntime's MLAS reads its prepacked B.
 * Packed only where the product packs B: not for a few rows (decode: B is streamed from the initializer, which
 * stays resident), nor for a batched B. The arithmetic per column is the same either way (bit-equal results).
 * The kernels set ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS: once B is packed they compute from the panels alone (a few
 * rows too, through the micro-kernel), so the host releases B when nothing else reads it (Compute's B is then
 * NULL: sg_released_b). */
#include <stdio.h>
#include <string.h>

#include "sgemm.h"
#include "sgemm_prepack.h"

size_t sgemm_packed_floats(int64_t K, int64_t N, int64_t nr) {
  return (size_t)K * (size_t)((N + nr - 1) / nr * nr);
}

void sgemm_pack_b(const float* b, int64_t K, int64_t N, int64_t ldb, int b_trans, int64_t nr, float* bp) {
  const int64_t npad = (N + nr - 1) / nr * nr;
  int64_t k0, k, q, j;
  for (k0 = 0; k0 < K; k0 += SG_KC) {
    int64_t kc = K - k0 < SG_KC ? K - k0 : SG_KC;
    float* block = bp + k0 * npad;
    for (q = 0; q * nr < N; ++q) {
      float* panel = block + q * kc * nr;
      int64_t w = N - q * nr < nr ? N - q * nr : nr;
      for (k = 0; k < kc; ++k) {
        float* dst = panel + k * nr;
        if (b_trans) {
          for (j = 0; j < w; ++j) dst[j] = b[(q * nr + j) * ldb + k0 + k];
        } else {
          memcpy(dst, b + (k0 + k) * ldb + q * nr, (size_t)w * sizeof(float));
        }
        for (j = w; j < nr; ++j) dst[j] = 0.0f;
      }
    }
  }
}

size_t sg_prepack_bytes(const OrtWorkspaceInputShape* shapes, size_t num_inputs, int input_index, int b_trans,
                        int64_t rows) {
  const OrtWorkspaceInputShape* b;
  int64_t K, N;
  if (input_index != 1 || num_inputs < 2) return 0;
  b = &shapes[1];
  if (b->state != ORT_WORKSPACE_INPUT_SHAPED || b->rank != 2 || b->dims == NULL) return 0;
  if (b->elem_type != 0 && b->elem_type != ORT_TENSOR_ELEMENT_FLOAT) return 0;
  K = b->dims[b_trans ? 1 : 0];
  N = b->dims[b_trans ? 0 : 1];
  if (K <= 0 || N <= 0) return 0;
  if (rows >= 0 && rows <= SG_SKINNY_ROWS) return 0; /* B streamed (sgemm_streams): packing would not be read */
  return sgemm_packed_floats(K, N, sgemm_panel_width()) * sizeof(float);
}

OrtStatus* sg_prepack_into(const OrtKernelApi* api, const char* op, SgPrepacked* out, const OrtValue* tensor,
                           int b_trans, void* packed, size_t packed_bytes, int* is_packed) {
  const int64_t* dims = NULL;
  size_t rank = 0;
  int32_t type = 0;
  const void* data = NULL;
  int64_t K, N, nr = sgemm_panel_width();
  *is_packed = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->Value_GetElementType(tensor, &type));
  ORT_KERNEL_RETURN_IF_ERROR(api->Value_GetShape(tensor, &dims, &rank));
  if (type != ORT_TENSOR_ELEMENT_FLOAT || rank != 2) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: pre-packing B of element type %d and rank %zu; this kernel packs a float32 matrix",
             op, (int)type, rank);
    return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  K = dims[b_trans ? 1 : 0];
  N = dims[b_trans ? 0 : 1];
  if (K <= 0 || N <= 0 || sgemm_packed_floats(K, N, nr) * sizeof(float) > packed_bytes)
    return NULL; /* the panel width changed since the declaration (a lowered ISA): packed per call instead */
  ORT_KERNEL_RETURN_IF_ERROR(api->Value_GetTensorData(tensor, &data));
  sgemm_pack_b((const float*)data, K, N, b_trans ? K : N, b_trans, nr, (float*)packed);
  out->panels = (const float*)packed;
  out->K = K;
  out->N = N;
  out->nr = nr;
  out->dims[0] = dims[0];
  out->dims[1] = dims[1];
  *is_packed = 1;
  return NULL;
}

const float* sg_prepacked(const SgPrepacked* p, int64_t K, int64_t N) {
  if (p->panels == NULL || p->K != K || p->N != N || p->nr != sgemm_panel_width()) return NULL;
  return p->panels;
}

OrtStatus* sg_released_b(const OrtKernelApi* api, const char* op, const SgPrepacked* p, const int64_t** dims,
                         size_t* rank) {
  char msg[320];
  if (p->panels != NULL && p->nr == sgemm_panel_width()) {
    *dims = p->dims;
    *rank = 2;
    return NULL;
  }
  snprintf(msg, sizeof msg, "%s: input B is missing%s; B is required (the host releases a constant B only after this "
           "kernel packed it)", op, p->panels != NULL ? " and its panels were packed at another panel width (the ISA "
           "cap changed after initialization)" : "");
  return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}
