/*
 * example_kernels.c -- a third-party kernel library for ort, in plain C99.
 *
 *   Relu     (opset 6+,  float32)  no workspace
 *   Add      (opset 7+,  float32)  no workspace; same-shape inputs only (no broadcasting)
 *   Softmax  (opset 13+, float32)  workspace: one row buffer of the last axis, declared at Level 2
 *                                  and estimated at Level 1 by the SAME helper, so they agree
 *
 * Build:  cc -std=c99 -O2 -shared -fPIC -I"$(python -c 'import ort_abi; print(ort_abi.get_include())')" \
 *            example_kernels.c -o libexample_kernels.so -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

#define EXAMPLE_EP "CPUExecutionProvider"
#define SOFTMAX_SLOT_ROW 0

/* The host API table, saved at registration; create/compute functions use it. */
static const OrtKernelApi* g_api = NULL;

static OrtStatus* make_error(OrtErrorCode code, const char* fmt, long long a, long long b) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a, b);
  return g_api->CreateStatus(code, msg);
}

/* ---------------------------------------------------------------------------------------------
 * Shared helper: the workspace of Softmax over the last axis is one float32 row of that axis.
 * Level 1 (estimate) and Level 2 (declaration) both call it, so the two can never disagree.
 * Returns 0 and sets *bytes, or -1 when the shape is not static / rank is 0.
 * ------------------------------------------------------------------------------------------- */
static int softmax_workspace_bytes(const int64_t* dims, size_t rank, size_t* bytes) {
  if (dims == NULL || rank == 0 || dims[rank - 1] < 0) return -1;
  *bytes = (size_t)dims[rank - 1] * sizeof(float);
  return 0;
}

/* Softmax only supports the last axis (axis == -1 or rank-1). */
static int softmax_axis_is_last(int64_t axis, size_t rank) {
  return axis == -1 || (rank > 0 && axis == (int64_t)rank - 1);
}

/* ---- one kernel struct serves all three ops ---- */
typedef struct ExampleKernel {
  OrtKernelImpl base; /* must be first: the host sees an OrtKernelImpl* */
  int64_t axis;       /* Softmax only */
} ExampleKernel;

static void example_release(OrtKernelImpl* this_ptr) { free(this_ptr); }

static OrtStatus* get_float_input(OrtKernelContext* ctx, size_t index, const OrtValue** value,
                                  const float** data, const int64_t** dims, size_t* rank,
                                  size_t* count) {
  int32_t type = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, value));
  if (*value == NULL) return make_error(ORT_INVALID_ARGUMENT, "input %lld is missing%.0lld", (long long)index, 0);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(*value, &type));
  if (type != ORT_TENSOR_ELEMENT_FLOAT)
    return make_error(ORT_INVALID_ARGUMENT, "input %lld has element type %lld; this kernel accepts FLOAT (1) only",
                      (long long)index, type);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(*value, (const void**)data));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(*value, dims, rank));
  return g_api->Value_GetElementCount(*value, count);
}

/* ---- Relu ---- */
static OrtStatus* relu_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const OrtValue* x;
  OrtValue* y;
  const float* in;
  float* out;
  const int64_t* dims;
  size_t rank, n, i;
  (void)this_ptr;
  ORT_KERNEL_RETURN_IF_ERROR(get_float_input(ctx, 0, &x, &in, &dims, &rank, &n));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  for (i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return NULL;
}

/* ---- Add ---- */
static OrtStatus* add_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const OrtValue *a, *b;
  OrtValue* y;
  const float *pa, *pb;
  float* out;
  const int64_t *da, *db;
  size_t ra, rb, na, nb, i;
  (void)this_ptr;
  ORT_KERNEL_RETURN_IF_ERROR(get_float_input(ctx, 0, &a, &pa, &da, &ra, &na));
  ORT_KERNEL_RETURN_IF_ERROR(get_float_input(ctx, 1, &b, &pb, &db, &rb, &nb));
  if (ra != rb || (ra > 0 && memcmp(da, db, ra * sizeof(int64_t)) != 0))
    return make_error(ORT_INVALID_ARGUMENT,
                      "inputs have different shapes (ranks %lld and %lld); this Add does not broadcast",
                      (long long)ra, (long long)rb);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, da, ra, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  for (i = 0; i < na; ++i) out[i] = pa[i] + pb[i];
  return NULL;
}

/* ---- Softmax ---- */
static OrtStatus* softmax_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const OrtValue* x;
  OrtValue* y;
  const float* in;
  float *out, *row;
  const int64_t* dims;
  size_t rank, n, ws_bytes, cols, rows, r, c;
  void* ws = NULL;
  int64_t axis = ((ExampleKernel*)this_ptr)->axis;
  ORT_KERNEL_RETURN_IF_ERROR(get_float_input(ctx, 0, &x, &in, &dims, &rank, &n));
  if (softmax_workspace_bytes(dims, rank, &ws_bytes) != 0)
    return make_error(ORT_INVALID_ARGUMENT, "Softmax needs an input of rank >= 1, got rank %lld%.0lld",
                      (long long)rank, 0);
  if (!softmax_axis_is_last(axis, rank))
    return make_error(ORT_INVALID_ARGUMENT, "Softmax axis %lld is not the last axis of a rank-%lld input",
                      (long long)axis, (long long)rank);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  /* the planned workspace, or scratch when nothing was planned (dynamic shapes, no plan) */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, SOFTMAX_SLOT_ROW, ws_bytes, &ws));
  if (ws == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, ws_bytes, &ws));
  row = (float*)ws;
  cols = (size_t)dims[rank - 1];
  rows = cols ? n / cols : 0;
  for (r = 0; r < rows; ++r) {
    const float* xi = in + r * cols;
    float mx = xi[0], sum = 0.0f;
    for (c = 1; c < cols; ++c) mx = xi[c] > mx ? xi[c] : mx;
    for (c = 0; c < cols; ++c) {
      row[c] = expf(xi[c] - mx);
      sum += row[c];
    }
    for (c = 0; c < cols; ++c) out[r * cols + c] = row[c] / sum;
  }
  return NULL;
}

/* Level 2: declare the row buffer from the resolved input shape. Unknown extents: declare nothing
 * (the planner skips this node and Compute falls back to scratch). */
static OrtStatus* softmax_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes,
                                  size_t num_inputs, OrtWorkspaceSlot* slots, size_t max_slots,
                                  size_t* num_slots) {
  size_t bytes;
  (void)this_ptr;
  *num_slots = 0;
  if (num_inputs < 1 || max_slots < 1)
    return make_error(ORT_INVALID_ARGUMENT, "Softmax declaration got %lld inputs and %lld slots", (long long)num_inputs,
                      (long long)max_slots);
  if (shapes[0].state != ORT_WORKSPACE_INPUT_SHAPED) return NULL;
  if (softmax_workspace_bytes(shapes[0].dims, shapes[0].rank, &bytes) != 0) return NULL;
  slots[0].slot_id = SOFTMAX_SLOT_ROW;
  slots[0].size_bytes = bytes;
  *num_slots = 1;
  return NULL;
}

/* Level 1: estimate from the node, before any kernel exists. */
static OrtStatus* softmax_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  const int64_t* dims = NULL;
  size_t rank = 0;
  int has_axis = 0;
  int64_t axis = -1;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &dims, &rank));
  if (dims == NULL)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "Softmax estimate needs a static input shape");
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, "axis", &has_axis));
  if (has_axis) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "axis", &axis));
  if (!softmax_axis_is_last(axis, rank))
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "Softmax estimate: only the last axis is supported");
  if (softmax_workspace_bytes(dims, rank, out) != 0)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "Softmax estimate: input is a scalar");
  return NULL;
}

/* ---- create functions ---- */
static OrtStatus* new_kernel(OrtStatus* (*compute)(OrtKernelImpl*, OrtKernelContext*), int with_declare,
                             OrtKernelImpl** out) {
  ExampleKernel* k = (ExampleKernel*)calloc(1, sizeof *k);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "out of memory creating a kernel");
  k->base.ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->base.flags = 0;
  k->base.Compute = compute;
  k->base.Release = example_release;
  k->base.PrePackWeight = NULL;
  k->base.DeclareWorkspaceRequirements = with_declare ? softmax_declare : NULL;
  k->axis = -1;
  *out = &k->base;
  return NULL;
}

static OrtStatus* create_relu(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  (void)info;
  return new_kernel(relu_compute, 0, out);
}

static OrtStatus* create_add(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  (void)info;
  return new_kernel(add_compute, 0, out);
}

static OrtStatus* create_softmax(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  int has_axis = 0;
  int64_t axis = -1;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "axis", &has_axis));
  if (has_axis) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInt(info, "axis", &axis));
  if (axis != -1 && axis < 0)
    return make_error(ORT_INVALID_ARGUMENT, "Softmax axis %lld is not supported; use -1 (last axis)%.0lld", axis, 0);
  ORT_KERNEL_RETURN_IF_ERROR(new_kernel(softmax_compute, 1, out));
  ((ExampleKernel*)*out)->axis = axis;
  return NULL;
}

/* ---- registration ---- */
static OrtStatus* add_one(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                          OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate) {
  const int32_t float_only[] = {ORT_TENSOR_ELEMENT_FLOAT};
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  if (!st) st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, since, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, EXAMPLE_EP);
  if (!st) st = api->KernelDefBuilder_AddTypeConstraint(b, "T", float_only, 1);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, create, NULL, estimate);
  if (def) api->ReleaseKernelDef(def);
  return st;
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  if (api->version < ORT_KERNEL_ABI_VERSION_WORKSPACE)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "this library needs a host with ABI version >= 2");
  g_api = api;
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "Relu", 6, create_relu, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "Add", 7, create_add, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "Softmax", 13, create_softmax, softmax_estimate));
  return NULL;
}
