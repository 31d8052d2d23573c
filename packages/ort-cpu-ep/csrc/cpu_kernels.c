/* What the C kernels beside MatMulNBits share: their registration (one kernel definition per op, type
 * constraints bound by input index) and the one call the library's entry point makes for all of them. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_kernels.h"

/* the definition up to its type constraints: `constraint` names one schema constraint bound to types[0..count), else
 * T<k> binds input k to types[k] (a schema-less op) */
static OrtStatus* cpu_kernels_define(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op,
                                     const char* domain, int since, int end, const char* constraint, const int32_t* types,
                                     int count, OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate) {
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  int i;
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, domain);
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, since, end);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, CPU_KERNELS_EP);
  if (constraint != NULL && !st) st = api->KernelDefBuilder_AddTypeConstraint(b, constraint, types, (size_t)count);
  for (i = 0; constraint == NULL && i < count && !st; ++i) {
    char name[16];
    if (types[i] == 0) continue;
    snprintf(name, sizeof name, "T%d", i); /* a schema-less op binds T<k> to input k */
    st = api->KernelDefBuilder_AddTypeConstraint(b, name, &types[i], 1);
  }
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, create, NULL, estimate);
  if (def) api->ReleaseKernelDef(def);
  return st;
}

OrtStatus* cpu_kernels_add(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, const char* domain,
                           int since, const int32_t* types, int count, OrtKernelCreateFunc create,
                           OrtKernelWorkspaceEstimateFunc estimate) {
  return cpu_kernels_define(api, registry, op, domain, since, 0, NULL, types, count, create, estimate);
}

OrtStatus* cpu_kernels_add_onnx(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                const char* constraint, int32_t type, OrtKernelCreateFunc create,
                                OrtKernelWorkspaceEstimateFunc estimate) {
  return cpu_kernels_define(api, registry, op, "", since, 0, constraint, &type, 1, create, estimate);
}

OrtStatus* cpu_kernels_add_onnx_types(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                      const char* constraint, const int32_t* types, int count,
                                      OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate) {
  return cpu_kernels_define(api, registry, op, "", since, 0, constraint, types, count, create, estimate);
}

OrtStatus* cpu_kernels_add_onnx_until(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                      int end, const char* constraint, int32_t type, OrtKernelCreateFunc create,
                                      OrtKernelWorkspaceEstimateFunc estimate) {
  return cpu_kernels_define(api, registry, op, "", since, end, constraint, &type, 1, create, estimate);
}

OrtStatus* cpu_kernels_add_onnx_types_until(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op,
                                            int since, int end, const char* constraint, const int32_t* types, int count,
                                            OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate) {
  return cpu_kernels_define(api, registry, op, "", since, end, constraint, types, count, create, estimate);
}

OrtStatus* ort_cpu_ep_register_more(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st = ort_cpu_ep_register_norm(api, registry);
  if (!st) st = ort_cpu_ep_register_gqa(api, registry);
  if (!st) st = ort_cpu_ep_register_activation(api, registry);
  if (!st) st = ort_cpu_ep_register_matmul(api, registry);
  if (!st) st = ort_cpu_ep_register_softmax(api, registry);
  if (!st) st = ort_cpu_ep_register_arithmetic(api, registry);
  if (!st) st = ort_cpu_ep_register_reduce(api, registry);
  if (!st) st = ort_cpu_ep_register_movement(api, registry);
  if (!st) st = ort_cpu_ep_register_conv(api, registry);
  if (!st) st = ort_cpu_ep_register_unary(api, registry);
  if (!st) st = ort_cpu_ep_register_pool(api, registry);
  if (!st) st = ort_cpu_ep_register_resize(api, registry);
  if (!st) st = ort_cpu_ep_register_convtranspose(api, registry);
  if (!st) st = ort_cpu_ep_register_affine_norm(api, registry);
  if (!st) st = ort_cpu_ep_register_math_unary(api, registry);
  if (!st) st = ort_cpu_ep_register_cast(api, registry);
  if (!st) st = ort_cpu_ep_register_float_reduce(api, registry);
  if (!st) st = ort_cpu_ep_register_broadcast(api, registry);
  if (!st) st = ort_cpu_ep_register_gemm(api, registry);
  if (!st) st = ort_cpu_ep_register_rnn(api, registry);
  return st;
}

OrtStatus* cpu_kernels_declare_none(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                                    OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  (void)this_ptr; (void)shapes; (void)num_inputs; (void)slots; (void)max_slots;
  *num_slots = 0;
  return NULL;
}

OrtStatus* cpu_kernels_estimate_none(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)api; (void)node; (void)ep;
  *out = 0;
  return NULL;
}

OrtStatus* cpu_kernels_attr_int(const OrtKernelApi* api, const OrtKernelInfo* info, const char* name, int64_t dflt,
                                int64_t* out, int* has) {
  int found = 0;
  *out = dflt;
  if (has != NULL) *has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->KernelInfo_HasAttribute(info, name, &found));
  if (has != NULL) *has = found;
  return found ? api->KernelInfo_GetAttributeInt(info, name, out) : NULL;
}

OrtStatus* cpu_kernels_thread_buffers(const OrtKernelApi* api, OrtKernelContext* ctx, int32_t slot, size_t declared,
                                      size_t thread_bytes, int* threads, void** buffers) {
  size_t need;
  *buffers = NULL;
  if (declared >= thread_bytes && (size_t)*threads * thread_bytes > declared)
    *threads = (int)(declared / thread_bytes); /* the declared buffers bound the threads */
  need = (size_t)*threads * thread_bytes;
  if (declared >= need) ORT_KERNEL_RETURN_IF_ERROR(api->KernelContext_GetPreallocatedWorkspace(ctx, slot, need, buffers));
  if (*buffers == NULL) ORT_KERNEL_RETURN_IF_ERROR(api->KernelContext_GetScratchBuffer(ctx, need, buffers));
  return NULL;
}

int cpu_kernels_known_dims(const OrtWorkspaceInputShape* shapes, size_t num_inputs, size_t count, size_t rank) {
  size_t i, d;
  if (num_inputs < count) return 0;
  for (i = 0; i < count; ++i) {
    if (shapes[i].state != ORT_WORKSPACE_INPUT_SHAPED || shapes[i].rank != rank || shapes[i].dims == NULL) return 0;
    for (d = 0; d < rank; ++d)
      if (shapes[i].dims[d] < 0) return 0;
  }
  return 1;
}

OrtStatus* cpu_kernels_declare_slot(const OrtKernelApi* api, const char* op, int32_t slot, size_t bytes,
                                    OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  char msg[160];
  *num_slots = 0;
  if (bytes == 0) return NULL;
  if (max_slots < 1) {
    snprintf(msg, sizeof msg, "%s: declaration: no workspace slot offered, 1 needed", op);
    return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  slots[0].slot_id = slot;
  slots[0].size_bytes = bytes;
  *num_slots = 1;
  return NULL;
}

OrtStatus* cpu_kernels_estimate_xw(const OrtEpApi* api, const OrtNode* node, const void* attrs, CpuXwBytes bytes,
                                   size_t* out) {
  OrtWorkspaceInputShape shapes[2];
  const int64_t* dims[2] = {NULL, NULL};
  size_t i, need = 0;
  char err[512];
  *out = 0;
  for (i = 0; i < 2; ++i) {
    shapes[i].rank = 0;
    ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, i, &dims[i], &shapes[i].rank));
    shapes[i].state = ORT_WORKSPACE_INPUT_SHAPED;
    shapes[i].elem_type = 0;
    shapes[i].dims = dims[i];
  }
  if (cpu_kernels_known_dims(shapes, 2, 2, 4) && bytes(attrs, dims[0], dims[1], &need, err, sizeof err) == 0)
    *out = need;
  return NULL;
}

OrtStatus* cpu_kernels_declare_xw(const OrtKernelApi* api, const char* op, int32_t slot, const void* attrs,
                                  CpuXwBytes bytes, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                                  OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots, size_t* declared) {
  char err[512], msg[640];
  *num_slots = 0;
  *declared = 0;
  if (!cpu_kernels_known_dims(shapes, num_inputs, 2, 4)) return NULL; /* shapes unknown at planning */
  if (bytes(attrs, shapes[0].dims, shapes[1].dims, declared, err, sizeof err)) {
    *declared = 0;
    snprintf(msg, sizeof msg, "%s: %s", op, err);
    return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  return cpu_kernels_declare_slot(api, op, slot, *declared, slots, max_slots, num_slots);
}

static void cpu_kernels_free(OrtKernelImpl* this_ptr) { free(this_ptr); }

void* cpu_kernels_new(size_t size, CpuKernelCompute compute, CpuKernelDeclare declare) {
  OrtKernelImpl* k = (OrtKernelImpl*)calloc(1, size);
  if (k == NULL) return NULL;
  k->ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->Compute = compute;
  k->Release = cpu_kernels_free;
  k->DeclareWorkspaceRequirements = declare;
  return k;
}
