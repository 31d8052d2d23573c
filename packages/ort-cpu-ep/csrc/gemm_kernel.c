/* ONNX Gemm (float32, opset 7+: C optional and unidirectionally broadcast) as an ort-abi kernel with transA 0:
 * Y = alpha * A @ B' + beta * C, A [M, K], B [K, N] (transB 0) or [N, K] (transB 1), C of shape [], [1], [N], [1, N],
 * [M, 1] or [M, N]. The product is the MatMul kernel's sgemm (sgemm_columns, alpha applied there), then beta * C
 * added element by element, as onnxruntime adds it. Threads split the columns in the micro-kernel's panels.
 * Workspace: slot 0, one packing buffer per thread (sgemm_thread_floats; none for a few rows, which stream B);
 * without a declaration Compute takes the host's scratch buffer; a constant B is packed once at initialization
 * (sgemm_prepack.c) where the product packs it, and Compute reads it in place without that slot (none declared; B
 * itself may then be released by the host: Compute's B NULL). ort_cpu_ep._ckernels sends transA 1 to numpy. */
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "sgemm.h"
#include "sgemm_prepack.h"

#define GEMM_SLOT 0
#define GEMM_MIN_WORK_PER_THREAD (1 << 18) /* multiply-adds below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct GemmKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  float alpha, beta;
  int trans_b;
  size_t declared; /* bytes of slot 0 the plan holds */
  SgPrepacked pre; /* a constant B packed at initialization (sgemm_prepack.c), else panels NULL */
} GemmKernel;

static OrtStatus* gemm_fail(const char* what) {
  char msg[400];
  snprintf(msg, sizeof msg, "Gemm: %s", what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* M, K, N of A and B (rank 2 each, inner extents equal); 0 or a message */
static int gemm_dims(const int64_t* a, size_t ar, const int64_t* b, size_t br, int trans_b, int64_t* mkn, char* err,
                     size_t len) {
  int64_t kb;
  if (ar != 2 || br != 2) {
    snprintf(err, len, "A has rank %zu and B rank %zu; both must be matrices (rank 2)", ar, br);
    return 1;
  }
  mkn[0] = a[0]; mkn[1] = a[1];
  kb = trans_b ? b[1] : b[0];
  mkn[2] = trans_b ? b[0] : b[1];
  if (kb != mkn[1]) {
    snprintf(err, len, "A [%lld, %lld] and B%s [%lld, %lld] do not multiply: A's columns must equal B's %s",
             (long long)a[0], (long long)a[1], trans_b ? " (transB)" : "", (long long)b[0], (long long)b[1],
             trans_b ? "columns" : "rows");
    return 1;
  }
  return 0;
}

static size_t gemm_bytes(const int64_t* mkn, int trans_b, int threads) {
  return (size_t)threads * sgemm_thread_floats(mkn[0], mkn[1], mkn[2], trans_b) * sizeof(float);
}

static OrtStatus* gemm_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                               OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  GemmKernel* k = (GemmKernel*)this_ptr;
  int64_t mkn[3];
  char err[300];
  *num_slots = 0;
  k->declared = 0;
  if (!cpu_kernels_known_dims(shapes, num_inputs, 2, 2)) return NULL; /* shapes unknown at planning */
  if (k->pre.declared) return NULL; /* B packed at initialization: Compute reads its panels, packs nothing */
  if (gemm_dims(shapes[0].dims, 2, shapes[1].dims, 2, k->trans_b, mkn, err, sizeof err)) return gemm_fail(err);
  k->declared = gemm_bytes(mkn, k->trans_b, mnb_threads());
  return cpu_kernels_declare_slot(g_api, "Gemm", GEMM_SLOT, k->declared, slots, max_slots, num_slots);
}

/* bytes of constant input `index` packed at initialization (ABI v5): B, where the product packs it */
static OrtStatus* gemm_declare_prepack(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes,
                                       size_t num_inputs, int index, size_t* bytes) {
  GemmKernel* k = (GemmKernel*)this_ptr;
  int known_a = num_inputs > 0 && shapes[0].state == ORT_WORKSPACE_INPUT_SHAPED && shapes[0].rank == 2 &&
                shapes[0].dims != NULL;
  *bytes = sg_prepack_bytes(shapes, num_inputs, index, k->trans_b, known_a ? shapes[0].dims[0] : -1);
  if (*bytes) k->pre.declared = 1;
  return NULL;
}

static OrtStatus* gemm_prepack(OrtKernelImpl* this_ptr, const OrtValue* tensor, int index, void* packed, size_t bytes,
                               int* is_packed) {
  GemmKernel* k = (GemmKernel*)this_ptr;
  *is_packed = 0;
  if (index != 1) return NULL;
  return sg_prepack_into(g_api, "Gemm", &k->pre, tensor, k->trans_b, packed, bytes, is_packed);
}

typedef struct GemmJob {
  SgProblem p;
  char* buffers;
  size_t thread_bytes;
  int64_t width, per; /* per: panels of `width` columns a thread takes */
} GemmJob;

static void gemm_job(void* arg, int index, int count) {
  const GemmJob* job = (const GemmJob*)arg;
  const int64_t n0 = (int64_t)index * job->per * job->width, n1 = n0 + job->per * job->width;
  float* buffer = job->buffers ? (float*)(job->buffers + (size_t)index * job->thread_bytes) : NULL;
  (void)count;
  if (n0 < job->p.N) sgemm_columns(&job->p, n0, n1 < job->p.N ? n1 : job->p.N, buffer);
}

/* y[M, N] += beta * c broadcast from (cm, cn) (each 1 or the full extent) */
CPU_KERNELS_CLONES
static void gemm_add_c(float* y, int64_t M, int64_t N, const float* c, int64_t cm, int64_t cn, float beta) {
  int64_t m, n;
  for (m = 0; m < M; ++m) {
    const float* row = c + (cm == 1 ? 0 : m * cn);
    float* out = y + m * N;
    if (cn == 1)
      for (n = 0; n < N; ++n) out[n] += beta * row[0];
    else
      for (n = 0; n < N; ++n) out[n] += beta * row[n];
  }
}

static OrtStatus* gemm_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  GemmKernel* k = (GemmKernel*)this_ptr;
  const OrtValue *av = NULL, *bv = NULL, *cv = NULL;
  OrtValue* yv = NULL;
  const int64_t *ad = NULL, *bd = NULL, *cd = NULL;
  size_t ar = 0, br = 0, cr = 0, n_in = 0;
  const void *a = NULL, *b = NULL, *c = NULL;
  void *y = NULL, *buffers = NULL;
  int64_t mkn[3], ydims[2], cm = 1, cn = 1, panels;
  double work;
  GemmJob job;
  char err[300];
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &av));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, &bv));
  if (n_in > 2) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 2, &cv));
  if (av == NULL) return gemm_fail("input A is missing; it is required");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(av, &ad, &ar));
  if (bv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(bv, &bd, &br));
  else ORT_KERNEL_RETURN_IF_ERROR(sg_released_b(g_api, "Gemm", &k->pre, &bd, &br)); /* released: its panels */
  if (gemm_dims(ad, ar, bd, br, k->trans_b, mkn, err, sizeof err)) return gemm_fail(err);
  if (cv != NULL && k->beta != 0.0f) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(cv, &cd, &cr));
    if (cr == 2) { cm = cd[0]; cn = cd[1]; }
    else if (cr == 1) cn = cd[0];
    if (cr > 2 || (cm != 1 && cm != mkn[0]) || (cn != 1 && cn != mkn[2])) {
      snprintf(err, sizeof err, "C of rank %zu (%lld x %lld) does not broadcast to the output [%lld, %lld]; give C "
               "of shape [], [N], [1, N], [M, 1] or [M, N]", cr, (long long)cm, (long long)cn, (long long)mkn[0],
               (long long)mkn[2]);
      return gemm_fail(err);
    }
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(cv, &c));
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(av, &a));
  if (bv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(bv, &b));
  ydims[0] = mkn[0]; ydims[1] = mkn[2];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, ydims, 2, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (mkn[0] == 0 || mkn[2] == 0) return NULL;
  memset(&job, 0, sizeof job);
  job.p.a = (const float*)a; job.p.b = (const float*)b; job.p.c = (float*)y;
  job.p.M = mkn[0]; job.p.K = mkn[1]; job.p.N = mkn[2];
  job.p.lda = mkn[1]; job.p.ldb = k->trans_b ? mkn[1] : mkn[2]; job.p.ldc = mkn[2];
  job.p.b_trans = k->trans_b;
  job.p.alpha = k->alpha;
  job.p.bp = sg_prepacked(&k->pre, mkn[1], mkn[2]);
  job.width = sgemm_streams(&job.p) ? 64 : sgemm_panel_width();
  panels = (mkn[2] + job.width - 1) / job.width;
  work = (double)mkn[0] * (double)mkn[1] * (double)mkn[2];
  threads = mnb_threads();
  if ((double)threads > work / GEMM_MIN_WORK_PER_THREAD) threads = (int)(work / GEMM_MIN_WORK_PER_THREAD);
  if (threads > panels) threads = (int)panels;
  if (threads < 1) threads = 1;
  job.thread_bytes = sgemm_thread_floats(mkn[0], mkn[1], mkn[2], k->trans_b) * sizeof(float);
  if (job.thread_bytes > 0 && mkn[1] > 0 && job.p.bp == NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, GEMM_SLOT, k->declared, job.thread_bytes,
                                                          &threads, &buffers));
    job.buffers = (char*)buffers;
  }
  job.per = (panels + threads - 1) / threads;
  if (mkn[1] == 0) memset(y, 0, (size_t)(mkn[0] * mkn[2]) * sizeof(float)); /* an empty product */
  else mnb_parallel(threads, gemm_job, &job);
  if (c != NULL) gemm_add_c((float*)y, mkn[0], mkn[2], (const float*)c, cm, cn, k->beta);
  return NULL;
}

static OrtStatus* gemm_float(const OrtKernelInfo* info, const char* name, float* out) {
  int has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, name, &has));
  return has ? g_api->KernelInfo_GetAttributeFloat(info, name, out) : NULL;
}

static OrtStatus* gemm_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  GemmKernel* k;
  int64_t trans_a = 0, trans_b = 0;
  float alpha = 1.0f, beta = 1.0f;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "transA", 0, &trans_a, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "transB", 0, &trans_b, NULL));
  ORT_KERNEL_RETURN_IF_ERROR(gemm_float(info, "alpha", &alpha));
  ORT_KERNEL_RETURN_IF_ERROR(gemm_float(info, "beta", &beta));
  if (trans_a) return gemm_fail("transA=1; this C kernel takes transA=0 (the numpy kernel runs the others)");
  k = (GemmKernel*)cpu_kernels_new(sizeof *k, gemm_compute, gemm_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Gemm: out of memory creating the kernel");
  k->alpha = alpha;
  k->beta = beta;
  k->trans_b = trans_b != 0;
  k->base.DeclarePrePackedBytes = gemm_declare_prepack;
  k->base.PrePackWeightInto = gemm_prepack;
  k->base.flags = SG_PREPACK_FLAGS;
  *out = &k->base;
  return NULL;
}

static OrtStatus* gemm_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  const int64_t *a = NULL, *b = NULL;
  size_t ar = 0, br = 0;
  int64_t mkn[3], trans_b = 0;
  int has = 0;
  char err[300];
  (void)ep;
  *out = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &a, &ar));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 1, &b, &br));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, "transB", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "transB", &trans_b));
  if (a == NULL || b == NULL || ar != 2 || br != 2 || a[0] < 0 || a[1] < 0 || b[0] < 0 || b[1] < 0) return NULL;
  if (gemm_dims(a, ar, b, br, trans_b != 0, mkn, err, sizeof err) == 0) *out = gemm_bytes(mkn, trans_b != 0, mnb_threads());
  return NULL;
}

OrtStatus* ort_cpu_ep_register_gemm(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  g_api = api;
  /* 7: C unidirectionally broadcast (11 made it optional, which this kernel takes at every opset) */
  return cpu_kernels_add_onnx(api, registry, "Gemm", 7, "T", ORT_TENSOR_ELEMENT_FLOAT, gemm_create, gemm_estimate);
}
