/* ONNX MatMul (float32, B two-dimensional) as an ort-abi kernel: Y = A @ B with A of any rank >= 1 (its leading
 * dimensions are rows), B of shape [K, N]. The math is sgemm_math.c; threads split the columns of Y in
 * panels of the micro-kernel's width.
 *
 * Workspace: slot 0 holds one packing buffer per thread (sgemm_thread_floats: one block of B, at most
 * SG_KC x SG_NC floats whatever the shapes) for the threads in effect at declaration; Compute uses no more
 * threads than the slot holds buffers for. A few rows (decode) stream B without packing and declare none.
 * Threads take chunks of columns from a shared counter (as MatMulNBits does), so a thread without a core
 * leaves its work to the others. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "sgemm.h"

#define SG_SLOT_PACKING 0
#define SG_MAX_RANK 16
#define SG_MIN_WORK_PER_THREAD (1 << 18) /* multiply-adds below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct SgKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  size_t declared; /* bytes of slot 0 the plan holds */
} SgKernel;

static OrtStatus* sg_error(const char* fmt, long long a, long long b) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a, b);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* rows of A for a static shape, else -1 */
static int64_t sg_rows(const int64_t* dims, size_t rank) {
  int64_t rows = 1;
  size_t i;
  if (dims == NULL || rank == 0) return -1;
  for (i = 0; i + 1 < rank; ++i) {
    if (dims[i] < 0) return -1;
    rows *= dims[i];
  }
  return rows;
}

/* B's dimension `axis` for a static 2-D shape, else `bound` (the block size that caps what a buffer holds) */
static int64_t sg_b_bound(const int64_t* dims, size_t rank, size_t axis, int64_t bound) {
  return dims != NULL && rank == 2 && dims[axis] >= 0 && dims[axis] < bound ? dims[axis] : bound;
}

static size_t sg_bytes(int64_t rows, int64_t K, int64_t N, int threads) {
  if (rows >= 0 && rows <= SG_SKINNY_ROWS) return 0;
  return (size_t)threads * sgemm_thread_floats(rows < 0 ? SG_SKINNY_ROWS + 1 : rows, K, N) * sizeof(float);
}

static OrtStatus* sg_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  const int64_t *a_dims = NULL, *b_dims = NULL;
  size_t a_rank = 0, b_rank = 0;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &a_dims, &a_rank));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 1, &b_dims, &b_rank));
  *out = sg_bytes(sg_rows(a_dims, a_rank), sg_b_bound(b_dims, b_rank, 0, SG_KC), sg_b_bound(b_dims, b_rank, 1, SG_NC),
                  mnb_threads());
  return NULL;
}

static OrtStatus* sg_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                             OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  SgKernel* k = (SgKernel*)this_ptr;
  int64_t rows = -1, K = SG_KC, N = SG_NC;
  *num_slots = 0;
  k->declared = 0;
  if (num_inputs > 0 && shapes[0].state == ORT_WORKSPACE_INPUT_SHAPED) rows = sg_rows(shapes[0].dims, shapes[0].rank);
  if (num_inputs > 1 && shapes[1].state == ORT_WORKSPACE_INPUT_SHAPED) {
    K = sg_b_bound(shapes[1].dims, shapes[1].rank, 0, SG_KC);
    N = sg_b_bound(shapes[1].dims, shapes[1].rank, 1, SG_NC);
  }
  if (rows >= 0 && rows <= SG_SKINNY_ROWS) return NULL;
  if (max_slots < 1) return sg_error("MatMul declaration: %lld slots offered, 1 needed%.0lld", (long long)max_slots, 0);
  slots[0].slot_id = SG_SLOT_PACKING;
  slots[0].size_bytes = k->declared = sg_bytes(rows, K, N, mnb_threads());
  *num_slots = 1;
  return NULL;
}

typedef struct SgJob {
  const SgProblem* p;
  char* buffers;
  size_t thread_bytes;
  int64_t panels, width, min_chunk;
  int64_t next; /* the first panel no thread has taken yet (atomic) */
} SgJob;

/* Chunks of panels from a shared counter, a 1/(2 x threads) share of what is left and at least min_chunk panels
 * (enough columns that a chunk's B rows are long runs); threads share a cache line of Y only at a chunk's edge. */
static void sg_job(void* arg, int index, int count) {
  SgJob* job = (SgJob*)arg;
  float* buffer = job->buffers ? (float*)(job->buffers + (size_t)index * job->thread_bytes) : NULL;
  for (;;) {
    int64_t left = job->panels - __atomic_load_n(&job->next, __ATOMIC_RELAXED), chunk = left / (2 * (int64_t)count);
    int64_t p0, p1;
    if (left <= 0) break;
    if (chunk < job->min_chunk) chunk = job->min_chunk;
    p0 = __atomic_fetch_add(&job->next, chunk, __ATOMIC_RELAXED);
    if (p0 >= job->panels) break;
    p1 = p0 + chunk < job->panels ? p0 + chunk : job->panels;
    sgemm_columns(job->p, p0 * job->width, p1 * job->width < job->p->N ? p1 * job->width : job->p->N, buffer);
  }
}

static OrtStatus* sg_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  SgKernel* k = (SgKernel*)this_ptr;
  const OrtValue *av = NULL, *bv = NULL;
  OrtValue* yv = NULL;
  const int64_t *a_dims = NULL, *b_dims = NULL;
  size_t a_rank = 0, b_rank = 0, i, need;
  int64_t out_dims[SG_MAX_RANK], work;
  const void *a = NULL, *b = NULL;
  void *y = NULL, *buffers = NULL;
  SgProblem p;
  SgJob job;
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &av));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, &bv));
  if (av == NULL || bv == NULL) return sg_error("MatMul: input %lld is missing%.0lld", av == NULL ? 0 : 1, 0);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(av, &a_dims, &a_rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(bv, &b_dims, &b_rank));
  if (b_rank != 2) return sg_error("MatMul: B has rank %lld; this C kernel takes a 2-D B%.0lld", (long long)b_rank, 0);
  if (a_rank < 1 || a_rank > SG_MAX_RANK) return sg_error("MatMul: A has rank %lld; this C kernel takes 1..%lld", (long long)a_rank, SG_MAX_RANK);
  if (a_dims[a_rank - 1] != b_dims[0])
    return sg_error("MatMul: A's last dimension %lld does not match B's first %lld", a_dims[a_rank - 1], b_dims[0]);
  memset(&p, 0, sizeof p);
  p.K = b_dims[0];
  p.N = b_dims[1];
  p.M = 1;
  for (i = 0; i + 1 < a_rank; ++i) {
    p.M *= a_dims[i];
    out_dims[i] = a_dims[i];
  }
  out_dims[a_rank - 1] = p.N;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(av, &a));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(bv, &b));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, a_rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (p.M == 0 || p.N == 0) return NULL;
  p.a = (const float*)a; p.b = (const float*)b; p.c = (float*)y;
  p.lda = p.K; p.ldb = p.N; p.ldc = p.N;

  job.width = p.M <= SG_SKINNY_ROWS ? 64 : sgemm_panel_width();
  job.panels = (p.N + job.width - 1) / job.width;
  job.min_chunk = (p.M <= SG_SKINNY_ROWS ? 512 : 128) / job.width; /* columns: streamed runs / B blocks */
  job.next = 0;
  work = p.M * p.N * (p.K > 0 ? p.K : 1);
  threads = mnb_threads();
  if (threads > (job.panels + job.min_chunk - 1) / job.min_chunk) threads = (int)((job.panels + job.min_chunk - 1) / job.min_chunk);
  if ((int64_t)threads > work / SG_MIN_WORK_PER_THREAD) threads = (int)(work / SG_MIN_WORK_PER_THREAD);
  if (threads < 1) threads = 1;
  /* a few rows stream B from memory: one contiguous share per thread keeps each thread's row runs longest
   * (measured at decode, 2 threads: 19 vs 22 ms per hidden-2048 step with chunks) */
  if (p.M <= SG_SKINNY_ROWS) job.min_chunk = (job.panels + threads - 1) / threads;
  if (job.min_chunk < 1) job.min_chunk = 1;
  job.thread_bytes = 0;
  if (p.M > SG_SKINNY_ROWS && p.K > 0) { /* the packed path: a B block per thread */
    job.thread_bytes = sgemm_thread_floats(p.M, p.K, p.N) * sizeof(float);
    if (k->declared >= job.thread_bytes && (size_t)threads * job.thread_bytes > k->declared)
      threads = (int)(k->declared / job.thread_bytes); /* the declared buffers bound the threads */
    need = (size_t)threads * job.thread_bytes;
    if (k->declared >= need) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, SG_SLOT_PACKING, need, &buffers));
    if (buffers == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, need, &buffers));
  }
  job.p = &p;
  job.buffers = (char*)buffers;
  mnb_parallel(threads, sg_job, &job);
  return NULL;
}

static void sg_release(OrtKernelImpl* this_ptr) { free(this_ptr); }

static OrtStatus* sg_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  SgKernel* k;
  (void)state; (void)info;
  k = (SgKernel*)calloc(1, sizeof *k);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "MatMul: out of memory creating the kernel");
  k->base.ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->base.Compute = sg_compute;
  k->base.Release = sg_release;
  k->base.DeclareWorkspaceRequirements = sg_declare;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_matmul(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t f = ORT_TENSOR_ELEMENT_FLOAT;
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st;
  g_api = api;
  st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, "MatMul");
  if (!st) st = api->KernelDefBuilder_SetDomain(b, "");
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, 1, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, CPU_KERNELS_EP);
  if (!st) st = api->KernelDefBuilder_AddTypeConstraint(b, "T", &f, 1); /* the schema's T: A, B and Y */
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, sg_create, NULL, sg_estimate);
  if (def) api->ReleaseKernelDef(def);
  return st;
}
