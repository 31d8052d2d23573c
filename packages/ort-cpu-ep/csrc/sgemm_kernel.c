/* ONNX MatMul and com.microsoft FusedMatMul (float32) as ort-abi kernels: Y = alpha * A @ op(B), op(B) = B or,
 * for FusedMatMul's transB, B's last two axes swapped. A 2-D B: A of any rank >= 1, its leading dimensions are
 * rows (the weights' matmuls). A batched B (rank >= 3): A of rank >= 2, batch axes broadcast as numpy does
 * (the attention products). The math is sgemm_math.c; threads take chunks of (batch, column panel) items.
 *
 * Workspace: slot 0 holds one packing buffer per thread (sgemm_thread_floats: one block of B, at most
 * SG_KC x SG_NC floats whatever the shapes) for the threads in effect at declaration; Compute uses no more
 * threads than the slot holds buffers for. A few rows with a plain B (decode) stream B and declare none.
 * Threads take chunks of items from a shared counter (as MatMulNBits does), so a thread without a core leaves
 * its work to the others. A constant 2-D B is packed once at initialization (sgemm_prepack.c) where the product
 * packs it; Compute then reads it in place and takes no packing buffers (and none is declared), and needs B no
 * more: the host may release it (Compute's B is then NULL, its shape from the packing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "sgemm.h"
#include "sgemm_prepack.h"

#define SG_SLOT_PACKING 0
#define SG_MAX_RANK 16
#define SG_MIN_WORK_PER_THREAD (1 << 17) /* multiply-adds below which an extra thread does not pay (as MNB) */
#define SG_ITEM_COLUMNS 16      /* columns of one work item */
#define SG_PANELS_PER_THREAD 4  /* items per thread below which the packed path splits the rows too */
#define SG_MIN_BLOCK_ROWS 24    /* rows of such a block: whole micro-tiles (6 rows on AVX-512 and AVX2, 4 else) */

static const OrtKernelApi* g_api = NULL;

typedef struct SgKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  size_t declared;    /* bytes of slot 0 the plan holds */
  int b_trans;        /* FusedMatMul transB */
  float alpha;        /* FusedMatMul alpha (1 for MatMul) */
  const char* op;
  SgPrepacked pre; /* a constant 2-D B packed at initialization (sgemm_prepack.c), else panels NULL */
} SgKernel;

/* batches of M x K @ K x N, Y's shape and where each batch's A and B start (in matrices; 0 where broadcast) */
typedef struct SgShape {
  int64_t batches, M, K, N;
  size_t out_rank, batch_rank;
  int64_t out_dims[SG_MAX_RANK], batch_dims[SG_MAX_RANK], a_stride[SG_MAX_RANK], b_stride[SG_MAX_RANK];
} SgShape;

static OrtStatus* sg_error(const char* op, const char* fmt, long long a, long long b) {
  char msg[320];
  int n = snprintf(msg, sizeof msg, "%s: ", op);
  snprintf(msg + n, sizeof msg - (size_t)n, fmt, a, b);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* the problem of A (a, ar) @ op(B) (b, br); every dimension known and >= 0 */
static OrtStatus* sg_shape(const char* op, const int64_t* a, size_t ar, const int64_t* b, size_t br, int b_trans,
                           SgShape* s) {
  size_t i;
  memset(s, 0, sizeof *s);
  if (ar < 1 || ar > SG_MAX_RANK || br < 2 || br > SG_MAX_RANK)
    return sg_error(op, "A has rank %lld and B rank %lld; this C kernel takes A of rank 1..16 and B of rank 2..16", (long long)ar, (long long)br);
  s->K = b[br - (b_trans ? 1 : 2)];
  s->N = b[br - (b_trans ? 2 : 1)];
  if (a[ar - 1] != s->K) return sg_error(op, "A's last dimension %lld does not match B's K dimension %lld", a[ar - 1], s->K);
  s->batches = 1;
  if (br == 2) { /* A's leading dimensions are rows */
    s->M = 1;
    for (i = 0; i + 1 < ar; ++i) s->M *= s->out_dims[i] = a[i];
    s->out_dims[ar - 1] = s->N;
    s->out_rank = ar;
    return NULL;
  }
  if (ar < 2) return sg_error(op, "A has rank %lld with a batched B; this C kernel takes A of rank >= 2%.0lld", (long long)ar, 0);
  s->M = a[ar - 2];
  s->batch_rank = (ar > br ? ar : br) - 2;
  {
    int64_t a_step = 1, b_step = 1;
    size_t d;
    for (d = s->batch_rank; d-- > 0;) { /* right-aligned, last batch axis first */
      size_t back = s->batch_rank - d;    /* 1 for the last batch axis */
      int64_t da = back + 2 <= ar ? a[ar - 2 - back] : 1, db = back + 2 <= br ? b[br - 2 - back] : 1;
      if (da != db && da != 1 && db != 1)
        return sg_error(op, "batch dimensions %lld and %lld of A and B do not broadcast", da, db);
      s->batch_dims[d] = da > db ? da : db;
      s->a_stride[d] = da == 1 ? 0 : a_step;
      s->b_stride[d] = db == 1 ? 0 : b_step;
      a_step *= da;
      b_step *= db;
      s->batches *= s->batch_dims[d];
      s->out_dims[d] = s->batch_dims[d];
    }
  }
  s->out_dims[s->batch_rank] = s->M;
  s->out_dims[s->batch_rank + 1] = s->N;
  s->out_rank = s->batch_rank + 2;
  return NULL;
}

/* batch t's A and B, in matrices from their starts */
static void sg_batch(const SgShape* s, int64_t t, int64_t* a_mat, int64_t* b_mat) {
  size_t d;
  *a_mat = *b_mat = 0;
  for (d = s->batch_rank; d-- > 0;) {
    int64_t coord = t % s->batch_dims[d];
    t /= s->batch_dims[d];
    *a_mat += coord * s->a_stride[d];
    *b_mat += coord * s->b_stride[d];
  }
}

/* one batch's rows, K and N for sizing the buffer: from the static dimensions, else bounds (rows -1: unknown;
 * K and N: the block sizes, the most one buffer holds) */
static void sg_bounds(const int64_t* a, size_t ar, const int64_t* b, size_t br, int b_trans, int64_t* rows,
                      int64_t* K, int64_t* N) {
  size_t i;
  *rows = -1; *K = SG_KC; *N = SG_NC;
  if (b != NULL && br >= 2) {
    int64_t kb = b[br - (b_trans ? 1 : 2)], nb = b[br - (b_trans ? 2 : 1)];
    if (kb >= 0 && kb < SG_KC) *K = kb;
    if (nb >= 0 && nb < SG_NC) *N = nb;
  }
  if (a == NULL || ar < 1) return;
  if (br == 2) { /* rows: all of A's leading dimensions */
    int64_t m = 1;
    for (i = 0; i + 1 < ar; ++i) {
      if (a[i] < 0) return;
      m *= a[i];
    }
    *rows = m;
  } else if (ar >= 2 && a[ar - 2] >= 0) {
    *rows = a[ar - 2];
  }
}

static size_t sg_bytes(int64_t rows, int64_t K, int64_t N, int b_trans, int threads) {
  if (rows >= 0 && rows <= SG_SKINNY_ROWS) return 0; /* streamed, plain or transposed (sgemm_streams) */
  return (size_t)threads * sgemm_thread_floats(rows < 0 ? SG_SKINNY_ROWS + 1 : rows, K, N, b_trans) * sizeof(float);
}

/* Level 1, for MatMul (b_trans 0) and FusedMatMul (1); a few rows stream B either way, more pack it */
static OrtStatus* sg_estimate_for(const OrtEpApi* api, const OrtNode* node, int b_trans, size_t* out) {
  const int64_t *a_dims = NULL, *b_dims = NULL;
  size_t a_rank = 0, b_rank = 0;
  int64_t rows, K, N;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &a_dims, &a_rank));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 1, &b_dims, &b_rank));
  sg_bounds(a_dims, a_rank, b_dims, b_rank, b_trans, &rows, &K, &N);
  *out = sg_bytes(rows, K, N, b_trans, mnb_threads());
  return NULL;
}

static OrtStatus* sg_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)ep;
  return sg_estimate_for(api, node, 0, out);
}

static OrtStatus* sg_estimate_fused(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)ep;
  return sg_estimate_for(api, node, 1, out);
}

static OrtStatus* sg_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                             OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  SgKernel* k = (SgKernel*)this_ptr;
  int64_t rows, K, N;
  int shaped_a = num_inputs > 0 && shapes[0].state == ORT_WORKSPACE_INPUT_SHAPED;
  int shaped_b = num_inputs > 1 && shapes[1].state == ORT_WORKSPACE_INPUT_SHAPED;
  *num_slots = 0;
  k->declared = 0;
  sg_bounds(shaped_a ? shapes[0].dims : NULL, shaped_a ? shapes[0].rank : 0, shaped_b ? shapes[1].dims : NULL,
            shaped_b ? shapes[1].rank : 2, k->b_trans, &rows, &K, &N);
  if (k->pre.declared) return NULL; /* B packed at initialization: Compute reads its panels, packs nothing */
  if (sg_bytes(rows, K, N, k->b_trans, 1) == 0) return NULL;
  if (max_slots < 1) return sg_error(k->op, "declaration: %lld slots offered, 1 needed%.0lld", (long long)max_slots, 0);
  slots[0].slot_id = SG_SLOT_PACKING;
  slots[0].size_bytes = k->declared = sg_bytes(rows, K, N, k->b_trans, mnb_threads());
  *num_slots = 1;
  return NULL;
}

/* bytes of constant input `index` packed at initialization (ABI v5): B, where the product packs it */
static OrtStatus* sg_declare_prepack(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                                     int index, size_t* bytes) {
  SgKernel* k = (SgKernel*)this_ptr;
  int64_t rows, K, N;
  int shaped_a = num_inputs > 0 && shapes[0].state == ORT_WORKSPACE_INPUT_SHAPED;
  sg_bounds(shaped_a ? shapes[0].dims : NULL, shaped_a ? shapes[0].rank : 0, NULL, 2, k->b_trans, &rows, &K, &N);
  *bytes = sg_prepack_bytes(shapes, num_inputs, index, k->b_trans, rows);
  if (*bytes) k->pre.declared = 1;
  return NULL;
}

static OrtStatus* sg_prepack(OrtKernelImpl* this_ptr, const OrtValue* tensor, int index, void* packed, size_t bytes,
                             int* is_packed) {
  SgKernel* k = (SgKernel*)this_ptr;
  *is_packed = 0;
  if (index != 1) return NULL;
  return sg_prepack_into(g_api, k->op, &k->pre, tensor, k->b_trans, packed, bytes, is_packed);
}

typedef struct SgJob {
  const SgShape* shape;
  SgProblem base; /* batch 0's problem; the others differ in where A, B and C start */
  char* buffers;
  size_t thread_bytes;
  int64_t panels, width, min_chunk, items; /* items = batches x row_blocks x panels */
  int64_t row_blocks, block_rows;          /* each batch's rows in row_blocks blocks of block_rows (the last less) */
  int64_t next;                            /* the first item no thread has taken yet (atomic) */
} SgJob;

/* items [i0, i1) of the flat (batch, row block, panel) order: each (batch, row block)'s part as one column range */
static void sg_items(const SgJob* job, int64_t i0, int64_t i1, float* buffer) {
  const SgShape* s = job->shape;
  while (i0 < i1) {
    int64_t group = i0 / job->panels, t = group / job->row_blocks, r0 = group % job->row_blocks * job->block_rows;
    int64_t p0 = i0 % job->panels, p1 = i1 - group * job->panels, a_mat, b_mat;
    SgProblem p = job->base;
    if (p1 > job->panels) p1 = job->panels;
    sg_batch(s, t, &a_mat, &b_mat);
    p.M = s->M - r0 < job->block_rows ? s->M - r0 : job->block_rows;
    p.a += a_mat * s->M * s->K + r0 * s->K;
    p.b += b_mat * s->K * s->N;
    p.c += t * s->M * s->N + r0 * s->N;
    sgemm_columns(&p, p0 * job->width, p1 * job->width < s->N ? p1 * job->width : s->N, buffer);
    i0 = group * job->panels + p1;
  }
}

/* How the threads share the work. Packed path: column items, whole B blocks per chunk where the items allow
 * it; where they are too few for every thread to get SG_PANELS_PER_THREAD (N < 64 x threads), the rows are split
 * into one block per thread too (each packs the B it reads: K x N copies against M / threads x K x N
 * multiply-adds). The smallest chunk is set so that the chunks come out even (1536 columns on 2 threads: 2 x 768,
 * not 512 + 512 + 512 of which one thread runs two). */
static void sg_split(SgJob* job, const SgShape* shape, int threads) {
  int64_t rounds, share;
  job->row_blocks = 1;
  job->block_rows = shape->M;
  if (threads > 1 && !sgemm_streams(&job->base) && shape->batches * job->panels < (int64_t)threads * SG_PANELS_PER_THREAD &&
      shape->M >= (int64_t)threads * SG_MIN_BLOCK_ROWS) {
    job->row_blocks = threads;
    job->block_rows = (shape->M + threads - 1) / threads;
    job->block_rows = (job->block_rows + SG_MIN_BLOCK_ROWS - 1) / SG_MIN_BLOCK_ROWS * SG_MIN_BLOCK_ROWS;
    job->row_blocks = (shape->M + job->block_rows - 1) / job->block_rows;
  }
  job->items = shape->batches * job->row_blocks * job->panels;
  share = (job->items + threads - 1) / threads;
  /* a few rows stream B from memory: one contiguous share per thread keeps each thread's row runs longest
   * (measured at decode, 2 threads: 19 vs 22 ms per hidden-2048 step with chunks) */
  if (sgemm_streams(&job->base) && shape->batches == 1) {
    job->min_chunk = share;
    return;
  }
  job->min_chunk = SG_NC / job->width; /* a chunk packs whole B blocks (narrower ones read B in shorter runs) */
  if (job->min_chunk < 1) job->min_chunk = 1;
  rounds = job->items / ((int64_t)threads * job->min_chunk);
  if (rounds < 1) rounds = 1;
  job->min_chunk = (job->items + (int64_t)threads * rounds - 1) / ((int64_t)threads * rounds);
}

/* Chunks of items from a shared counter, a 1/(2 x threads) share of what is left and at least min_chunk; threads
 * share a cache line of Y only at a chunk's edge. */
static void sg_job(void* arg, int index, int count) {
  SgJob* job = (SgJob*)arg;
  float* buffer = job->buffers ? (float*)(job->buffers + (size_t)index * job->thread_bytes) : NULL;
  for (;;) {
    int64_t left = job->items - __atomic_load_n(&job->next, __ATOMIC_RELAXED), chunk = left / (2 * (int64_t)count);
    int64_t i0;
    if (left <= 0) break;
    if (chunk < job->min_chunk) chunk = job->min_chunk;
    i0 = __atomic_fetch_add(&job->next, chunk, __ATOMIC_RELAXED);
    if (i0 >= job->items) break;
    sg_items(job, i0, i0 + chunk < job->items ? i0 + chunk : job->items, buffer);
  }
}

static OrtStatus* sg_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  SgKernel* k = (SgKernel*)this_ptr;
  const OrtValue *av = NULL, *bv = NULL;
  OrtValue* yv = NULL;
  const int64_t *a_dims = NULL, *b_dims = NULL;
  size_t a_rank = 0, b_rank = 0;
  double work;
  const void *a = NULL, *b = NULL;
  void *y = NULL, *buffers = NULL;
  SgShape shape;
  SgJob job;
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &av));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, &bv));
  if (av == NULL) return sg_error(k->op, "input %lld is missing%.0lld", 0, 0);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(av, &a_dims, &a_rank));
  if (bv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(bv, &b_dims, &b_rank));
  else ORT_KERNEL_RETURN_IF_ERROR(sg_released_b(g_api, k->op, &k->pre, &b_dims, &b_rank)); /* released: panels */
  ORT_KERNEL_RETURN_IF_ERROR(sg_shape(k->op, a_dims, a_rank, b_dims, b_rank, k->b_trans, &shape));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(av, &a));
  if (bv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(bv, &b));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, shape.out_dims, shape.out_rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (shape.batches == 0 || shape.M == 0 || shape.N == 0) return NULL;
  memset(&job, 0, sizeof job);
  job.shape = &shape;
  job.base.a = (const float*)a; job.base.b = (const float*)b; job.base.c = (float*)y;
  job.base.M = shape.M; job.base.K = shape.K; job.base.N = shape.N;
  job.base.lda = shape.K; job.base.ldb = k->b_trans ? shape.K : shape.N; job.base.ldc = shape.N;
  job.base.b_trans = k->b_trans;
  job.base.alpha = k->alpha;
  job.base.bp = b_rank == 2 ? sg_prepacked(&k->pre, shape.K, shape.N) : NULL;

  /* 16-column items, so that a few threads split N evenly (576 = 2 x 18 x 16; in 64-column panels 5 + 4): a
   * share that ends inside a micro-kernel panel computes only the vectors it needs there (sgemm_math.c) */
  job.width = SG_ITEM_COLUMNS;
  job.panels = (shape.N + job.width - 1) / job.width;
  work = (double)shape.batches * (double)shape.M * (double)shape.N * (double)(shape.K > 0 ? shape.K : 1); /* no overflow */
  threads = mnb_threads();
  if ((double)threads > work / SG_MIN_WORK_PER_THREAD) threads = (int)(work / SG_MIN_WORK_PER_THREAD);
  if (threads < 1) threads = 1;
  if (!sgemm_streams(&job.base) && shape.K > 0 && job.base.bp == NULL) { /* packed per call: a B block per thread */
    job.thread_bytes = sgemm_thread_floats(shape.M, shape.K, shape.N, k->b_trans) * sizeof(float);
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, SG_SLOT_PACKING, k->declared, job.thread_bytes,
                                                          &threads, &buffers));
  }
  sg_split(&job, &shape, threads);
  if (threads > job.items) threads = (int)job.items;
  job.buffers = (char*)buffers;
  mnb_parallel(threads, sg_job, &job);
  return NULL;
}

static OrtStatus* sg_new(const char* op, int b_trans, float alpha, OrtKernelImpl** out) {
  SgKernel* k = (SgKernel*)cpu_kernels_new(sizeof *k, sg_compute, sg_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "MatMul: out of memory creating the kernel");
  k->op = op;
  k->b_trans = b_trans;
  k->alpha = alpha;
  k->base.DeclarePrePackedBytes = sg_declare_prepack;
  k->base.PrePackWeightInto = sg_prepack;
  k->base.flags = SG_PREPACK_FLAGS;
  *out = &k->base;
  return NULL;
}

static OrtStatus* sg_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state; (void)info;
  return sg_new("MatMul", 0, 1.0f, out);
}

static OrtStatus* sg_int_attr(const OrtKernelInfo* info, const char* name, int64_t* out) {
  return cpu_kernels_attr_int(g_api, info, name, 0, out, NULL);
}

/* FusedMatMul: transB and alpha; transA / transBatchA / transBatchB must be 0 (c_kernel_applies sends the rest to
 * the numpy kernel) */
static OrtStatus* sg_create_fused(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  static const char* zero[3] = {"transA", "transBatchA", "transBatchB"};
  int64_t trans_b = 0, v = 0;
  float alpha = 1.0f;
  int has = 0, i;
  (void)state;
  for (i = 0; i < 3; ++i) {
    ORT_KERNEL_RETURN_IF_ERROR(sg_int_attr(info, zero[i], &v));
    if (v != 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "FusedMatMul: attribute %s=%lld; this C kernel takes 0", zero[i], (long long)v);
      return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
    }
  }
  ORT_KERNEL_RETURN_IF_ERROR(sg_int_attr(info, "transB", &trans_b));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "alpha", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "alpha", &alpha));
  return sg_new("FusedMatMul", trans_b != 0, alpha, out);
}

OrtStatus* ort_cpu_ep_register_matmul(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t ff[2] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT};
  OrtStatus* st;
  g_api = api;
  st = cpu_kernels_add_onnx(api, registry, "MatMul", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, sg_create, sg_estimate);
  /* com.microsoft has no schema here: its types bind by input index (T0, T1) */
  if (!st) st = cpu_kernels_add(api, registry, "FusedMatMul", "com.microsoft", 1, ff, 2, sg_create_fused, sg_estimate_fused);
  return st;
}
