/* com.microsoft MatMulNBits as an ort-abi kernel library: registration (OrtRegisterKernels, the entry
 * ort_abi.load_kernel_library calls), the Level-1 estimate, the Level-2 declaration and Compute.
 *
 * Workspace: slot 0 holds one MNB_THREAD_BYTES buffer per thread (the threads in effect at declaration;
 * Compute uses no more threads than slot 0 holds buffers for); slot 1 the int8-quantized A of the
 * accuracy_level 4 path (only when A's shape is static at declaration). Without a planned slot
 * Compute takes scratch memory of the same size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h" /* the other C kernels: registered after MatMulNBits */
#include "mnb.h"
#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

#define MNB_EP "CPUExecutionProvider"
#define MNB_SLOT_THREADS 0
#define MNB_SLOT_QUANTIZED_A 1
#define MNB_MAX_RANK 16
#define MNB_MIN_QUANTIZE_PER_THREAD (1 << 15) /* values of A below which a thread quantizes them alone */
#define MNB_MIN_WORK_PER_THREAD (1 << 17) /* multiply-adds below which an extra thread does not pay (a thin
                                              * GEMV, K = N = 576, splits N across 2: the pool costs ~us) */

static const OrtKernelApi* g_api = NULL;
static int g_default_threads = 1;
static _Thread_local int tl_threads = 0;
static _Thread_local int tl_holding = 0; /* this thread holds the pool awake (mnb_pool_hold) */

/* Set by ort_cpu_ep._ckernels: the default (physical cores) and the calling thread's intra-op threads
 * (0: the default), mirrored from ort_cpu_ep._threads on every scope change. A scope of more than one thread (each
 * run opens one) holds the thread pool awake until the thread's scopes close (set back to 0, or to 1). */
ORT_KERNEL_EXPORT void ort_cpu_ep_set_default_threads(int n) { g_default_threads = n > 0 ? n : 1; }
ORT_KERNEL_EXPORT void ort_cpu_ep_set_threads(int n) {
  const int hold = n > 1;
  tl_threads = n > 0 ? n : 0;
  if (hold != tl_holding) {
    tl_holding = hold;
    mnb_pool_hold(hold);
  }
}
ORT_KERNEL_EXPORT int ort_cpu_ep_threads(void) { return mnb_threads(); }
ORT_KERNEL_EXPORT int ort_cpu_ep_pool_holds(void) { return mnb_pool_holds(); }
ORT_KERNEL_EXPORT int ort_cpu_ep_has_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}

int mnb_threads(void) { return tl_threads > 0 ? tl_threads : g_default_threads; }

typedef struct MnbAttrs {
  int64_t K, N, bits, block, accuracy_level;
} MnbAttrs;

typedef struct MnbKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  MnbAttrs attrs;
  size_t declared[2]; /* bytes declared for slots 0 and 1 (0: none) */
} MnbKernel;

static OrtStatus* mnb_error(const char* fmt, long long a, long long b, long long c) {
  char msg[384];
  snprintf(msg, sizeof msg, fmt, a, b, c);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus* mnb_check_attrs(const MnbAttrs* t) {
  if (t->K <= 0 || t->N <= 0 || t->K > ((int64_t)1 << 31) || t->N > ((int64_t)1 << 31))
    return mnb_error("MatMulNBits: attributes K=%lld, N=%lld must be in 1..2^31%.0lld", t->K, t->N, 0);
  if (t->bits != 2 && t->bits != 4 && t->bits != 8)
    return mnb_error("MatMulNBits: bits=%lld; this C kernel takes 2, 4 or 8%.0lld%.0lld", t->bits, 0, 0);
  if (t->block < 16 || t->block > MNB_MAX_BLOCK || (t->block & (t->block - 1)))
    return mnb_error("MatMulNBits: block_size=%lld; this C kernel takes a power of two from 16 to %lld%.0lld",
                     t->block, MNB_MAX_BLOCK, 0);
  return NULL;
}

static int64_t mnb_k_blocks(const MnbAttrs* t) { return (t->K + t->block - 1) / t->block; }

static size_t mnb_thread_bytes(int threads) { return (size_t)threads * MNB_THREAD_BYTES; }

/* int8 activations: accuracy_level 4 unless the zero points are floats (ONNX Runtime's rule; the
 * provider sends nodes whose B is not a constant initializer to the numpy kernel) */
static int mnb_int8(const MnbAttrs* t, int32_t zp_type) {
  return t->accuracy_level == 4 && zp_type != ORT_TENSOR_ELEMENT_FLOAT;
}

/* ---- Level 1 ---- */

static OrtStatus* mnb_node_int(const OrtEpApi* api, const OrtNode* node, const char* name, int64_t dflt, int64_t* out) {
  int has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, name, &has));
  *out = dflt;
  return has ? api->Node_GetAttributeInt(node, name, out) : NULL;
}

static OrtStatus* mnb_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  MnbAttrs t;
  int has_zp = 0;
  int32_t zp_type = 0;
  size_t bytes;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(mnb_node_int(api, node, "K", 0, &t.K));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_node_int(api, node, "N", 0, &t.N));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_node_int(api, node, "bits", 4, &t.bits));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_node_int(api, node, "block_size", 0, &t.block));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_node_int(api, node, "accuracy_level", 0, &t.accuracy_level));
  if (mnb_check_attrs(&t) != NULL) return api->CreateStatus(ORT_NOT_IMPLEMENTED, "MatMulNBits: attributes out of range");
  bytes = mnb_thread_bytes(mnb_threads());
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasInput(node, 3, &has_zp));
  if (has_zp) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputElementType(node, 3, &zp_type));
  if (mnb_int8(&t, zp_type)) {
    const int64_t* dims = NULL;
    size_t rank = 0, i;
    int64_t M = 1;
    ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &dims, &rank));
    if (dims == NULL || rank == 0)
      return api->CreateStatus(ORT_NOT_IMPLEMENTED, "MatMulNBits estimate: the int8 path needs A's static shape");
    for (i = 0; i + 1 < rank; ++i) M *= dims[i];
    bytes += mnb_quantized_a_bytes(M, t.K, t.block);
  }
  *out = bytes;
  return NULL;
}

/* ---- Level 2 ---- */

static OrtStatus* mnb_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                              OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  MnbKernel* k = (MnbKernel*)this_ptr;
  int32_t zp_type = num_inputs > 3 ? shapes[3].elem_type : 0;
  *num_slots = 0;
  k->declared[0] = k->declared[1] = 0;
  if (max_slots < 2) return mnb_error("MatMulNBits declaration: %lld slots offered, 2 needed%.0lld%.0lld", (long long)max_slots, 0, 0);
  slots[0].slot_id = MNB_SLOT_THREADS;
  slots[0].size_bytes = k->declared[0] = mnb_thread_bytes(mnb_threads());
  *num_slots = 1;
  if (mnb_int8(&k->attrs, zp_type) && num_inputs > 0 && shapes[0].state == ORT_WORKSPACE_INPUT_SHAPED &&
      shapes[0].rank > 0) {
    int64_t M = 1;
    size_t i;
    for (i = 0; i + 1 < shapes[0].rank; ++i) {
      if (shapes[0].dims[i] < 0) return NULL; /* dynamic: scratch at Compute */
      M *= shapes[0].dims[i];
    }
    slots[1].slot_id = MNB_SLOT_QUANTIZED_A;
    slots[1].size_bytes = k->declared[1] = mnb_quantized_a_bytes(M, k->attrs.K, k->attrs.block);
    *num_slots = 2;
  }
  return NULL;
}

/* ---- Compute ---- */

/* Input `index` of `inputs` (data NULL where the node leaves it out): element type `want`, `expect` elements
 * ((size_t)-1: any). want 0 takes the zero points' uint8 (`expect`) or float (`expect_float`) and returns the type.
 * Each host call costs a round trip through the host: one GetInput, GetElementType, GetElementCount (only to
 * check a count) and GetTensorData per input. */
static OrtStatus* mnb_input(OrtKernelContext* ctx, size_t inputs, size_t index, int32_t want, const char* name,
                            size_t expect, size_t expect_float, const void** data, int32_t* type_out) {
  const OrtValue* v = NULL;
  int32_t type = 0;
  size_t count = 0;
  *data = NULL;
  if (index >= inputs) return NULL; /* an optional input the node leaves out */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(v, &type));
  if (type_out != NULL) *type_out = type;
  if (want == 0 && type != ORT_TENSOR_ELEMENT_UINT8 && type != ORT_TENSOR_ELEMENT_FLOAT)
    return mnb_error("MatMulNBits: input %lld (%s) has element type %lld; the C kernel takes uint8 (2) or float (1)",
                     (long long)index, type, 0);
  if (want != 0 && type != want)
    return mnb_error("MatMulNBits: input %lld has element type %lld, expected %lld", (long long)index, type, want);
  if (want == 0 && type == ORT_TENSOR_ELEMENT_FLOAT) expect = expect_float;
  if (expect != (size_t)-1) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementCount(v, &count));
    if (count != expect) {
      char msg[256];
      snprintf(msg, sizeof msg, "MatMulNBits: input %s has %zu elements, expected %zu from the K, N, bits and "
               "block_size attributes; fix the attributes or re-quantize the weights", name, count, expect);
      return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
    }
  }
  return g_api->Value_GetTensorData(v, data);
}

static OrtStatus* mnb_workspace(OrtKernelContext* ctx, MnbKernel* k, int slot, size_t bytes, void** out) {
  *out = NULL;
  if (k->declared[slot] >= bytes) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, slot, bytes, out));
  if (*out == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, bytes, out));
  return NULL;
}

typedef struct MnbJob {
  const MnbProblem* p;
  char* buffers;
  int64_t panels;
  int64_t next; /* the first panel no thread has taken yet (atomic) */
} MnbJob;

/* Threads take chunks of panels from a shared counter rather than a fixed share: on a machine where other
 * threads (BLAS workers still spinning, other processes) hold a core, the threads that run take the work.
 * Chunks shrink as the work runs out (a 1/(2 x threads) share of what is left, at least one panel), so a thread
 * descheduled while holding one makes the others wait for little. A panel's outputs are MNB_PANEL adjacent floats
 * of each row: threads share a cache line of y only at a panel's edge. */
static void mnb_job(void* arg, int index, int count) {
  MnbJob* job = (MnbJob*)arg;
  char* buffer = job->buffers + (size_t)index * MNB_THREAD_BYTES;
  for (;;) {
    int64_t left = job->panels - __atomic_load_n(&job->next, __ATOMIC_RELAXED), chunk = left / (2 * (int64_t)count);
    int64_t p0, p1;
    if (left <= 0) break;
    if (chunk < 1) chunk = 1;
    p0 = __atomic_fetch_add(&job->next, chunk, __ATOMIC_RELAXED);
    if (p0 >= job->panels) break;
    p1 = p0 + chunk < job->panels ? p0 + chunk : job->panels;
    mnb_compute_panels(job->p, p0, p1, buffer);
  }
}

/* rows [M index / count, M (index + 1) / count) of A into the quantized-A buffers p points to */
static void mnb_quantize_job(void* arg, int index, int count) {
  const MnbProblem* p = (const MnbProblem*)arg;
  int64_t r0 = p->M * index / count, r1 = p->M * (index + 1) / count;
  int8_t* qa = (int8_t*)p->qa + r0 * p->qa_stride;
  float* scale = (float*)p->qa_scale + r0 * p->k_blocks;
  int32_t* sum = (int32_t*)p->qa_sum + r0 * p->k_blocks;
  float* sum_scaled = (float*)p->qa_sum_scaled + r0 * p->k_blocks;
  if (r1 <= r0) return;
  if (mnb_avx512vnni_applies(p))
    mnb_avx512_quantize_a(p->a + r0 * p->K, r1 - r0, p->K, p->block, p->qa_stride, qa, scale, sum, sum_scaled);
  else
    mnb_quantize_a(p->a + r0 * p->K, r1 - r0, p->K, p->block, p->qa_stride, qa, scale, sum, sum_scaled);
}

static OrtStatus* mnb_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  MnbKernel* k = (MnbKernel*)this_ptr;
  const MnbAttrs* t = &k->attrs;
  MnbProblem p;
  const OrtValue* a_value = NULL;
  OrtValue* y_value = NULL;
  const int64_t* a_dims = NULL;
  size_t a_rank = 0, i, inputs = 0;
  int32_t a_type = 0;
  int64_t out_dims[MNB_MAX_RANK];
  int32_t zp_type = 0;
  const void *a, *b, *scales, *zp, *bias;
  const OrtValue* g_idx = NULL;
  void *buffers = NULL, *y = NULL;
  int threads;
  int64_t panels, work;
  MnbJob job;

  memset(&p, 0, sizeof p);
  p.K = t->K; p.N = t->N; p.bits = t->bits; p.block = t->block;
  p.k_blocks = mnb_k_blocks(t);
  p.blob = t->block * t->bits / 8;
  p.zp_row_bytes = (p.k_blocks * t->bits + 7) / 8;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &a_value));
  if (a_value == NULL) return mnb_error("MatMulNBits: input A is missing%.0lld%.0lld%.0lld", 0, 0, 0);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(a_value, &a_dims, &a_rank));
  if (a_rank == 0 || a_rank > MNB_MAX_RANK || a_dims[a_rank - 1] != t->K)
    return mnb_error("MatMulNBits: A has rank %lld and last dimension %lld; expected rank 1..16 ending in K=%lld",
                     (long long)a_rank, a_rank ? a_dims[a_rank - 1] : -1, t->K);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(a_value, &a_type));
  if (a_type != ORT_TENSOR_ELEMENT_FLOAT)
    return mnb_error("MatMulNBits: input 0 has element type %lld, expected %lld%.0lld", a_type, ORT_TENSOR_ELEMENT_FLOAT, 0);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(a_value, &a));
  p.M = 1;
  for (i = 0; i + 1 < a_rank; ++i) p.M *= a_dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &inputs));
  if (inputs > 4) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 4, &g_idx));
  if (g_idx != NULL) return mnb_error("MatMulNBits: input g_idx is not supported by the C kernel%.0lld%.0lld%.0lld", 0, 0, 0);
  ORT_KERNEL_RETURN_IF_ERROR(mnb_input(ctx, inputs, 1, ORT_TENSOR_ELEMENT_UINT8, "B", (size_t)(t->N * p.k_blocks * p.blob), 0,
                                       &b, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_input(ctx, inputs, 2, ORT_TENSOR_ELEMENT_FLOAT, "scales", (size_t)(t->N * p.k_blocks), 0,
                                       &scales, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_input(ctx, inputs, 3, 0, "zero_points", (size_t)(t->N * p.zp_row_bytes),
                                       (size_t)(t->N * p.k_blocks), &zp, &zp_type));
  if (zp != NULL) {
    if (zp_type == ORT_TENSOR_ELEMENT_UINT8) p.zp_u8 = (const uint8_t*)zp; else p.zp_f = (const float*)zp;
  }
  ORT_KERNEL_RETURN_IF_ERROR(mnb_input(ctx, inputs, 5, ORT_TENSOR_ELEMENT_FLOAT, "bias", (size_t)t->N, 0, &bias, NULL));
  for (i = 0; i + 1 < a_rank; ++i) out_dims[i] = a_dims[i];
  out_dims[a_rank - 1] = t->N;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, a_rank, &y_value));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y_value, &y));
  if (p.M == 0) return NULL;
  p.a = (const float*)a; p.y = (float*)y; p.b = (const uint8_t*)b; p.scales = (const float*)scales;
  p.bias = (const float*)bias;
  p.int8 = mnb_int8(t, zp_type);

  panels = (t->N + MNB_PANEL - 1) / MNB_PANEL;
  work = p.M * t->N * t->K;
  threads = mnb_threads();
  if (threads > panels) threads = (int)panels;
  if ((int64_t)threads > work / MNB_MIN_WORK_PER_THREAD) threads = (int)(work / MNB_MIN_WORK_PER_THREAD);
  if (threads < 1) threads = 1;
  if (k->declared[0] >= MNB_THREAD_BYTES && (size_t)threads * MNB_THREAD_BYTES > k->declared[0])
    threads = (int)(k->declared[0] / MNB_THREAD_BYTES); /* the declared buffers bound the threads */
  ORT_KERNEL_RETURN_IF_ERROR(mnb_workspace(ctx, k, MNB_SLOT_THREADS, mnb_thread_bytes(threads), &buffers));
  if (p.int8) {
    void* qa = NULL;
    size_t qbytes = mnb_quantized_a_bytes(p.M, t->K, t->block);
    size_t blocks = (size_t)p.M * (size_t)p.k_blocks;
    size_t values = qbytes - blocks * (2 * sizeof(float) + sizeof(int32_t));
    float* qa_scale;
    int32_t* qa_sum;
    float* qa_sum_scaled;
    ORT_KERNEL_RETURN_IF_ERROR(mnb_workspace(ctx, k, MNB_SLOT_QUANTIZED_A, qbytes, &qa));
    qa_scale = (float*)((char*)qa + values);
    qa_sum = (int32_t*)(qa_scale + blocks);
    qa_sum_scaled = (float*)(qa_sum + blocks);
    p.qa_stride = mnb_quantized_a_stride(t->K, t->block);
    p.qa = (const int8_t*)qa;
    p.qa_scale = qa_scale;
    p.qa_sum = qa_sum;
    p.qa_sum_scaled = qa_sum_scaled;
    /* rows are quantized independently: the threads split them (a prefill's A is ~5% of the node on one thread) */
    mnb_parallel(p.M * t->K >= MNB_MIN_QUANTIZE_PER_THREAD * threads ? threads : 1, mnb_quantize_job, &p);
  }
  job.p = &p;
  job.buffers = (char*)buffers;
  job.panels = panels;
  job.next = 0;
  mnb_parallel(threads, mnb_job, &job);
  return NULL;
}

static OrtStatus* mnb_info_int(const OrtKernelInfo* info, const char* name, int64_t dflt, int64_t* out) {
  return cpu_kernels_attr_int(g_api, info, name, dflt, out, NULL);
}

static OrtStatus* mnb_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MnbAttrs t;
  int64_t prepacked = 0;
  MnbKernel* k;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "K", 0, &t.K));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "N", 0, &t.N));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "bits", 4, &t.bits));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "block_size", 0, &t.block));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "accuracy_level", 0, &t.accuracy_level));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_info_int(info, "weight_prepacked", 0, &prepacked));
  ORT_KERNEL_RETURN_IF_ERROR(mnb_check_attrs(&t));
  if (prepacked != 0) return mnb_error("MatMulNBits: weight_prepacked=%lld; the C kernel takes the plain layout (0)%.0lld%.0lld", prepacked, 0, 0);
  k = (MnbKernel*)cpu_kernels_new(sizeof *k, mnb_compute, mnb_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "MatMulNBits: out of memory creating the kernel");
  k->attrs = t;
  *out = &k->base;
  return NULL;
}

static OrtStatus* mnb_constraint(const OrtKernelApi* api, OrtKernelDefBuilder* b, const char* name, int32_t t0, int32_t t1) {
  const int32_t types[2] = {t0, t1};
  return api->KernelDefBuilder_AddTypeConstraint(b, name, types, t1 ? 2 : 1);
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st;
  if (api->version < ORT_KERNEL_ABI_VERSION_WORKSPACE)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "ort-cpu-ep's C kernels need a host with ABI version >= 2");
  g_api = api;
  st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  if (!st) st = api->KernelDefBuilder_SetOperatorType(b, "MatMulNBits");
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "com.microsoft");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, MNB_EP);
  /* custom-domain binding by input index: A, B, scales, zero_points, bias */
  if (!st) st = mnb_constraint(api, b, "T0", ORT_TENSOR_ELEMENT_FLOAT, 0);
  if (!st) st = mnb_constraint(api, b, "T1", ORT_TENSOR_ELEMENT_UINT8, 0);
  if (!st) st = mnb_constraint(api, b, "T2", ORT_TENSOR_ELEMENT_FLOAT, 0);
  if (!st) st = mnb_constraint(api, b, "T3", ORT_TENSOR_ELEMENT_UINT8, ORT_TENSOR_ELEMENT_FLOAT);
  if (!st) st = mnb_constraint(api, b, "T5", ORT_TENSOR_ELEMENT_FLOAT, 0);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, mnb_create, NULL, mnb_estimate);
  if (def) api->ReleaseKernelDef(def);
  if (!st) st = ort_cpu_ep_register_more(api, registry); /* norm_kernel.c, gqa_kernel.c */
  return st;
}
