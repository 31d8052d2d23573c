/* ONNX ConvTranspose (float32, 2-D: X of rank 4, NCHW; W [C, M / group, KH, KW]) as an ort-abi kernel, computed as
 * onnxruntime does: per (image, group) the columns W_g^T (Mg*KH*KW x Cg) @ X_g (Cg x H*W) through the MatMul
 * kernel's sgemm, then col2im: every column (input pixel) adds its Mg*KH*KW values into the output taps it reaches.
 * Attributes: group, kernel_shape (else W's), strides, dilations, pads, output_padding, output_shape, auto_pad
 * (NOTSET / SAME_UPPER / SAME_LOWER / VALID): with output_shape or a SAME auto_pad (output = input * stride) the
 * total padding is split begin = total / 2 for SAME_UPPER, else end = total / 2 (onnxruntime's, the spec's); an
 * output_shape past the unpadded result by less than a stride adds cells of only the bias, further is refused (both as
 * onnxruntime). Optional bias B [M].
 *
 * Work items: (image, group, block of output channels), each owning its channels' output planes (filled with the
 * bias, then the taps added), so threads never write the same pixel; within an item the input pixels go in chunks of
 * whole rows (about CT_CHUNK pixels). Where kernel == stride without dilation, pads or output padding (upsampling
 * by tiles, ppocrv4_det's) each output pixel gets one tap: its rows are written once, bias added, no fill. Workspace: slot 0 holds one buffer per thread (the item's W_g^T rows, one
 * chunk of columns and an sgemm packing block, ct_thread_floats); without a declaration (shapes unknown at planning)
 * Compute takes the host's scratch buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "sgemm.h"

#define CT_SLOT 0
#define CT_CHUNK 512                     /* input pixels per chunk of columns (whole rows, at least one) */
#define CT_MIN_WORK_PER_THREAD (1 << 18) /* multiply-adds below which an extra thread does not pay */

enum { CT_NOTSET = 0, CT_SAME_UPPER, CT_SAME_LOWER, CT_VALID };

static const OrtKernelApi* g_api = NULL;

typedef struct CtAttrs {
  int64_t group;
  int auto_pad;
  size_t n[6]; /* counts of kernel_shape, strides, dilations, pads, output_padding, output_shape (0: absent) */
  int64_t v[6][4];
} CtAttrs;

typedef struct CtGeom {
  int64_t N, C, H, W, M, KH, KW, OH, OW, group, Cg, Mg, KK;
  int64_t sh, sw, dh, dw, pt, pl;
  int64_t rows; /* input rows per chunk of columns */
  int tiles;    /* kernel == stride, no dilation, pads or output padding: each output pixel gets one tap */
} CtGeom;

typedef struct CtKernel {
  OrtKernelImpl base;
  CtAttrs attrs;
  size_t declared;
} CtKernel;

static const char* const g_names[6] = {"kernel_shape", "strides", "dilations", "pads", "output_padding", "output_shape"};

static OrtStatus* ct_fail(const char* what) {
  char msg[640];
  snprintf(msg, sizeof msg, "ConvTranspose: %s", what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* the attributes from the kernel info (create) or the node (Level-1 estimate): exactly one is non-NULL */
static OrtStatus* ct_read_attrs(const OrtEpApi* eapi, const OrtNode* node, const OrtKernelInfo* info, CtAttrs* a) {
  static const char* pads[4] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  static const size_t want[6] = {2, 2, 2, 4, 2, 2};
  const char* pad = NULL;
  char msg[240];
  int has = 0, i;
  memset(a, 0, sizeof *a);
  a->group = 1;
  if (info != NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "group", 1, &a->group, NULL));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "auto_pad", &pad));
  } else {
    ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_HasAttribute(node, "group", &has));
    if (has) ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeInt(node, "group", &a->group));
    ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeString(node, "auto_pad", &pad));
  }
  for (i = 0; pad != NULL && i < 4 && strcmp(pad, pads[i]) != 0; ++i) {}
  if (pad != NULL && i == 4) {
    snprintf(msg, sizeof msg, "auto_pad '%.64s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", pad);
    return ct_fail(msg);
  }
  a->auto_pad = pad != NULL ? i : CT_NOTSET;
  for (i = 0; i < 6; ++i) {
    const int64_t* v = NULL;
    size_t n = 0;
    if (info != NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInts(info, g_names[i], &v, &n));
    else ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeInts(node, g_names[i], &v, &n));
    if (v == NULL) continue;
    if (i == 5 && n == 4) { v += 2; n = 2; } /* output_shape may name N and C too */
    if (n != want[i]) {
      snprintf(msg, sizeof msg, "attribute %s has %zu values; this C kernel takes %zu (a 2-D transposed convolution)",
               g_names[i], n, want[i]);
      return ct_fail(msg);
    }
    memcpy(a->v[i], v, n * sizeof *v);
    a->n[i] = n;
  }
  return NULL;
}

static int64_t ct_at(const CtAttrs* a, int which, int k, int64_t dflt) { return a->n[which] ? a->v[which][k] : dflt; }

/* one spatial axis: output extent and begin pad from input extent `in`, kernel, stride, dilation; 0 or a message */
static int ct_axis(const CtAttrs* a, int k, int64_t in, int64_t kernel, int64_t* out, int64_t* begin, char* err,
                   size_t len) {
  const int64_t s = ct_at(a, 1, k, 1), d = ct_at(a, 2, k, 1), adj = ct_at(a, 4, k, 0);
  const int64_t full = s * (in - 1) + adj + (kernel - 1) * d + 1;
  if (s < 1 || d < 1 || adj < 0) {
    snprintf(err, len, "strides %lld, dilations %lld and output_padding %lld on axis %d: strides and dilations must "
             "be >= 1 and output_padding >= 0", (long long)s, (long long)d, (long long)adj, k);
    return 1;
  }
  if (a->n[5] || a->auto_pad == CT_SAME_UPPER || a->auto_pad == CT_SAME_LOWER) {
    const int64_t target = a->n[5] ? a->v[5][k] : in * s, total = full - target;
    /* past the unpadded output: onnxruntime takes it (no pads, the extra cells only the bias) while the output
     * still implies this input extent, else refuses it */
    if (total < 0 && (target - adj - ((kernel - 1) * d + 1)) / s + 1 != in) {
      snprintf(err, len, "output_shape %lld on axis %d is past the unpadded output %lld of this input, kernel, "
               "strides and output_padding by a stride or more; raise output_padding or lower output_shape",
               (long long)target, k, (long long)full);
      return 1;
    }
    *begin = total < 0 ? 0 : (a->auto_pad == CT_SAME_UPPER ? total / 2 : total - total / 2);
    *out = target;
  } else if (a->auto_pad == CT_VALID) {
    *begin = 0;
    *out = full;
  } else {
    const int64_t b = ct_at(a, 3, k, 0), e = ct_at(a, 3, k + 2, 0);
    if (b < 0 || e < 0) {
      snprintf(err, len, "pads %lld, %lld on axis %d are negative; pads must be >= 0", (long long)b, (long long)e, k);
      return 1;
    }
    *begin = b;
    *out = full - b - e;
  }
  if (*out < 1) {
    snprintf(err, len, "the output extent on axis %d would be %lld (input %lld, kernel %lld); lower the pads",
             k, (long long)*out, (long long)in, (long long)kernel);
    return 1;
  }
  return 0;
}

static int ct_geometry(const CtAttrs* a, const int64_t* x, const int64_t* w, CtGeom* g, char* err, size_t len) {
  memset(g, 0, sizeof *g);
  g->N = x[0]; g->C = x[1]; g->H = x[2]; g->W = x[3];
  g->group = a->group;
  if (g->group < 1 || g->C % g->group || w[0] != g->C) {
    snprintf(err, len, "group %lld and W of %lld input channels do not fit X's %lld channels: W[0] must equal X's "
             "channel count, which group must divide", (long long)g->group, (long long)w[0], (long long)g->C);
    return 1;
  }
  g->Cg = g->C / g->group;
  g->Mg = w[1];
  g->M = g->Mg * g->group;
  g->KH = ct_at(a, 0, 0, w[2]);
  g->KW = ct_at(a, 0, 1, w[3]);
  if (g->KH != w[2] || g->KW != w[3]) {
    snprintf(err, len, "kernel_shape [%lld, %lld] differs from W's spatial dims [%lld, %lld]; drop kernel_shape or "
             "make it W's", (long long)g->KH, (long long)g->KW, (long long)w[2], (long long)w[3]);
    return 1;
  }
  g->KK = g->KH * g->KW;
  g->sh = ct_at(a, 1, 0, 1); g->sw = ct_at(a, 1, 1, 1);
  g->dh = ct_at(a, 2, 0, 1); g->dw = ct_at(a, 2, 1, 1);
  if (ct_axis(a, 0, g->H, g->KH, &g->OH, &g->pt, err, len) || ct_axis(a, 1, g->W, g->KW, &g->OW, &g->pl, err, len))
    return 1;
  g->tiles = g->KH == g->sh && g->KW == g->sw && g->dh == 1 && g->dw == 1 && g->pt == 0 && g->pl == 0 &&
             g->OH == g->H * g->sh && g->OW == g->W * g->sw;
  g->rows = g->W > 0 && g->W < CT_CHUNK ? CT_CHUNK / g->W : 1;
  if (g->rows > g->H) g->rows = g->H > 0 ? g->H : 1;
  return 0;
}

static size_t ct_round16(size_t n) { return (n + 15) / 16 * 16; }

static size_t ct_thread_floats(const CtGeom* g) {
  const int64_t rows = g->Mg * g->KK, width = g->rows * g->W;
  if (rows == 0 || g->Cg == 0 || width == 0) return 0;
  return ct_round16((size_t)(rows * g->Cg)) + ct_round16((size_t)(rows * width)) +
         sgemm_thread_floats(rows, g->Cg, width, 0);
}

typedef struct CtJob {
  const CtGeom* g;
  const float *x, *w, *b;
  float* y;
  char* buffers;
  size_t thread_bytes;
  int64_t items, blocks, per_block; /* blocks of per_block output channels per (image, group) */
  int64_t next;                     /* the first item no thread has taken (atomic) */
} CtJob;

/* add the columns of input rows [ih0, ih1) (cols: `rows` x width, row (m, kh, kw)) into the output planes y */
CPU_KERNELS_CLONES
static void ct_col2im(const CtGeom* g, const float* cols, int64_t channels, int64_t ih0, int64_t ih1, float* y) {
  const int64_t width = (ih1 - ih0) * g->W, plane = g->OH * g->OW;
  int64_t m, kh, kw, ih, iw;
  for (m = 0; m < channels; ++m)
    for (kh = 0; kh < g->KH; ++kh)
      for (kw = 0; kw < g->KW; ++kw) {
        const float* src = cols + ((m * g->KH + kh) * g->KW + kw) * width;
        const int64_t off = kw * g->dw - g->pl; /* ow = iw * sw + off */
        const int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
        const int64_t hi = g->OW - off <= 0 ? 0 : (g->OW - off - 1) / g->sw + 1;
        const int64_t iw1 = hi < g->W ? hi : g->W;
        for (ih = ih0; ih < ih1; ++ih, src += g->W) {
          const int64_t oh = ih * g->sh - g->pt + kh * g->dh;
          float* row;
          if (oh < 0 || oh >= g->OH) continue;
          row = y + m * plane + oh * g->OW; /* column iw * sw + off, >= 0 from iw = lo on */
          if (g->sw == 1)
            for (iw = lo; iw < iw1; ++iw) row[iw + off] += src[iw];
          else
            for (iw = lo; iw < iw1; ++iw) row[iw * g->sw + off] += src[iw];
        }
      }
}

/* the tiling case (g->tiles): output row ih * KH + kh of channel m is, column by column, the taps (m, kh, kw) of input
 * row ih interleaved, plus the bias: written once, no fill */
CPU_KERNELS_CLONES
static void ct_tiles(const CtGeom* g, const float* cols, int64_t channels, int64_t ih0, int64_t ih1, const float* bias,
                     float* y) {
  const int64_t width = (ih1 - ih0) * g->W, plane = g->OH * g->OW;
  int64_t m, kh, kw, ih, iw;
  for (m = 0; m < channels; ++m) {
    const float b = bias != NULL ? bias[m] : 0.0f;
    for (kh = 0; kh < g->KH; ++kh)
      for (ih = ih0; ih < ih1; ++ih) {
        float* row = y + m * plane + (ih * g->KH + kh) * g->OW;
        const float* src = cols + ((m * g->KH + kh) * g->KW) * width + (ih - ih0) * g->W;
        if (g->KW == 2) {
          const float *s0 = src, *s1 = src + width;
          for (iw = 0; iw < g->W; ++iw) {
            row[2 * iw] = s0[iw] + b;
            row[2 * iw + 1] = s1[iw] + b;
          }
        } else {
          for (kw = 0; kw < g->KW; ++kw, src += width)
            for (iw = 0; iw < g->W; ++iw) row[iw * g->KW + kw] = src[iw] + b;
        }
      }
  }
}

static void ct_item(const CtJob* job, int64_t item, float* work) {
  const CtGeom* g = job->g;
  const int64_t blk = item % job->blocks, pair = item / job->blocks, image = pair / g->group, grp = pair % g->group;
  const int64_t m0 = blk * job->per_block, m1 = m0 + job->per_block < g->Mg ? m0 + job->per_block : g->Mg;
  const int64_t rows = (m1 - m0) * g->KK, hw = g->H * g->W, plane = g->OH * g->OW;
  const float* xg = job->x + (image * g->C + grp * g->Cg) * hw;
  const float* wg = job->w + grp * g->Cg * g->Mg * g->KK + m0 * g->KK; /* W[c, m, kh, kw], c of this group */
  float* yg = job->y + (image * g->M + grp * g->Mg + m0) * plane;
  float* wt = work; /* W_g^T rows (m, kh, kw) of this block: rows x Cg */
  float* cols = wt + ct_round16((size_t)(g->Mg * g->KK * g->Cg));
  float* pack = cols + ct_round16((size_t)(g->Mg * g->KK * g->rows * g->W));
  int64_t c, r, m, ih0, i;
  SgProblem p;
  for (c = 0; c < g->Cg; ++c)
    for (r = 0; r < rows; ++r) wt[r * g->Cg + c] = wg[c * g->Mg * g->KK + r];
  for (m = m0; m < m1 && !g->tiles; ++m) {
    const float b = job->b != NULL ? job->b[grp * g->Mg + m] : 0.0f;
    float* dst = yg + (m - m0) * plane;
    for (i = 0; i < plane; ++i) dst[i] = b;
  }
  memset(&p, 0, sizeof p);
  p.a = wt; p.M = rows; p.K = g->Cg; p.lda = g->Cg; p.ldb = hw; p.alpha = 1.0f;
  for (ih0 = 0; ih0 < g->H; ih0 += g->rows) {
    const int64_t ih1 = ih0 + g->rows < g->H ? ih0 + g->rows : g->H, width = (ih1 - ih0) * g->W;
    p.b = xg + ih0 * g->W; p.N = width; p.c = cols; p.ldc = width;
    sgemm_columns(&p, 0, width, pack);
    if (g->tiles) ct_tiles(g, cols, m1 - m0, ih0, ih1, job->b != NULL ? job->b + grp * g->Mg + m0 : NULL, yg);
    else ct_col2im(g, cols, m1 - m0, ih0, ih1, yg);
  }
}

static void ct_job(void* arg, int index, int count) {
  CtJob* job = (CtJob*)arg;
  float* work = (float*)(job->buffers + (size_t)index * job->thread_bytes);
  (void)count;
  for (;;) {
    int64_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (i >= job->items) break;
    ct_item(job, i, work);
  }
}

static size_t ct_bytes(const CtGeom* g, int threads) { return (size_t)threads * ct_thread_floats(g) * sizeof(float); }

/* CpuXwBytes: the workspace of all threads */
static int ct_workspace(const void* attrs, const int64_t* x, const int64_t* w, size_t* bytes, char* err, size_t len) {
  CtGeom g;
  if (ct_geometry((const CtAttrs*)attrs, x, w, &g, err, len)) return 1;
  *bytes = ct_bytes(&g, mnb_threads());
  return 0;
}

static OrtStatus* ct_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  CtAttrs a;
  (void)ep;
  *out = 0;
  ORT_KERNEL_RETURN_IF_ERROR(ct_read_attrs(api, node, NULL, &a));
  return cpu_kernels_estimate_xw(api, node, &a, ct_workspace, out);
}

static OrtStatus* ct_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                             OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  CtKernel* k = (CtKernel*)this_ptr;
  return cpu_kernels_declare_xw(g_api, "ConvTranspose", CT_SLOT, &k->attrs, ct_workspace, shapes, num_inputs, slots,
                                max_slots, num_slots, &k->declared);
}

static OrtStatus* ct_inputs(OrtKernelContext* ctx, const OrtValue** xv, const OrtValue** wv, const OrtValue** bv) {
  size_t n_in = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, xv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 1, wv));
  if (n_in > 2) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 2, bv));
  return *xv == NULL || *wv == NULL ? ct_fail("input X or W is missing") : NULL;
}

static OrtStatus* ct_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  CtKernel* k = (CtKernel*)this_ptr;
  const OrtValue *xv = NULL, *wv = NULL, *bv = NULL;
  OrtValue* yv = NULL;
  const int64_t *xd = NULL, *wd = NULL, *bd = NULL;
  size_t xr = 0, wr = 0, br = 0;
  const void *x = NULL, *w = NULL, *b = NULL;
  void *y = NULL, *buffers = NULL;
  int64_t ydims[4], pairs;
  double work;
  CtGeom g;
  CtJob job;
  char err[512];
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(ct_inputs(ctx, &xv, &wv, &bv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &xd, &xr));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(wv, &wd, &wr));
  if (xr != 4 || wr != 4) {
    snprintf(err, sizeof err, "X has rank %zu and W rank %zu; this C kernel takes rank 4 (a 2-D transposed "
             "convolution)", xr, wr);
    return ct_fail(err);
  }
  if (ct_geometry(&k->attrs, xd, wd, &g, err, sizeof err)) return ct_fail(err);
  if (bv != NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(bv, &bd, &br));
    if (br != 1 || bd[0] != g.M) {
      snprintf(err, sizeof err, "bias B must have shape [%lld] (one value per output channel); got rank %zu%s",
               (long long)g.M, br, br == 1 ? " of another length" : "");
      return ct_fail(err);
    }
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(bv, &b));
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(wv, &w));
  ydims[0] = g.N; ydims[1] = g.M; ydims[2] = g.OH; ydims[3] = g.OW;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, ydims, 4, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (g.N == 0 || g.M == 0) return NULL;
  memset(&job, 0, sizeof job);
  job.g = &g;
  job.x = (const float*)x; job.w = (const float*)w; job.b = (const float*)b; job.y = (float*)y;
  if (ct_thread_floats(&g) == 0) { /* no input pixels or channels: the output is the bias */
    job.blocks = 1; job.per_block = g.Mg;
    for (pairs = 0; pairs < g.N * g.group; ++pairs) {
      int64_t m, i, plane = g.OH * g.OW;
      for (m = 0; m < g.Mg; ++m)
        for (i = 0; i < plane; ++i)
          job.y[(pairs * g.Mg + m) * plane + i] = job.b != NULL ? job.b[(pairs % g.group) * g.Mg + m] : 0.0f;
    }
    return NULL;
  }
  work = (double)g.N * (double)g.M * (double)g.KK * (double)g.Cg * (double)(g.H * g.W);
  threads = mnb_threads();
  if ((double)threads > work / CT_MIN_WORK_PER_THREAD) threads = (int)(work / CT_MIN_WORK_PER_THREAD);
  if (threads < 1) threads = 1;
  pairs = g.N * g.group;
  job.blocks = pairs >= threads ? 1 : (threads + pairs - 1) / pairs;
  if (job.blocks > g.Mg) job.blocks = g.Mg;
  job.per_block = (g.Mg + job.blocks - 1) / job.blocks;
  job.blocks = (g.Mg + job.per_block - 1) / job.per_block;
  job.items = pairs * job.blocks;
  if (threads > job.items) threads = (int)job.items;
  job.thread_bytes = ct_thread_floats(&g) * sizeof(float);
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, CT_SLOT, k->declared, job.thread_bytes, &threads,
                                                        &buffers));
  job.buffers = (char*)buffers;
  mnb_parallel(threads, ct_job, &job);
  return NULL;
}

static OrtStatus* ct_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  CtKernel* k;
  CtAttrs a;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(ct_read_attrs(NULL, NULL, info, &a));
  k = (CtKernel*)cpu_kernels_new(sizeof *k, ct_compute, ct_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "ConvTranspose: out of memory creating the kernel");
  k->attrs = a;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_convtranspose(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  g_api = api;
  return cpu_kernels_add_onnx(api, registry, "ConvTranspose", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, ct_create, ct_estimate);
}
