/* ONNX Conv and com.microsoft FusedConv (float32, 2-D: X of rank 4, NCHW) as ort-abi kernels; the math is
 * conv_math.c (see conv.h). FusedConv's `activation` (Relu, Sigmoid, HardSwish, LeakyRelu, HardSigmoid, Clip;
 * activation_params through the ABI's float-list getter) is applied to each output block after its bias, while
 * the block is in cache, after Z (an input of the output's shape, added after the bias: Conv + Add + activation).
 * Attributes: group (any divisor of both channel counts), kernel_shape, strides, dilations, pads, auto_pad
 * (NOTSET / SAME_UPPER / SAME_LOWER / VALID, resolved like the numpy kernel's conv_pads); optional bias B.
 *
 * Work items: (image, group, chunk of output pixels) for the GEMM path, (image, output channel) planes for a
 * depthwise one; threads take them one at a time from a shared counter. Workspace: slot 0 holds one buffer per
 * thread (conv_thread_floats: an im2col chunk of at most CONV_COLS_FLOATS floats and one sgemm packing block;
 * for a depthwise convolution the zero-padded input plane), for as many threads as Compute runs (conv_split: the
 * intra-op threads, fewer when the items or the work are too few: a tiny Conv declares one). Compute uses no more
 * threads than the slot holds buffers for; without a declaration (shapes unknown at planning) it takes the host's
 * scratch buffer. A constant W of the direct path's shapes (conv_direct_packs) is packed at initialization (ABI v5,
 * the host then releases W) and Compute takes the direct path (conv_direct.c): the slot then holds the zero-padded
 * copy of one image where the Conv pads (the declaration is the larger of the two paths' needs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define CONV_SLOT 0
#define CONV_MIN_WORK_PER_THREAD (1 << 18) /* multiply-adds below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct ConvKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  ConvAttrs attrs;
  ConvAct act;     /* FusedConv's activation (CONV_ACT_NONE for Conv) */
  size_t declared; /* bytes of slot 0 the plan holds */
  const float* wp;  /* W packed for the direct path at initialization (the host's buffer), or NULL */
  int64_t wdims[4]; /* W's shape, for Compute once the host released W */
} ConvKernel;

static OrtStatus* conv_fail(const char* what) {
  char msg[640];
  snprintf(msg, sizeof msg, "Conv: %s", what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus* conv_ints(const int64_t* v, size_t n, const char* name, size_t want, int64_t* dst, size_t* count) {
  char msg[160];
  if (v == NULL) return NULL;
  if (n != want) {
    snprintf(msg, sizeof msg, "attribute %s has %zu values; this C kernel takes %zu (a 2-D convolution)", name, n, want);
    return conv_fail(msg);
  }
  memcpy(dst, v, n * sizeof *v);
  *count = n;
  return NULL;
}

static OrtStatus* conv_auto_pad(const char* s, int* out) {
  static const char* names[4] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  int i;
  char msg[200];
  *out = CONV_AUTO_NOTSET;
  if (s == NULL) return NULL;
  for (i = 0; i < 4; ++i)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return NULL;
    }
  snprintf(msg, sizeof msg, "auto_pad '%.64s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", s);
  return conv_fail(msg);
}

/* the attributes from the kernel info (create) or the node (Level-1 estimate): exactly one is non-NULL */
static OrtStatus* conv_read_attrs(const OrtEpApi* eapi, const OrtNode* node, const OrtKernelInfo* info, ConvAttrs* a) {
  static const char* names[4] = {"kernel_shape", "strides", "dilations", "pads"};
  int64_t* dst[4];
  size_t* counts[4];
  size_t want[4] = {2, 2, 2, 4}, n = 0;
  const int64_t* v = NULL;
  const char* pad = NULL;
  int has = 0, i;
  memset(a, 0, sizeof *a);
  dst[0] = a->kernel; dst[1] = a->strides; dst[2] = a->dil; dst[3] = a->pads;
  counts[0] = &a->n_kernel; counts[1] = &a->n_strides; counts[2] = &a->n_dil; counts[3] = &a->n_pads;
  a->group = 1;
  if (info != NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "group", 1, &a->group, NULL));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "auto_pad", &pad));
  } else {
    ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_HasAttribute(node, "group", &has));
    if (has) ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeInt(node, "group", &a->group));
    ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeString(node, "auto_pad", &pad));
  }
  ORT_KERNEL_RETURN_IF_ERROR(conv_auto_pad(pad, &a->auto_pad));
  for (i = 0; i < 4; ++i) {
    v = NULL; n = 0;
    if (info != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, names[i], &v, &n));
    else ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeInts(node, names[i], &v, &n));
    ORT_KERNEL_RETURN_IF_ERROR(conv_ints(v, n, names[i], want[i], dst[i], counts[i]));
  }
  return NULL;
}

/* How a Conv of geometry `g` splits into work items, and how many of `threads` take them: no more threads than
 * items, nor than the work pays for (CONV_MIN_WORK_PER_THREAD multiply-adds each). Compute runs that many, and
 * the workspace declaration holds a buffer for each: one helper, so that the two cannot drift apart. */
typedef struct ConvSplit {
  int64_t items, chunks, width; /* chunks of `width` output pixels per (image, group) */
  int64_t splits;               /* blocks of output channels per chunk (threads with too few chunks to share) */
  int threads;
} ConvSplit;

static ConvSplit conv_split(const ConvGeom* g, int threads) {
  const int64_t hw = g->OH * g->OW;
  const double work = (double)g->N * (double)g->M * (double)hw * (double)(g->K > 0 ? g->K : 1);
  ConvSplit s;
  memset(&s, 0, sizeof s);
  s.splits = 1;
  if (g->depthwise) {
    s.items = g->N * g->M;
  } else {
    s.width = g->chunk ? g->chunk : (hw < 512 ? hw : 512);
    s.chunks = s.width > 0 ? (hw + s.width - 1) / s.width : 0;
    s.items = g->N * g->group * s.chunks;
  }
  if (!g->depthwise && s.items > 0 && s.items < threads) { /* few pixel chunks (a late layer's 14 x 14): split the channels */
    int64_t splits = (threads + s.items - 1) / s.items;
    if (splits > g->Mg / CONV_MIN_SPLIT_ROWS) splits = g->Mg / CONV_MIN_SPLIT_ROWS;
    if (splits > 1) {
      s.splits = splits;
      s.items *= splits;
    }
  }
  if (threads > s.items) threads = (int)s.items;
  if ((double)threads > work / CONV_MIN_WORK_PER_THREAD) threads = (int)(work / CONV_MIN_WORK_PER_THREAD);
  s.threads = threads < 1 ? 1 : threads;
  return s;
}

/* CpuXwBytes: a buffer for each thread Compute runs (conv_split), or, where the weights are packed for the direct
 * path, its padded copy of the image if that is more: whichever path Compute takes fits (the Level-1 estimate cannot
 * know whether W will be a constant the host lets the kernel pack) */
/* bytes of W [M, Cg, KH, KW] packed for the direct path in `group` groups, 0 where it is not packed
 * (conv_direct_packs; x: X's dims where known, else NULL: a Conv along H only of known width 1, magika's 5 x 1
 * over 512 rows, stays on im2col, measured 6% faster there) */
static size_t conv_packed_w_bytes(int64_t group, const int64_t* w, const int64_t* x) {
  if (group < 1 || w[0] <= 0 || w[0] % group) return 0;
  if (x != NULL && x[3] == 1 && w[3] == 1) return 0;
  if (!conv_direct_packs(w[0], w[1], group, w[2], w[3])) return 0;
  return conv_direct_packed_floats(w[0], w[1], group, w[2], w[3]) * sizeof(float);
}

static int conv_workspace(const void* attrs, const int64_t* x, const int64_t* w, size_t* bytes, char* err, size_t len) {
  ConvGeom g;
  size_t q;
  if (conv_geometry((const ConvAttrs*)attrs, x, w, &g, err, len)) return 1;
  *bytes = (size_t)conv_split(&g, mnb_threads()).threads * conv_thread_floats(&g) * sizeof(float);
  q = conv_packed_w_bytes(g.group, w, x) ? conv_direct_floats(&g) * sizeof(float) : 0;
  if (q > *bytes) *bytes = q;
  return 0;
}

/* ABI v5 pre-packing: a constant W of the direct path's shapes (conv_packed_w_bytes) into its channel blocks */
static OrtStatus* conv_declare_prepack(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes,
                                       size_t num_inputs, int index, size_t* bytes) {
  ConvKernel* k = (ConvKernel*)this_ptr;
  const OrtWorkspaceInputShape *w, *x;
  *bytes = 0;
  if (index != 1 || num_inputs < 2) return NULL;
  w = &shapes[1];
  x = &shapes[0];
  if (w->state != ORT_WORKSPACE_INPUT_SHAPED || w->rank != 4 || w->dims == NULL) return NULL;
  if (w->elem_type != 0 && w->elem_type != ORT_TENSOR_ELEMENT_FLOAT) return NULL;
  *bytes = conv_packed_w_bytes(k->attrs.group, w->dims,
                               x->state == ORT_WORKSPACE_INPUT_SHAPED && x->rank == 4 && x->dims != NULL ? x->dims : NULL);
  return NULL;
}

static OrtStatus* conv_prepack(OrtKernelImpl* this_ptr, const OrtValue* tensor, int index, void* packed, size_t bytes,
                               int* is_packed) {
  ConvKernel* k = (ConvKernel*)this_ptr;
  const int64_t* d = NULL;
  size_t rank = 0;
  int32_t type = 0;
  const void* data = NULL;
  *is_packed = 0;
  if (index != 1) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(tensor, &type));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(tensor, &d, &rank));
  if (type != ORT_TENSOR_ELEMENT_FLOAT || rank != 4 || conv_packed_w_bytes(k->attrs.group, d, NULL) == 0 ||
      conv_packed_w_bytes(k->attrs.group, d, NULL) > bytes)
    return NULL; /* not the weights declared: read per call */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(tensor, &data));
  conv_direct_pack((const float*)data, d[0], d[1], k->attrs.group, d[2], d[3], (float*)packed);
  memcpy(k->wdims, d, sizeof k->wdims);
  k->wp = (const float*)packed;
  *is_packed = 1;
  return NULL;
}

static OrtStatus* conv_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  ConvAttrs a;
  (void)ep;
  *out = 0;
  ORT_KERNEL_RETURN_IF_ERROR(conv_read_attrs(api, node, NULL, &a));
  return cpu_kernels_estimate_xw(api, node, &a, conv_workspace, out);
}

static OrtStatus* conv_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                               OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  ConvKernel* k = (ConvKernel*)this_ptr;
  return cpu_kernels_declare_xw(g_api, "Conv", CONV_SLOT, &k->attrs, conv_workspace, shapes, num_inputs, slots,
                                max_slots, num_slots, &k->declared);
}

typedef struct ConvJob {
  const ConvGeom* g;
  const float *x, *w, *b, *z; /* z: FusedConv's Z (NULL without one) */
  float* y;
  char* buffers;
  size_t thread_bytes;
  int64_t items, chunks, width, splits; /* as conv_split */
  int64_t next;                         /* the first item no thread has taken (atomic) */
  ConvAct act;
} ConvJob;

static void conv_job(void* arg, int index, int count) {
  ConvJob* job = (ConvJob*)arg;
  const ConvGeom* g = job->g;
  float* work = job->buffers ? (float*)(job->buffers + (size_t)index * job->thread_bytes) : NULL;
  int64_t tap[g->depthwise ? g->KH * g->KW : 1]; /* the depthwise taps' offsets, once per thread */
  (void)count;
  if (g->depthwise) conv_depthwise_taps(g, tap);
  for (;;) {
    int64_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (i >= job->items) break;
    if (g->depthwise) {
      conv_depthwise_plane(g, tap, job->x, job->w, job->b, job->z, job->y, i / g->M, i % g->M, &job->act, work);
    } else {
      const int64_t s = i % job->splits, rest = i / job->splits;
      const int64_t m0 = g->Mg * s / job->splits, m1 = g->Mg * (s + 1) / job->splits;
      int64_t c = rest % job->chunks, pair = rest / job->chunks, n0 = c * job->width, n1 = n0 + job->width;
      if (n1 > g->OH * g->OW) n1 = g->OH * g->OW;
      conv_gemm_chunk(g, job->x, job->w, job->b, job->z, job->y, pair / g->group, pair % g->group, m0, m1, n0, n1,
                      &job->act, work);
    }
  }
}

/* the direct path, one image at a time: Q's channels (a padded Conv) split evenly across the threads, then the
 * output rows in chunks from a shared counter */
typedef struct ConvDirectJob {
  const ConvGeom* g;
  const float *x, *wp, *b, *z; /* x, z: this image's */
  float *y, *q;
  int64_t items, chunk, next; /* next: the first item no thread has taken (atomic) */
  int prepare;                /* 1: build Q, 0: the rows */
  ConvAct act;
} ConvDirectJob;

static void conv_direct_job(void* arg, int index, int count) {
  ConvDirectJob* job = (ConvDirectJob*)arg;
  const ConvGeom* g = job->g;
  if (job->prepare) {
    conv_direct_prepare(g, job->x, job->q, g->C * index / count, g->C * (index + 1) / count);
    return;
  }
  for (;;) {
    int64_t i0 = __atomic_fetch_add(&job->next, job->chunk, __ATOMIC_RELAXED);
    if (i0 >= job->items) break;
    conv_direct_rows(g, job->q != NULL ? job->q : job->x, job->wp, job->b, job->z, job->y, i0,
                     i0 + job->chunk < job->items ? i0 + job->chunk : job->items, &job->act);
  }
}

static OrtStatus* conv_direct_run(OrtKernelContext* ctx, const ConvKernel* k, const ConvGeom* given, const float* x,
                                  const float* b, const float* z, float* y) {
  ConvGeom geom;
  const ConvGeom* g = &geom;
  ConvDirectJob job;
  void* q = NULL;
  size_t q_bytes;
  double work;
  int one = 1, threads = mnb_threads();
  int64_t image;
  conv_direct_geometry(given, &geom);
  q_bytes = conv_direct_floats(g) * sizeof(float); /* the declaration's (the same floats either way) */
  work = (double)g->N * (double)g->M * (double)g->OH * (double)g->OW * (double)g->K;
  if (q_bytes > 0)
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, CONV_SLOT, k->declared, q_bytes, &one, &q));
  memset(&job, 0, sizeof job);
  job.g = g; job.wp = k->wp; job.b = b; job.q = (float*)q; job.act = k->act;
  job.items = conv_direct_items(g);
  if ((double)threads > work / CONV_MIN_WORK_PER_THREAD) threads = (int)(work / CONV_MIN_WORK_PER_THREAD);
  if (threads > job.items) threads = (int)job.items;
  if (threads < 1) threads = 1;
  job.chunk = job.items / (4 * (int64_t)threads);
  if (job.chunk < 1) job.chunk = 1;
  for (image = 0; image < g->N; ++image) {
    job.x = x + image * g->C * g->H * g->W;
    job.y = y + image * g->M * g->OH * g->OW;
    job.z = z != NULL ? z + image * g->M * g->OH * g->OW : NULL;
    if (q != NULL) {
      job.prepare = 1;
      mnb_parallel(threads < g->C ? threads : (int)g->C, conv_direct_job, &job);
    }
    job.prepare = 0;
    job.next = 0;
    mnb_parallel(threads, conv_direct_job, &job);
  }
  return NULL;
}

static OrtStatus* conv_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  ConvKernel* k = (ConvKernel*)this_ptr;
  const OrtValue *xv = NULL, *wv = NULL, *bv = NULL, *zv = NULL;
  OrtValue* yv = NULL;
  const int64_t *xd = NULL, *wd = NULL, *bd = NULL;
  size_t xr = 0, wr = 0, br = 0, n_in = 0;
  const void *x = NULL, *w = NULL, *b = NULL, *z = NULL;
  void *y = NULL, *buffers = NULL;
  int64_t ydims[4], hw;
  ConvGeom g;
  ConvSplit split;
  ConvJob job;
  char err[512];
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, &wv));
  if (n_in > 2) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 2, &bv));
  if (n_in > 3) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 3, &zv));
  if (xv == NULL) return conv_fail("input X is missing");
  if (wv == NULL && k->wp == NULL)
    return conv_fail("input W is missing; W is required (the host releases a constant W only after this kernel packed it)");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &xd, &xr));
  if (wv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(wv, &wd, &wr));
  else { wd = k->wdims; wr = 4; } /* released after packing: the packed copy's shape */
  if (xr != 4 || wr != 4) {
    snprintf(err, sizeof err, "X has rank %zu and W rank %zu; this C kernel takes rank 4 (a 2-D convolution)", xr, wr);
    return conv_fail(err);
  }
  if (conv_geometry(&k->attrs, xd, wd, &g, err, sizeof err)) return conv_fail(err);
  if (bv != NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(bv, &bd, &br));
    if (br != 1 || bd[0] != g.M) {
      snprintf(err, sizeof err, "bias B must have shape [%lld] (one value per output channel); got rank %zu%s",
               (long long)g.M, br, br == 1 ? " of another length" : "");
      return conv_fail(err);
    }
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(bv, &b));
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  if (wv != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(wv, &w));
  ydims[0] = g.N; ydims[1] = g.M; ydims[2] = g.OH; ydims[3] = g.OW;
  if (zv != NULL) { /* FusedConv's Z: exactly the output's shape */
    const int64_t* zd = NULL;
    size_t zr = 0;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(zv, &zd, &zr));
    if (zr != 4 || zd[0] != ydims[0] || zd[1] != ydims[1] || zd[2] != ydims[2] || zd[3] != ydims[3]) {
      snprintf(err, sizeof err, "Z must have the output's shape [%lld, %lld, %lld, %lld]; got rank %zu%s",
               (long long)ydims[0], (long long)ydims[1], (long long)ydims[2], (long long)ydims[3], zr,
               zr == 4 ? " of other extents" : "");
      return conv_fail(err);
    }
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(zv, &z));
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, ydims, 4, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  hw = g.OH * g.OW;
  if (g.N == 0 || g.M == 0 || hw == 0) return NULL;
  if (k->wp != NULL && memcmp(wd, k->wdims, sizeof k->wdims) == 0) /* W packed at initialization */
    return conv_direct_run(ctx, k, &g, (const float*)x, (const float*)b, (const float*)z, (float*)y);
  if (w == NULL) return conv_fail("input W is missing and its packed copy has another shape");
  memset(&job, 0, sizeof job);
  job.g = &g;
  job.x = (const float*)x; job.w = (const float*)w; job.b = (const float*)b; job.z = (const float*)z;
  job.y = (float*)y;
  job.act = k->act;
  split = conv_split(&g, mnb_threads()); /* the threads the declaration holds buffers for */
  job.items = split.items; job.chunks = split.chunks; job.width = split.width; job.splits = split.splits;
  threads = split.threads;
  job.thread_bytes = conv_thread_floats(&g) * sizeof(float);
  if (job.thread_bytes > 0) {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, CONV_SLOT, k->declared, job.thread_bytes, &threads, &buffers));
    job.buffers = (char*)buffers;
  }
  mnb_parallel(threads, conv_job, &job);
  return NULL;
}

static OrtStatus* conv_make(const OrtKernelInfo* info, const ConvAct* act, OrtKernelImpl** out) {
  ConvKernel* k;
  ConvAttrs a;
  ORT_KERNEL_RETURN_IF_ERROR(conv_read_attrs(NULL, NULL, info, &a));
  k = (ConvKernel*)cpu_kernels_new(sizeof *k, conv_compute, conv_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Conv: out of memory creating the kernel");
  k->attrs = a;
  k->act = *act;
  k->base.DeclarePrePackedBytes = conv_declare_prepack; /* constant W packed for the direct path */
  k->base.PrePackWeightInto = conv_prepack;
  k->base.flags = ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS;
  *out = &k->base;
  return NULL;
}

static OrtStatus* conv_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ConvAct act = {CONV_ACT_NONE, 0.0f, 0.0f};
  (void)state;
  return conv_make(info, &act, out);
}

/* FusedConv: the activation by name, its activation_params (LeakyRelu: alpha; HardSigmoid: alpha, beta; Clip: min,
 * max) through the version-4 float-list getter */
static OrtStatus* fused_conv_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  static const char* names[6] = {"Relu", "Sigmoid", "HardSwish", "LeakyRelu", "HardSigmoid", "Clip"};
  static const int kinds[6] = {CONV_ACT_RELU, CONV_ACT_SIGMOID, CONV_ACT_HARD_SWISH, CONV_ACT_LEAKY_RELU,
                               CONV_ACT_HARD_SIGMOID, CONV_ACT_CLIP};
  static const size_t wants[6] = {0, 0, 0, 1, 2, 2};
  ConvAct act = {CONV_ACT_NONE, 0.0f, 0.0f};
  const char* name = NULL;
  const float* params = NULL;
  size_t count = 0, want = 0;
  char msg[320];
  int i;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "activation", &name));
  for (i = 0; name != NULL && i < 6; ++i)
    if (strcmp(name, names[i]) == 0) {
      act.kind = kinds[i];
      want = wants[i];
    }
  if (act.kind == CONV_ACT_NONE) {
    snprintf(msg, sizeof msg, "FusedConv: activation '%.64s' is not one this C kernel applies (Relu, Sigmoid, "
             "HardSwish, LeakyRelu, HardSigmoid, Clip); run the node with the numpy FusedConv kernel",
             name != NULL ? name : "(absent)");
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  if (g_api->version >= ORT_KERNEL_ABI_VERSION_FLOAT_LISTS)
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloats(info, "activation_params", &params, &count));
  else if (want > 0) {
    snprintf(msg, sizeof msg, "FusedConv: activation '%s' needs activation_params, which a host of ABI version %u "
             "cannot give (version %d can); run the node with the numpy FusedConv kernel", name,
             (unsigned)g_api->version, ORT_KERNEL_ABI_VERSION_FLOAT_LISTS);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  if (count != want) {
    snprintf(msg, sizeof msg, "FusedConv: activation '%s' takes %zu activation_params, the node has %zu; give "
             "LeakyRelu alpha, HardSigmoid alpha and beta, Clip min and max", name, want, count);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  if (want > 0) act.a = params[0];
  if (want > 1) act.b = params[1];
  return conv_make(info, &act, out);
}

OrtStatus* ort_cpu_ep_register_conv(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t f[1] = {ORT_TENSOR_ELEMENT_FLOAT};
  OrtStatus* st;
  g_api = api;
  st = cpu_kernels_add_onnx(api, registry, "Conv", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, conv_create, conv_estimate);
  if (!st) st = cpu_kernels_add(api, registry, "FusedConv", "com.microsoft", 1, f, 1, fused_conv_create, conv_estimate);
  return st;
}
