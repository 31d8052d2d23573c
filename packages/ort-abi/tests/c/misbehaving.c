/* Kernel libraries that break the rules on purpose, one variant per -D flag, for ort-abi's error tests.
 * No flag: a well-formed library (domain "com.test") whose kernels misbehave at run time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_kernel_abi.h"

#if defined(BAD_VERSION)
ORT_KERNEL_EXPORT uint32_t OrtKernelLibraryAbiVersion(void) { return 99; }
#elif defined(LIBRARY_V2)
ORT_KERNEL_EXPORT uint32_t OrtKernelLibraryAbiVersion(void) { return 2; } /* built before AddKernelV3 */
#elif !defined(NO_VERSION)
ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()
#endif

static const OrtKernelApi* g_api;

/* a version-1 kernel: its struct ends before DeclareWorkspaceRequirements */
typedef struct V1Kernel {
  uint32_t ort_version_supported;
  uint32_t flags;
  OrtStatus* (*Compute)(OrtKernelImpl*, OrtKernelContext*);
  void (*Release)(OrtKernelImpl*);
  OrtStatus* (*PrePackWeight)(OrtKernelImpl*, const OrtValue*, int, int*);
} V1Kernel;

static int g_released = 0;
ORT_KERNEL_EXPORT int test_released_count(void) { return g_released; }

static void rel(OrtKernelImpl* k) { ++g_released; free(k); }

static OrtStatus* c_ok(OrtKernelImpl* k, OrtKernelContext* ctx) { (void)k; (void)ctx; return NULL; }
static OrtStatus* c_bad_status(OrtKernelImpl* k, OrtKernelContext* ctx) { (void)k; (void)ctx; return (OrtStatus*)(uintptr_t)0x1234; }
static OrtStatus* c_double_release(OrtKernelImpl* k, OrtKernelContext* ctx) {
  OrtStatus* st = g_api->CreateStatus(ORT_FAIL, "released twice");
  (void)k; (void)ctx;
  g_api->ReleaseStatus(st);
  g_api->ReleaseStatus(st);
  return NULL;
}
static OrtStatus* c_wrong_handle(OrtKernelImpl* k, OrtKernelContext* ctx) {
  const OrtValue* v;
  (void)ctx;
  return g_api->KernelContext_GetInput((const OrtKernelContext*)k, 0, &v);
}
static OrtStatus* c_bad_output(OrtKernelImpl* k, OrtKernelContext* ctx) {
  int64_t dims[1] = {4};
  OrtValue* v;
  (void)k;
  return g_api->KernelContext_GetOutput(ctx, 5, dims, 1, &v);
}
static OrtStatus* c_negative_output(OrtKernelImpl* k, OrtKernelContext* ctx) {
  int64_t dims[2] = {-2, 4}; /* a shape bug: an extent below 0 */
  OrtValue* v;
  (void)k;
  return g_api->KernelContext_GetOutput(ctx, 0, dims, 2, &v);
}
static OrtStatus* c_input_write(OrtKernelImpl* k, OrtKernelContext* ctx) {
  const OrtValue* v;
  void* p;
  (void)k;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &v));
  return g_api->Value_GetTensorMutableData((OrtValue*)v, &p);
}
/* "Keep" keeps its context and first input past Compute; "UseKeptContext" / "UseKeptValue" then read
 * them in a later Compute: stale handles, which the host must refuse with a status (never serve) */
static const OrtKernelContext* g_kept_ctx;
static const OrtValue* g_kept_value;
static OrtStatus* c_keep(OrtKernelImpl* k, OrtKernelContext* ctx) {
  (void)k;
  g_kept_ctx = ctx;
  return g_api->KernelContext_GetInput(ctx, 0, &g_kept_value);
}
static OrtStatus* c_use_kept_context(OrtKernelImpl* k, OrtKernelContext* ctx) {
  size_t n;
  (void)k; (void)ctx;
  return g_api->KernelContext_GetInputCount(g_kept_ctx, &n);
}
static OrtStatus* c_use_kept_value(OrtKernelImpl* k, OrtKernelContext* ctx) {
  size_t n;
  (void)k; (void)ctx;
  return g_api->Value_GetElementCount(g_kept_value, &n);
}
/* uses the planned workspace when there is one, else scratch; writes a marker either way */
static OrtStatus* c_v1_compute(OrtKernelImpl* k, OrtKernelContext* ctx) {
  void* ws = NULL;
  (void)k;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, 0, 16, &ws));
  if (ws == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, 16, &ws));
  memset(ws, 7, 16);
  return NULL;
}

static OrtStatus* d_overflow(OrtKernelImpl* k, const OrtWorkspaceInputShape* s, size_t n, OrtWorkspaceSlot* slots,
                             size_t max_slots, size_t* num) {
  (void)k; (void)s; (void)n; (void)slots;
  *num = max_slots + 1;
  return NULL;
}
static OrtStatus* d_fails(OrtKernelImpl* k, const OrtWorkspaceInputShape* s, size_t n, OrtWorkspaceSlot* slots,
                          size_t max_slots, size_t* num) {
  (void)k; (void)s; (void)n; (void)slots; (void)max_slots; (void)num;
  return g_api->CreateStatus(ORT_EP_FAIL, "cannot declare");
}
/* echoes what it was given: slot i = (state, rank, product of dims) of input i, to check the marshalling */
static OrtStatus* d_echo(OrtKernelImpl* k, const OrtWorkspaceInputShape* s, size_t n, OrtWorkspaceSlot* slots,
                         size_t max_slots, size_t* num) {
  size_t i, d;
  (void)k;
  for (i = 0; i < n && i < max_slots; ++i) {
    int64_t prod = 1;
    for (d = 0; d < s[i].rank; ++d) prod *= s[i].dims[d];
    slots[i].slot_id = (int32_t)i;
    slots[i].size_bytes = (size_t)(s[i].state * 1000000 + (int64_t)s[i].rank * 10000 + (s[i].rank ? prod + 1 : 0)
                                   + s[i].elem_type * 100000000LL);
  }
  *num = i;
  return NULL;
}

static OrtStatus* make(OrtStatus* (*compute)(OrtKernelImpl*, OrtKernelContext*),
                       OrtStatus* (*declare)(OrtKernelImpl*, const OrtWorkspaceInputShape*, size_t,
                                             OrtWorkspaceSlot*, size_t, size_t*),
                       uint32_t version, OrtKernelImpl** out) {
  OrtKernelImpl* k = (OrtKernelImpl*)calloc(1, sizeof *k);
  k->ort_version_supported = version;
  k->Compute = compute;
  k->Release = rel;
  k->DeclareWorkspaceRequirements = declare;
  *out = k;
  return NULL;
}

#define CREATE(name, compute, declare)                                                   \
  static OrtStatus* name(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {    \
    (void)st; (void)info;                                                                \
    return make(compute, declare, ORT_KERNEL_ABI_VERSION, out);                          \
  }
CREATE(cr_bad_status, c_bad_status, NULL)
CREATE(cr_double_release, c_double_release, NULL)
CREATE(cr_wrong_handle, c_wrong_handle, NULL)
CREATE(cr_bad_output, c_bad_output, NULL)
CREATE(cr_negative_output, c_negative_output, NULL)
CREATE(cr_input_write, c_input_write, NULL)
CREATE(cr_keep, c_keep, NULL)
CREATE(cr_use_kept_context, c_use_kept_context, NULL)
CREATE(cr_use_kept_value, c_use_kept_value, NULL)
CREATE(cr_overflow, c_ok, d_overflow)
CREATE(cr_declare_fails, c_ok, d_fails)
CREATE(cr_echo, c_ok, d_echo)
CREATE(cr_v2_null_declare, c_v1_compute, NULL)

/* version 5 pre-packing: 64 bytes declared for each constant input; "PrePacks" copies the weight's first bytes
 * there (and counts its calls), "PrePackFails" returns an error status */
static int g_prepacked = 0;
ORT_KERNEL_EXPORT int test_prepack_count(void) { return g_prepacked; }
static OrtStatus* p_declare(OrtKernelImpl* k, const OrtWorkspaceInputShape* s, size_t n, int index, size_t* bytes) {
  (void)k; (void)s; (void)n; (void)index;
  *bytes = 64;
  return NULL;
}
static OrtStatus* p_copies(OrtKernelImpl* k, const OrtValue* t, int index, void* packed, size_t nbytes, int* is_packed) {
  const void* data;
  size_t count;
  (void)k; (void)index;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(t, &data));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementCount(t, &count));
  if (((uintptr_t)packed % ORT_PREPACK_ALIGNMENT) != 0) return g_api->CreateStatus(ORT_FAIL, "buffer not aligned");
  memcpy(packed, data, count * 4 < nbytes ? count * 4 : nbytes);
  ++g_prepacked;
  *is_packed = 1;
  return NULL;
}
static OrtStatus* p_fails(OrtKernelImpl* k, const OrtValue* t, int index, void* packed, size_t nbytes, int* is_packed) {
  (void)k; (void)t; (void)index; (void)packed; (void)nbytes; (void)is_packed;
  return g_api->CreateStatus(ORT_EP_FAIL, "cannot pack this weight");
}
static OrtStatus* make_packing(OrtStatus* (*pack)(OrtKernelImpl*, const OrtValue*, int, void*, size_t, int*),
                               OrtKernelImpl** out) {
  ORT_KERNEL_RETURN_IF_ERROR(make(c_ok, NULL, ORT_KERNEL_ABI_VERSION, out));
  (*out)->DeclarePrePackedBytes = p_declare;
  (*out)->PrePackWeightInto = pack;
  return NULL;
}
static OrtStatus* cr_prepacks(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make_packing(p_copies, out);
}
static OrtStatus* cr_prepack_fails(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make_packing(p_fails, out);
}
/* a version-4 kernel: its struct ends after DeclareWorkspaceRequirements (the host must not read past it) */
typedef struct V4Kernel {
  V1Kernel v1; /* the same leading fields */
  OrtStatus* (*DeclareWorkspaceRequirements)(OrtKernelImpl*, const OrtWorkspaceInputShape*, size_t, OrtWorkspaceSlot*,
                                             size_t, size_t*);
} V4Kernel;
/* an older kernel of `size` bytes (its struct ends before a later version's fields) and that version */
static OrtStatus* make_old(size_t size, uint32_t version, OrtKernelImpl** out) {
  V1Kernel* k = (V1Kernel*)calloc(1, size); /* V1Kernel: the leading fields every version shares */
  k->ort_version_supported = version;
  k->Compute = c_v1_compute;
  k->Release = rel;
  *out = (OrtKernelImpl*)k;
  return NULL;
}
static OrtStatus* cr_v4(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make_old(sizeof(V4Kernel), 4, out);
}

static OrtStatus* cr_null_compute(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make(NULL, NULL, ORT_KERNEL_ABI_VERSION, out);
}
static OrtStatus* cr_too_new(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make(c_ok, NULL, 99, out);
}
static OrtStatus* cr_v1(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  return make_old(sizeof(V1Kernel), 1, out);
}
static OrtStatus* cr_fails(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  const char* name = "?";
  (void)st; (void)out;
  g_api->KernelInfo_GetNodeName(info, &name);
  return g_api->CreateStatus(ORT_INVALID_GRAPH, name);  /* the message echoes the node name */
}
static OrtStatus* cr_no_kernel(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)st; (void)info;
  *out = NULL;
  return NULL;
}
/* state is an int* given at registration: checks create_func_state reaches the create call */
static OrtStatus* cr_state(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)info;
  if (st == NULL || *(int*)st != 42) return g_api->CreateStatus(ORT_FAIL, "state did not arrive");
  return make(c_ok, NULL, ORT_KERNEL_ABI_VERSION, out);
}
int g_state = 42; /* not static: used only in the default variant */

static OrtStatus* est_fails(const OrtEpApi* api, const OrtNode* n, const OrtEp* ep, size_t* out) {
  (void)n; (void)ep; (void)out;
  return api->CreateStatus(ORT_NOT_IMPLEMENTED, "no estimate for you");
}
/* reads the EP: multi_processor_count * 1024 + device id, or an error when the EP is not "TestEP" */
static OrtStatus* est_reads_ep(const OrtEpApi* api, const OrtNode* n, const OrtEp* ep, size_t* out) {
  const char* name;
  int64_t sms;
  int32_t id;
  (void)n;
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetName(ep, &name));
  if (strcmp(name, "TestEP") != 0) return api->CreateStatus(ORT_INVALID_ARGUMENT, "not TestEP");
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetDeviceProperty(ep, "multi_processor_count", &sms));
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetDeviceId(ep, &id));
  *out = (size_t)(sms * 1024 + id);
  return NULL;
}
/* reads attributes of every kind: ints sum + int + (int)float + strlen(string) + (int) sum of floats "fs" */
static OrtStatus* est_attrs(const OrtEpApi* api, const OrtNode* n, const OrtEp* ep, size_t* out) {
  int64_t i;
  const int64_t* ints;
  const float* fs;
  size_t count, nfs, k, total = 0;
  float f, fsum = 0.0f;
  const char* s;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(n, "i", &i));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInts(n, "ints", &ints, &count));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeFloat(n, "f", &f));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeString(n, "s", &s));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeFloats(n, "fs", &fs, &nfs));
  if (fs == NULL && nfs) return api->CreateStatus(ORT_FAIL, "Echo: a NULL float list came with a nonzero count");
  for (k = 0; k < nfs; ++k) fsum += fs[k];
  total += (size_t)fsum;
  for (k = 0; k < count; ++k) total += (size_t)ints[k];
  *out = total + (size_t)i + (size_t)f + (s ? strlen(s) : 0); /* an absent string reads as NULL (OK) */
  return NULL;
}

/* ConvEstimate: the seeds' Conv estimate pattern. pads/strides/dilations are optional and read WITHOUT
 * HasAttribute: absent is OK + NULL (defaults: pads 0, strides 1, dilations 1). Input 0 is NCHW, input 1
 * is MCkHkW; the estimate is an im2col column buffer of float: C*kH*kW * outH*outW * 4 bytes. A NULL
 * result with a nonzero count, or a count that is not what Conv needs, is an error. */
static OrtStatus* est_conv(const OrtEpApi* api, const OrtNode* n, const OrtEp* ep, size_t* out) {
  const int64_t *x, *w, *pads = NULL, *strides = NULL, *dilations = NULL;
  size_t xr, wr, pads_count = 99, strides_count = 99, dilations_count = 99, d;
  size_t cols = 1;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(n, 0, &x, &xr));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(n, 1, &w, &wr));
  if (!x || !w || xr != 4 || wr != 4) return api->CreateStatus(ORT_INVALID_ARGUMENT, "Conv: need static 4-D shapes");
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInts(n, "pads", &pads, &pads_count));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInts(n, "strides", &strides, &strides_count));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInts(n, "dilations", &dilations, &dilations_count));
  if ((!pads && pads_count) || (!strides && strides_count) || (!dilations && dilations_count))
    return api->CreateStatus(ORT_FAIL, "Conv: a NULL attribute came with a nonzero count");
  if ((pads && pads_count != 4) || (strides && strides_count != 2) || (dilations && dilations_count != 2))
    return api->CreateStatus(ORT_INVALID_ARGUMENT, "Conv: pads need 4 values, strides and dilations 2");
  for (d = 0; d < 2; ++d) {
    int64_t p = pads ? pads[d] + pads[d + 2] : 0, s = strides ? strides[d] : 1, dl = dilations ? dilations[d] : 1;
    int64_t span = dl * (w[2 + d] - 1) + 1;
    cols *= (size_t)((x[2 + d] + p - span) / s + 1);
  }
  *out = (size_t)(w[1] * w[2] * w[3]) * cols * 4;
  return NULL;
}


/* InfoProbe / NodeProbe: report everything the host API says, as the message of an error status */
static OrtStatus* cr_info_probe(void* st, const OrtKernelInfo* info, OrtKernelImpl** out) {
  const char *name, *op, *s = "-", *ep_name = "-";
  size_t nin, nout, count = 0;
  int has;
  int64_t i = 0;
  const int64_t* ints = NULL;
  const float* fs = NULL;
  size_t nfs = 0;
  float f = 0;
  const OrtEp* ep = NULL;
  char msg[512];
  (void)st; (void)out;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetNodeName(info, &name));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetOperatorType(info, &op));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetInputCount(info, &nin));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetOutputCount(info, &nout));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "i", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInt(info, "i", &i));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "ints", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, "ints", &ints, &count));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "f", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "f", &f));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "s", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "s", &s));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloats(info, "fs", &fs, &nfs)); /* absent: OK, NULL */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetEp(info, &ep));
  if (ep) ORT_KERNEL_RETURN_IF_ERROR(g_api->Ep_GetName(ep, &ep_name));
  snprintf(msg, sizeof msg, "name=%s op=%s in=%d out=%d i=%lld ints=%d:%lld f=%.2f s=%s fs=%d:%.2f ep=%s", name, op,
           (int)nin, (int)nout, (long long)i, (int)count, count ? (long long)ints[count - 1] : -1LL, f, s, (int)nfs,
           fs != NULL && nfs ? fs[nfs - 1] : -1.0f, ep_name);
  return g_api->CreateStatus(ORT_FAIL, msg);
}
static OrtStatus* est_node_probe(const OrtEpApi* api, const OrtNode* n, const OrtEp* ep, size_t* out) {
  const char *name, *op, *domain, *type;
  size_t nin, nout, k;
  char msg[512];
  int len;
  (void)out;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetName(n, &name));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetOperatorType(n, &op));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetDomain(n, &domain));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputCount(n, &nin));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetOutputCount(n, &nout));
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetDeviceType(ep, &type));
  len = snprintf(msg, sizeof msg, "name=%s op=%s domain=%s in=%d out=%d dev=%s", name, op, domain, (int)nin,
                 (int)nout, type);
  for (k = 0; k < nin; ++k) {
    int present;
    int32_t et;
    const int64_t* dims;
    size_t rank;
    ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasInput(n, k, &present));
    ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputElementType(n, k, &et));
    ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(n, k, &dims, &rank));
    len += snprintf(msg + len, sizeof msg - (size_t)len, " [%d t%d %s r%d]", present, (int)et,
                    dims ? "static" : "null", (int)rank);
  }
  return api->CreateStatus(ORT_FAIL, msg);
}

static OrtStatus* add_on(const OrtKernelApi* api, OrtKernelRegistry* r, const char* op, const char* ep,
                         OrtKernelCreateFunc c, void* state, OrtKernelWorkspaceEstimateFunc e) {
  OrtKernelDefBuilder* b;
  OrtKernelDef* d = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  if (!st) st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "com.test");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, ep);
  if (!st) st = api->KernelDefBuilder_Build(b, &d);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(r, d, c, state, e);
  if (d) api->ReleaseKernelDef(d);
  return st;
}

static OrtStatus* add(const OrtKernelApi* api, OrtKernelRegistry* r, const char* op, OrtKernelCreateFunc c,
                      void* state, OrtKernelWorkspaceEstimateFunc e) {
  return add_on(api, r, op, "TestEP", c, state, e);
}

#define ADD(op, c, s, e) ORT_KERNEL_RETURN_IF_ERROR(add(api, r, op, c, s, e))

static OrtStatus* register_all(const OrtKernelApi* api, OrtKernelRegistry* r) {
  g_api = api;
#if defined(FAIL_REGISTRATION)
  ADD("First", cr_echo, NULL, NULL);
  return api->CreateStatus(ORT_EP_FAIL, "registration refused on purpose");
#elif defined(IGNORE_ERROR)
  {
    OrtStatus* st = add(api, r, "NoCreate", NULL, NULL, NULL); /* NULL create_func: the host refuses */
    if (st) api->ReleaseStatus(st);                            /* ...and this library ignores it */
    return NULL;
  }
#elif defined(IGNORE_ADD_ERROR)
  {
    /* Build fails (no op type set) and KernelRegistry_AddKernelV2 then fails on the NULL definition;
     * this library drops both statuses and returns success anyway. */
    OrtKernelDefBuilder* b = NULL;
    OrtKernelDef* d = NULL;
    OrtStatus* st = api->CreateKernelDefBuilder(&b);
    if (st) return st;
    st = api->KernelDefBuilder_Build(b, &d);
    if (st) api->ReleaseStatus(st);
    api->ReleaseKernelDefBuilder(b);
    st = api->KernelRegistry_AddKernelV2(r, d, cr_echo, NULL, NULL);
    if (st) api->ReleaseStatus(st);
    return NULL;
  }
#elif defined(IGNORE_TYPE_CONSTRAINT_ERROR)
  {
    /* The type constraint is refused (element type 0) and dropped: the kernel would be registered
     * without the constraint its author meant, so the host refuses the whole library. */
    static const int32_t bad_types[] = {0};
    OrtKernelDefBuilder* b = NULL;
    OrtKernelDef* d = NULL;
    OrtStatus* st = api->CreateKernelDefBuilder(&b);
    if (st) return st;
    if (!st) st = api->KernelDefBuilder_SetOperatorType(b, "Typed");
    if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
    if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, "TestEP");
    if (!st) {
      OrtStatus* ignored = api->KernelDefBuilder_AddTypeConstraint(b, "T", bad_types, 1);
      if (ignored) api->ReleaseStatus(ignored);
    }
    if (!st) st = api->KernelDefBuilder_Build(b, &d);
    api->ReleaseKernelDefBuilder(b);
    if (!st) st = api->KernelRegistry_AddKernelV2(r, d, cr_echo, NULL, NULL);
    if (d) api->ReleaseKernelDef(d);
    return st;
  }
#else
  ADD("BadStatus", cr_bad_status, NULL, NULL);
  ADD("DoubleRelease", cr_double_release, NULL, NULL);
  ADD("WrongHandle", cr_wrong_handle, NULL, NULL);
  ADD("BadOutput", cr_bad_output, NULL, NULL);
  ADD("NegativeOutput", cr_negative_output, NULL, NULL);
  ADD("InputWrite", cr_input_write, NULL, NULL);
  ADD("Overflow", cr_overflow, NULL, NULL);
  ADD("DeclareFails", cr_declare_fails, NULL, NULL);
  ADD("Echo", cr_echo, NULL, est_attrs);
  ADD("V2NullDeclare", cr_v2_null_declare, NULL, NULL);
  ADD("NullCompute", cr_null_compute, NULL, NULL);
  ADD("TooNew", cr_too_new, NULL, NULL);
  ADD("Keep", cr_keep, NULL, NULL);
  ADD("UseKeptContext", cr_use_kept_context, NULL, NULL);
  ADD("UseKeptValue", cr_use_kept_value, NULL, NULL);
  ADD("V1", cr_v1, NULL, NULL);
  ADD("CreateFails", cr_fails, NULL, est_fails);
  ADD("NoKernel", cr_no_kernel, NULL, est_reads_ep);
  ADD("State", cr_state, &g_state, NULL);
  ADD("InfoProbe", cr_info_probe, NULL, est_node_probe);
  ADD("ConvEstimate", cr_no_kernel, NULL, est_conv);
  ADD("PrePacks", cr_prepacks, NULL, NULL);
  ADD("PrePackFails", cr_prepack_fails, NULL, NULL);
  ADD("V4", cr_v4, NULL, NULL);
  /* for a session's CPU provider: pre-packing that fails at initialization */
  ORT_KERNEL_RETURN_IF_ERROR(add_on(api, r, "PrePackFails", "CPUExecutionProvider", cr_prepack_fails, NULL, NULL));
  return NULL;
#endif
}

#if !defined(NO_ENTRY)
ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* r) {
  return register_all(api, r);
}
#endif

ORT_KERNEL_EXPORT OrtStatus* MyRegister(const OrtKernelApi* api, OrtKernelRegistry* r) { return register_all(api, r); }
