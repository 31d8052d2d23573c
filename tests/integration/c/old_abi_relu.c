/*
 * old_abi_relu.c -- Relu and Neg (opset 6+, float32) whose kernels speak ABI version 1: their
 * struct ends before DeclareWorkspaceRequirements, so they declare no workspace, and Compute takes
 * a 64-byte scratch buffer (GetScratchBuffer) as kernels of that ABI did. Relu returns the status
 * when the host refuses the buffer; Neg ignores it and carries on (a kernel that drops errors).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

static const OrtKernelApi* g_api = NULL;

typedef struct V1Kernel { /* the version-1 layout of OrtKernelImpl, then this library's own fields */
  uint32_t ort_version_supported;
  uint32_t flags;
  OrtStatus* (*Compute)(OrtKernelImpl*, OrtKernelContext*);
  void (*Release)(OrtKernelImpl*);
  OrtStatus* (*PrePackWeight)(OrtKernelImpl*, const OrtValue*, int, int*);
  int negate; /* Neg: y = -x and the scratch status is ignored; Relu: y = max(x, 0) */
} V1Kernel;

static void release(OrtKernelImpl* k) { free(k); }

static OrtStatus* v1_compute(OrtKernelImpl* k, OrtKernelContext* ctx) {
  const OrtValue* x;
  OrtValue* y;
  const float* in;
  float* out;
  const int64_t* dims;
  size_t rank, n, i;
  void* scratch = NULL;
  OrtStatus* st;
  int negate = ((V1Kernel*)k)->negate;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(x, (const void**)&in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(x, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementCount(x, &n));
  st = g_api->KernelContext_GetScratchBuffer(ctx, 64, &scratch);
  if (st && negate) {
    g_api->ReleaseStatus(st);
    st = NULL;
  }
  if (st) return st;
  if (scratch) memset(scratch, 0, 64);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  for (i = 0; i < n; ++i) out[i] = negate ? -in[i] : (in[i] > 0.0f ? in[i] : 0.0f);
  return NULL;
}

static OrtStatus* create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  V1Kernel* k = (V1Kernel*)calloc(1, sizeof *k);
  (void)info;
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "out of memory creating a kernel");
  k->ort_version_supported = 1;
  k->Compute = v1_compute;
  k->Release = release;
  k->negate = state != NULL;
  *out = (OrtKernelImpl*)k;
  return NULL;
}

static int g_negate = 1;

static OrtStatus* add(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, void* state) {
  const int32_t float_only[] = {ORT_TENSOR_ELEMENT_FLOAT};
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  if (!st) st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 6, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, "CPUExecutionProvider");
  if (!st) st = api->KernelDefBuilder_AddTypeConstraint(b, "T", float_only, 1);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, create, state, NULL);
  if (def) api->ReleaseKernelDef(def);
  return st;
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  g_api = api;
  ORT_KERNEL_RETURN_IF_ERROR(add(api, registry, "Relu", NULL));
  return add(api, registry, "Neg", &g_negate);
}
