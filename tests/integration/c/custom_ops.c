/*
 * custom_ops.c -- custom-domain kernels for the session's shape, type and output checks (ABI v3).
 *
 *   com.example::TileRows      (float32 only, type constraint "T")  y = concat([x] * repeats, axis 0);
 *                              registered with KernelRegistry_AddKernelV3: an output-shape callback
 *                              reads the `repeats` attribute, and a Level-1 estimate that needs the EP
 *                              handle (it fails on a NULL EP and reports 4096 bytes on the CPU EP).
 *   com.example::TileRowsNoShape  the same kernel without a shape callback (KernelRegistry_AddKernelV2).
 *   com.example::ShortRows     computes TileRows but asks for one row less than it should (a kernel bug
 *                              the host must catch); drops the error status of KernelContext_GetOutput.
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

static const OrtKernelApi* g_api = NULL;

typedef struct TileKernel {
  OrtKernelImpl base;
  int64_t repeats;
  int short_rows; /* request one row less than the result has (ShortRows) */
} TileKernel;

static void tile_release(OrtKernelImpl* k) { free(k); }

static OrtStatus* tile_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const TileKernel* k = (const TileKernel*)this_ptr;
  const OrtValue* x = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, count = 0;
  const void* src = NULL;
  OrtValue* y = NULL;
  void* dst = NULL;
  int64_t out_dims[16];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(x, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementCount(x, &count));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(x, &src));
  if (rank == 0 || rank > 16) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "TileRows needs rank 1..16");
  memcpy(out_dims, dims, rank * sizeof(int64_t));
  out_dims[0] = dims[0] * k->repeats - (k->short_rows ? 1 : 0);
  if (k->short_rows) {
    OrtStatus* st = g_api->KernelContext_GetOutput(ctx, 0, out_dims, rank, &y);
    if (st != NULL) g_api->ReleaseStatus(st); /* the bug: the refusal is dropped */
    return NULL;
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, &dst));
  for (int64_t r = 0; r < k->repeats; ++r) memcpy((float*)dst + (size_t)r * count, src, count * sizeof(float));
  return NULL;
}

static OrtStatus* create(const OrtKernelInfo* info, OrtKernelImpl** out, int short_rows) {
  int has = 0;
  int64_t repeats = 1;
  TileKernel* k;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "repeats", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInt(info, "repeats", &repeats));
  if (repeats < 1) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "repeats must be >= 1");
  k = (TileKernel*)calloc(1, sizeof *k);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "out of memory");
  k->base.ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->base.Compute = tile_compute;
  k->base.Release = tile_release;
  k->repeats = repeats;
  k->short_rows = short_rows;
  *out = &k->base;
  return NULL;
}

static OrtStatus* create_tile(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return create(info, out, 0);
}

static OrtStatus* create_short(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return create(info, out, 1);
}

/* y's shape: x's with the first extent times `repeats` (-1 stays -1); y's type: x's. */
static OrtStatus* tile_shape(const OrtKernelApi* api, const OrtNode* node, const OrtWorkspaceInputShape* in,
                             size_t num_inputs, OrtOutputShape* out, size_t num_outputs) {
  int has = 0;
  int64_t repeats = 1;
  if (num_inputs < 1 || num_outputs < 1) return api->CreateStatus(ORT_INVALID_ARGUMENT, "TileRows: 1 input, 1 output");
  if (in[0].state != ORT_WORKSPACE_INPUT_SHAPED || in[0].rank == 0 || in[0].rank > ORT_OUTPUT_SHAPE_MAX_RANK)
    return NULL; /* not known: leave the output UNSHAPED */
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, "repeats", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "repeats", &repeats));
  out[0].state = ORT_WORKSPACE_INPUT_SHAPED;
  out[0].elem_type = in[0].elem_type;
  out[0].rank = in[0].rank;
  for (size_t i = 0; i < in[0].rank; ++i) out[0].dims[i] = in[0].dims[i];
  if (out[0].dims[0] >= 0) out[0].dims[0] *= repeats;
  return NULL;
}

/* Needs the EP it is asked about: 4096 bytes on the CPU EP, an error (heuristic) without an EP. */
static OrtStatus* tile_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* bytes) {
  const char* name = NULL;
  (void)node;
  if (ep == NULL) return api->CreateStatus(ORT_INVALID_ARGUMENT, "TileRows estimate: the host passed no EP");
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetName(ep, &name));
  *bytes = strcmp(name, "CPUExecutionProvider") == 0 ? 4096 : 8192;
  return NULL;
}

static OrtStatus* add(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op,
                      OrtKernelCreateFunc create_fn, OrtKernelOutputShapeFunc shape_fn) {
  static const int32_t float_only[] = {ORT_TENSOR_ELEMENT_FLOAT};
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "com.example");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, "CPUExecutionProvider");
  if (!st) st = api->KernelDefBuilder_AddTypeConstraint(b, "T", float_only, 1);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st && shape_fn != NULL)
    st = api->KernelRegistry_AddKernelV3(registry, def, create_fn, NULL, tile_estimate, shape_fn);
  else if (!st)
    st = api->KernelRegistry_AddKernelV2(registry, def, create_fn, NULL, tile_estimate);
  if (def) api->ReleaseKernelDef(def);
  return st;
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  g_api = api;
  if (api->version < ORT_KERNEL_ABI_VERSION_OUTPUT_SHAPES)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "custom_ops needs a host with KernelRegistry_AddKernelV3");
  ORT_KERNEL_RETURN_IF_ERROR(add(api, registry, "TileRows", create_tile, tile_shape));
  ORT_KERNEL_RETURN_IF_ERROR(add(api, registry, "TileRowsNoShape", create_tile, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(add(api, registry, "ShortRows", create_short, tile_shape));
  return NULL;
}
