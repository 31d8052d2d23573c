/*
 * scribble.c -- com.example::Scribble (float32, y = x + 1, same shape, with an output-shape callback so
 * the plan is static), a kernel that misbehaves once when the test arms it through `scribble_arm`:
 *   mode 1: flips `length` bytes at byte `offset` from the start of its output (negative: before it),
 *           then computes y (so bytes inside y end up right, bytes outside stay flipped);
 *   mode 2: computes y, then flips `length` bytes at byte `offset` from the start of its const input;
 *   mode 3: returns success without asking for its output;
 *   mode 4: asks for its output with dimension 0 = `offset` (negative: a shape bug), returning what the host says.
 * Mode 0 (and every call after an armed one) is the clean kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

static const OrtKernelApi* g_api = NULL;
static int g_mode = 0;
static int64_t g_offset = 0, g_length = 0;

/* Arm one misbehaving compute (the next one); mode 0 disarms. */
ORT_KERNEL_EXPORT void scribble_arm(int mode, int64_t offset, int64_t length) {
  g_mode = mode;
  g_offset = offset;
  g_length = length;
}

static void flip(unsigned char* base, int64_t offset, int64_t length) {
  for (int64_t i = 0; i < length; ++i) base[offset + i] ^= 0xFF;
}

static void release(OrtKernelImpl* k) { free(k); }

static OrtStatus* compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const OrtValue* x = NULL;
  OrtValue* y = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, count = 0;
  const float* in = NULL;
  float* out = NULL;
  int mode = g_mode;
  (void)this_ptr;
  g_mode = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(x, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementCount(x, &count));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(x, (const void**)&in));
  if (mode == 3) return NULL; /* the bug: success, no output */
  if (mode == 4 && rank >= 1 && rank <= 8) { /* the bug: a negative output dimension */
    int64_t bad[8];
    memcpy(bad, dims, rank * sizeof *bad);
    bad[0] = g_offset;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, bad, rank, &y));
    return g_api->CreateStatus(ORT_FAIL, "Scribble: the host served an output with a negative dimension");
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  if (mode == 1) flip((unsigned char*)out, g_offset, g_length);
  for (size_t i = 0; i < count; ++i) out[i] = in[i] + 1.0f;
  if (mode == 2) flip((unsigned char*)(uintptr_t)in, g_offset, g_length); /* the bug: writes its const input */
  return NULL;
}

static OrtStatus* create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  OrtKernelImpl* k = (OrtKernelImpl*)calloc(1, sizeof *k);
  (void)state;
  (void)info;
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "out of memory");
  k->ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->Compute = compute;
  k->Release = release;
  *out = k;
  return NULL;
}

static OrtStatus* same_shape(const OrtKernelApi* api, const OrtNode* node, const OrtWorkspaceInputShape* in,
                             size_t num_inputs, OrtOutputShape* out, size_t num_outputs) {
  (void)node;
  if (num_inputs < 1 || num_outputs < 1) return api->CreateStatus(ORT_INVALID_ARGUMENT, "Scribble: 1 input, 1 output");
  if (in[0].state != ORT_WORKSPACE_INPUT_SHAPED || in[0].rank > ORT_OUTPUT_SHAPE_MAX_RANK) return NULL;
  out[0].state = ORT_WORKSPACE_INPUT_SHAPED;
  out[0].elem_type = in[0].elem_type;
  out[0].rank = in[0].rank;
  for (size_t i = 0; i < in[0].rank; ++i) out[0].dims[i] = in[0].dims[i];
  return NULL;
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t float_only[] = {ORT_TENSOR_ELEMENT_FLOAT};
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st;
  g_api = api;
  if (api->version < ORT_KERNEL_ABI_VERSION_OUTPUT_SHAPES)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "scribble needs a host with KernelRegistry_AddKernelV3");
  st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, "Scribble");
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "com.example");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, "CPUExecutionProvider");
  if (!st) st = api->KernelDefBuilder_AddTypeConstraint(b, "T", float_only, 1);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV3(registry, def, create, NULL, NULL, same_shape);
  if (def) api->ReleaseKernelDef(def);
  return st;
}
