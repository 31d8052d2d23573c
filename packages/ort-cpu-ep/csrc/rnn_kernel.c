/* ONNX RNN, GRU and LSTM (float32; opset 7 on: layout from 14) as ort-abi kernels; the math is rnn_math.c (see
 * rnn.h). Attributes: hidden_size, direction (forward / reverse / bidirectional), layout (0: [seq, batch, .],
 * 1: [batch, seq, .]), clip, GRU linear_before_reset, LSTM input_forget; inputs sequence_lens (int32, each in
 * [0, seq]), initial_h, LSTM initial_c and peepholes P. An `activations` attribute is refused (the numpy kernel
 * runs those nodes: c_kernel_applies declines them), activation_alpha / activation_beta are unused by the defaults.
 *
 * Workspace: slot 0, one block of rnn_work_floats (one direction's projections, gates, state, sgemm packing) per
 * thread; declared from X's static shape and hidden_size (or R's shape), else the host's scratch buffer. A
 * bidirectional node with 2 or more intra-op threads runs its directions on 2 threads (2 blocks), else the
 * directions take one block in turn; a direction's steps are a chain, each a few GEMV rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "rnn.h"

#define RNN_SLOT 0

static const OrtKernelApi* g_api = NULL;
static const char* const g_ops[3] = {"RNN", "GRU", "LSTM"};

typedef struct RnnKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  RnnAttrs attrs;
  size_t declared; /* bytes of slot 0 the plan holds */
} RnnKernel;

static OrtStatus* rnn_fail(const RnnAttrs* a, const char* what) {
  char msg[640];
  snprintf(msg, sizeof msg, "%s: %s", g_ops[a->kind], what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus* rnn_direction_attr(RnnAttrs* a, const char* s) {
  static const char* names[3] = {"forward", "reverse", "bidirectional"};
  char msg[200];
  int i;
  a->direction = RNN_FORWARD;
  if (s == NULL) return NULL;
  for (i = 0; i < 3; ++i)
    if (strcmp(s, names[i]) == 0) {
      a->direction = i;
      return NULL;
    }
  snprintf(msg, sizeof msg, "direction '%.64s' is not one of forward, reverse, bidirectional; fix the attribute", s);
  return rnn_fail(a, msg);
}

/* the attributes from the kernel info (create) or the node (Level-1 estimate): exactly one is non-NULL */
static OrtStatus* rnn_read_attrs(const OrtEpApi* eapi, const OrtNode* node, const OrtKernelInfo* info, int kind,
                                 RnnAttrs* a) {
  static const char* ints[4] = {"hidden_size", "layout", "linear_before_reset", "input_forget"};
  int64_t v[4] = {0, 0, 0, 0};
  const char* dir = NULL;
  int has = 0, i;
  memset(a, 0, sizeof *a);
  a->kind = kind;
  a->gates = kind == RNN_KIND_LSTM ? 4 : (kind == RNN_KIND_GRU ? 3 : 1);
  for (i = 0; i < 4; ++i) {
    if (info != NULL) {
      ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, ints[i], 0, &v[i], NULL));
    } else {
      ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_HasAttribute(node, ints[i], &has));
      if (has) ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeInt(node, ints[i], &v[i]));
    }
  }
  a->hidden = v[0] > 0 ? v[0] : 0;
  a->layout = v[1] != 0;
  a->lbr = kind == RNN_KIND_GRU && v[2] != 0;
  a->input_forget = kind == RNN_KIND_LSTM && v[3] != 0;
  if (info != NULL) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeString(info, "direction", &dir));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "clip", &a->has_clip));
    if (a->has_clip) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "clip", &a->clip));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "activations", &has));
    if (has)
      return rnn_fail(a, "attribute activations is set; this C kernel computes the default activations only (the "
                         "numpy kernel takes the others: c_kernel_applies routes such nodes there)");
  } else {
    ORT_KERNEL_RETURN_IF_ERROR(eapi->Node_GetAttributeString(node, "direction", &dir));
  }
  return rnn_direction_attr(a, dir);
}

static int rnn_static(const int64_t* d, size_t rank, size_t want) {
  size_t i;
  if (d == NULL || rank != want) return 0;
  for (i = 0; i < want; ++i)
    if (d[i] < 0) return 0;
  return 1;
}

/* the extents from X's shape and hidden_size or R's shape (r may be NULL); 0 when they are not all known */
static int rnn_dims(const RnnAttrs* a, const int64_t* x, size_t xr, const int64_t* r, size_t rr, RnnDims* d) {
  if (!rnn_static(x, xr, 3)) return 0;
  d->seq = x[a->layout ? 1 : 0];
  d->batch = x[a->layout ? 0 : 1];
  d->input = x[2];
  d->hidden = a->hidden;
  if (d->hidden == 0) {
    if (!rnn_static(r, rr, 3)) return 0;
    d->hidden = r[2];
  }
  d->dirs = a->direction == RNN_BIDIRECTIONAL ? 2 : 1;
  d->gh = a->gates * d->hidden;
  return 1;
}

/* threads (and workspace blocks) for a node: one per direction, up to the intra-op thread count */
static int rnn_threads(const RnnDims* d) {
  int t = mnb_threads();
  return d->dirs < t ? (int)d->dirs : (t < 1 ? 1 : t);
}

static OrtStatus* rnn_estimate_kind(const OrtEpApi* api, const OrtNode* node, int kind, size_t* out) {
  const int64_t *x = NULL, *r = NULL;
  size_t xr = 0, rr = 0;
  RnnAttrs a;
  RnnDims d;
  *out = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &x, &xr));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 2, &r, &rr));
  ORT_KERNEL_RETURN_IF_ERROR(rnn_read_attrs(api, node, NULL, kind, &a));
  if (rnn_dims(&a, x, xr, r, rr, &d)) *out = (size_t)rnn_threads(&d) * rnn_work_floats(&a, &d) * sizeof(float);
  return NULL;
}

static OrtStatus* rnn_estimate_rnn(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)ep;
  return rnn_estimate_kind(api, node, RNN_KIND_RNN, out);
}

static OrtStatus* rnn_estimate_gru(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)ep;
  return rnn_estimate_kind(api, node, RNN_KIND_GRU, out);
}

static OrtStatus* rnn_estimate_lstm(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)ep;
  return rnn_estimate_kind(api, node, RNN_KIND_LSTM, out);
}

static OrtStatus* rnn_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                              OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  RnnKernel* k = (RnnKernel*)this_ptr;
  int shaped_r = num_inputs > 2 && shapes[2].state == ORT_WORKSPACE_INPUT_SHAPED;
  RnnDims d;
  *num_slots = 0;
  k->declared = 0;
  if (num_inputs < 1 || shapes[0].state != ORT_WORKSPACE_INPUT_SHAPED) return NULL;
  if (!rnn_dims(&k->attrs, shapes[0].dims, shapes[0].rank, shaped_r ? shapes[2].dims : NULL,
                shaped_r ? shapes[2].rank : 0, &d))
    return NULL;
  if (max_slots < 1) return rnn_fail(&k->attrs, "declaration: no workspace slot offered, 1 needed");
  slots[0].slot_id = RNN_SLOT;
  slots[0].size_bytes = k->declared = (size_t)rnn_threads(&d) * rnn_work_floats(&k->attrs, &d) * sizeof(float);
  *num_slots = 1;
  return NULL;
}

/* input `index` (NULL when omitted) and its data, checked to have `rank` dimensions equal to want[] */
static OrtStatus* rnn_input(const RnnAttrs* a, OrtKernelContext* ctx, size_t n_in, size_t index, const char* name,
                            size_t rank, const int64_t* want, const void** data) {
  const OrtValue* v = NULL;
  const int64_t* dims = NULL;
  size_t r = 0, i;
  char msg[400];
  *data = NULL;
  if (index >= n_in) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &dims, &r));
  for (i = 0; r == rank && i < rank; ++i)
    if (dims[i] != want[i]) break;
  if (r != rank || i < rank) {
    int n = snprintf(msg, sizeof msg, "input %s must have shape [", name);
    for (i = 0; i < rank && n < (int)sizeof msg - 40; ++i) n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%lld", i ? ", " : "", (long long)want[i]);
    n += snprintf(msg + n, sizeof msg - (size_t)n, "] (from X, hidden_size and direction); got rank %zu [", r);
    for (i = 0; i < r && n < (int)sizeof msg - 24; ++i) n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    snprintf(msg + n, sizeof msg - (size_t)n, "]");
    return rnn_fail(a, msg);
  }
  return g_api->Value_GetTensorData(v, data);
}

static OrtStatus* rnn_output(OrtKernelContext* ctx, size_t n_out, size_t index, const int64_t* dims, size_t rank,
                             float** data) {
  OrtValue* v = NULL;
  void* p = NULL;
  *data = NULL;
  if (index >= n_out) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, index, dims, rank, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(v, &p));
  *data = (float*)p;
  return NULL;
}

typedef struct RnnJob {
  const RnnAttrs* a;
  const RnnDims* d;
  const RnnIo* io;
  char* work;
  size_t block; /* bytes of one thread's block */
} RnnJob;

/* thread `index` of `count` runs directions index, index + count, ... in its own block */
static void rnn_job(void* arg, int index, int count) {
  RnnJob* job = (RnnJob*)arg;
  int64_t dir;
  for (dir = index; dir < job->d->dirs; dir += count)
    rnn_direction(job->a, job->d, job->io, dir, (float*)(job->work + (size_t)index * job->block));
}

static OrtStatus* rnn_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  RnnKernel* k = (RnnKernel*)this_ptr;
  const RnnAttrs* a = &k->attrs;
  const OrtValue *xv = NULL, *rv = NULL;
  const int64_t *xd = NULL, *rd = NULL;
  size_t xr = 0, rr = 0, n_in = 0, n_out = 0;
  const void *x = NULL, *w = NULL, *r = NULL, *b = NULL, *lens = NULL, *h0 = NULL, *c0 = NULL, *p = NULL;
  void* work = NULL;
  int64_t want[3], ydims[4], sdims[3], i;
  int threads = 1;
  char msg[320];
  RnnDims d;
  RnnIo io;
  RnnJob job;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_in));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutputCount(ctx, &n_out));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (n_in > 2) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 2, &rv));
  if (xv == NULL || rv == NULL) return rnn_fail(a, "input X or R is missing");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &xd, &xr));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(rv, &rd, &rr));
  if (xr != 3 || rr != 3) {
    snprintf(msg, sizeof msg, "X has rank %zu and R rank %zu; both must have rank 3", xr, rr);
    return rnn_fail(a, msg);
  }
  rnn_dims(a, xd, xr, rd, rr, &d);
  want[0] = d.dirs; want[1] = d.gh; want[2] = d.hidden;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 2, "R", 3, want, &r));
  want[2] = d.input;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 1, "W", 3, want, &w));
  if (w == NULL) return rnn_fail(a, "input W is missing");
  want[1] = 2 * d.gh;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 3, "B", 2, want, &b));
  ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 4, "sequence_lens", 1, &d.batch, &lens));
  sdims[0] = a->layout ? d.batch : d.dirs; sdims[1] = a->layout ? d.dirs : d.batch; sdims[2] = d.hidden;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 5, "initial_h", 3, sdims, &h0));
  if (a->kind == RNN_KIND_LSTM) {
    ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 6, "initial_c", 3, sdims, &c0));
    want[1] = 3 * d.hidden;
    ORT_KERNEL_RETURN_IF_ERROR(rnn_input(a, ctx, n_in, 7, "P", 2, want, &p));
  }
  for (i = 0; lens != NULL && i < d.batch; ++i) {
    int32_t v = ((const int32_t*)lens)[i];
    if (v < 0 || v > d.seq) {
      snprintf(msg, sizeof msg, "sequence_lens[%lld] = %d is outside [0, %lld] (the sequence length of X)",
               (long long)i, (int)v, (long long)d.seq);
      return rnn_fail(a, msg);
    }
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  memset(&io, 0, sizeof io);
  if (a->layout) { ydims[0] = d.batch; ydims[1] = d.seq; } else { ydims[0] = d.seq; ydims[1] = d.dirs; }
  ydims[2] = a->layout ? d.dirs : d.batch; ydims[3] = d.hidden;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_output(ctx, n_out, 0, ydims, 4, &io.y));
  ORT_KERNEL_RETURN_IF_ERROR(rnn_output(ctx, n_out, 1, sdims, 3, &io.yh));
  if (a->kind == RNN_KIND_LSTM) ORT_KERNEL_RETURN_IF_ERROR(rnn_output(ctx, n_out, 2, sdims, 3, &io.yc));
  io.x = (const float*)x; io.w = (const float*)w; io.r = (const float*)r; io.b = (const float*)b;
  io.h0 = (const float*)h0; io.c0 = (const float*)c0; io.p = (const float*)p; io.lens = (const int32_t*)lens;
  if (d.batch == 0 || d.hidden == 0) return NULL;
  job.a = a; job.d = &d; job.io = &io;
  job.block = rnn_work_floats(a, &d) * sizeof(float);
  threads = rnn_threads(&d);
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_thread_buffers(g_api, ctx, RNN_SLOT, k->declared, job.block, &threads, &work));
  job.work = (char*)work;
  if (threads > 1) mnb_parallel(threads, rnn_job, &job);
  else rnn_job(&job, 0, 1);
  return NULL;
}

static OrtStatus* rnn_create_kind(const OrtKernelInfo* info, int kind, OrtKernelImpl** out) {
  RnnKernel* k;
  RnnAttrs a;
  ORT_KERNEL_RETURN_IF_ERROR(rnn_read_attrs(NULL, NULL, info, kind, &a));
  k = (RnnKernel*)cpu_kernels_new(sizeof *k, rnn_compute, rnn_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "RNN/GRU/LSTM: out of memory creating the kernel");
  k->attrs = a;
  *out = &k->base;
  return NULL;
}

static OrtStatus* rnn_create_rnn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return rnn_create_kind(info, RNN_KIND_RNN, out);
}

static OrtStatus* rnn_create_gru(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return rnn_create_kind(info, RNN_KIND_GRU, out);
}

static OrtStatus* rnn_create_lstm(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return rnn_create_kind(info, RNN_KIND_LSTM, out);
}

OrtStatus* ort_cpu_ep_register_rnn(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st;
  g_api = api;
  st = cpu_kernels_add_onnx(api, registry, "RNN", 7, "T", ORT_TENSOR_ELEMENT_FLOAT, rnn_create_rnn, rnn_estimate_rnn);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "GRU", 7, "T", ORT_TENSOR_ELEMENT_FLOAT, rnn_create_gru, rnn_estimate_gru);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "LSTM", 7, "T", ORT_TENSOR_ELEMENT_FLOAT, rnn_create_lstm, rnn_estimate_lstm);
  return st;
}
