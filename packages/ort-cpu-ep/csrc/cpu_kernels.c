/* What the C kernels beside MatMulNBits share: their registration (one kernel definition per op, type
 * constraints bound by input index) and the one call the library's entry point makes for all of them. */
#include <stdio.h>

#include "cpu_kernels.h"

OrtStatus* cpu_kernels_add(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, const char* domain,
                           int since, const int32_t* types, int count, OrtKernelCreateFunc create,
                           OrtKernelWorkspaceEstimateFunc estimate) {
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  int i;
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, domain);
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, since, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, CPU_KERNELS_EP);
  for (i = 0; i < count && !st; ++i) {
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

OrtStatus* ort_cpu_ep_register_more(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st = ort_cpu_ep_register_norm(api, registry);
  if (!st) st = ort_cpu_ep_register_gqa(api, registry);
  if (!st) st = ort_cpu_ep_register_activation(api, registry);
  if (!st) st = ort_cpu_ep_register_matmul(api, registry);
  if (!st) st = ort_cpu_ep_register_softmax(api, registry);
  return st;
}
