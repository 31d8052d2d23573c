/* The normalizations with a mean, float32, as ort-abi kernels (the RMS ones are norm_kernel.c):
 *
 *   LayerNormalization (registered from opset 1, as onnxruntime's): per row of the axes [axis, rank), Y = (X - mean) / sqrt(var + epsilon) * Scale
 *     (+ B), mean and var = mean(X^2) - mean^2 summed in double (onnxruntime's), Scale and B of the row's size.
 *     Outputs Mean / InvStdDev are not computed (the provider sends nodes that name them to numpy).
 *   BatchNormalization, inference (training_mode 0, spatial 1, from opset 7): per channel c of X [N, C, ...],
 *     Y = X * s[c] + (B[c] - mean[c] * s[c]), s = scale / sqrt(var + epsilon) in float32 (onnxruntime's).
 *
 * No workspace: a row's statistics stay in registers; rows (channel planes) are split across the threads. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define AN_MAX_RANK 16
#define AN_LANES 8
#define AN_MIN_PER_THREAD (1 << 15) /* elements below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct AnKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  float epsilon;
  int64_t axis;  /* LayerNormalization */
  int batchnorm; /* 1: BatchNormalization */
} AnKernel;

static OrtStatus* an_error(const char* op, const char* what, long long a, long long b) {
  char msg[384];
  snprintf(msg, sizeof msg, "%s: %s (%lld, %lld)", op, what, a, b);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

typedef struct AnJob {
  const float *x, *scale, *bias, *mean, *var;
  float* y;
  int64_t rows, n, channels; /* rows of n values; BatchNormalization: row r is channel r % channels */
  float epsilon;
  int batchnorm;
  int64_t next; /* the first row no thread has taken (atomic) */
} AnJob;

CPU_KERNELS_CLONES
static void an_layer_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps) {
  double s[AN_LANES] = {0}, q[AN_LANES] = {0}, sum = 0.0, sumsq = 0.0, mean, inv;
  int64_t i = 0, j;
  float m, r;
  for (; i + AN_LANES <= n; i += AN_LANES)
    for (j = 0; j < AN_LANES; ++j) {
      const float v = x[i + j];
      s[j] += v;
      q[j] += (double)(v * v);
    }
  for (; i < n; ++i) {
    sum += x[i];
    sumsq += (double)(x[i] * x[i]);
  }
  for (j = 0; j < AN_LANES; ++j) {
    sum += s[j];
    sumsq += q[j];
  }
  mean = sum / (double)n;
  inv = 1.0 / sqrt(sumsq / (double)n - mean * mean + (double)eps);
  m = (float)mean;
  r = (float)inv;
  if (bias != NULL)
    for (i = 0; i < n; ++i) y[i] = (x[i] - m) * r * scale[i] + bias[i];
  else
    for (i = 0; i < n; ++i) y[i] = (x[i] - m) * r * scale[i];
}

CPU_KERNELS_CLONES
static void an_affine_row(const float* x, float a, float b, float* y, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

static void an_job(void* arg, int index, int count) {
  AnJob* job = (AnJob*)arg;
  (void)index; (void)count;
  for (;;) {
    const int64_t r = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
    if (r >= job->rows) break;
    if (job->batchnorm) {
      const int64_t c = r % job->channels;
      const float a = job->scale[c] / sqrtf(job->var[c] + job->epsilon);
      an_affine_row(job->x + r * job->n, a, job->bias[c] - job->mean[c] * a, job->y + r * job->n, job->n);
    } else {
      an_layer_row(job->x + r * job->n, job->scale, job->bias, job->y + r * job->n, job->n, job->epsilon);
    }
  }
}

/* input `index` (NULL data when absent) and its element count */
static OrtStatus* an_input(OrtKernelContext* ctx, size_t n_inputs, size_t index, const float** data, int64_t* count,
                           const int64_t** dims, size_t* rank) {
  const OrtValue* v = NULL;
  const int64_t* d = NULL;
  size_t r = 0, i;
  *data = NULL;
  *count = 0;
  if (index >= n_inputs) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &d, &r));
  *count = 1;
  for (i = 0; i < r; ++i) *count *= d[i];
  if (dims != NULL) {
    *dims = d;
    *rank = r;
  }
  return g_api->Value_GetTensorData(v, (const void**)data);
}

static OrtStatus* an_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  AnKernel* k = (AnKernel*)this_ptr;
  const char* op = k->batchnorm ? "BatchNormalization" : "LayerNormalization";
  static const char* bn_names[4] = {"scale", "B", "input_mean", "input_var"};
  const float* params[4] = {NULL, NULL, NULL, NULL};
  int64_t counts[4] = {0, 0, 0, 0}, x_count = 0, axis, n = 1;
  const int64_t* dims = NULL;
  size_t rank = 0, n_inputs = 0, i;
  const float* x = NULL;
  OrtValue* yv = NULL;
  void* y = NULL;
  AnJob job;
  int threads;
  char msg[256];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_inputs));
  ORT_KERNEL_RETURN_IF_ERROR(an_input(ctx, n_inputs, 0, &x, &x_count, &dims, &rank));
  if (dims == NULL || rank < (k->batchnorm ? 2u : 1u) || rank > AN_MAX_RANK)
    return an_error(op, "input X must be present with rank in [min, 16] (rank, min)", (long long)rank, k->batchnorm ? 2 : 1);
  for (i = 0; i < (k->batchnorm ? 4u : 2u); ++i)
    ORT_KERNEL_RETURN_IF_ERROR(an_input(ctx, n_inputs, i + 1, &params[i], &counts[i], NULL, NULL));
  memset(&job, 0, sizeof job);
  if (k->batchnorm) {
    for (i = 0; i < 4; ++i)
      if (params[i] == NULL || counts[i] != dims[1]) {
        snprintf(msg, sizeof msg, "BatchNormalization: input %s has %lld values and X %lld channels; give one value "
                 "per channel", bn_names[i], (long long)counts[i], (long long)dims[1]);
        return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
      }
    job.channels = dims[1];
    for (i = 2; i < rank; ++i) n *= dims[i];
    job.mean = params[2]; job.var = params[3];
  } else {
    axis = k->axis < 0 ? k->axis + (int64_t)rank : k->axis;
    if (axis < 0 || axis >= (int64_t)rank) return an_error(op, "axis is outside X's rank (axis, rank)", (long long)k->axis, (long long)rank);
    for (i = (size_t)axis; i < rank; ++i) n *= dims[i];
    if (params[0] == NULL || counts[0] != n)
      return an_error(op, "Scale must hold the normalized size of values, X's dims from axis on (got, size)",
                      (long long)counts[0], (long long)n);
    if (params[1] != NULL && counts[1] != n)
      return an_error(op, "B must hold the normalized size of values, X's dims from axis on (got, size)",
                      (long long)counts[1], (long long)n);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (x_count == 0 || n == 0) return NULL;
  job.x = x; job.y = (float*)y; job.scale = params[0]; job.bias = params[1];
  job.n = n; job.rows = x_count / n; job.epsilon = k->epsilon; job.batchnorm = k->batchnorm;
  threads = mnb_threads_for(x_count, AN_MIN_PER_THREAD);
  if ((int64_t)threads > job.rows) threads = (int)job.rows;
  if (threads < 1) threads = 1;
  mnb_parallel(threads, an_job, &job);
  return NULL;
}

static OrtStatus* an_create_kind(const OrtKernelInfo* info, int batchnorm, OrtKernelImpl** out) {
  AnKernel* k;
  int has = 0;
  float eps = 1e-5f;
  int64_t axis = -1, training = 0, spatial = 1;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "epsilon", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "epsilon", &eps));
  if (batchnorm) {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "training_mode", 0, &training, NULL));
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "spatial", 1, &spatial, NULL));
    if (training != 0 || spatial != 1)
      return an_error("BatchNormalization", "the C kernel is inference mode with per-channel statistics "
                      "(training_mode, spatial); the numpy kernel runs the others", (long long)training, (long long)spatial);
  } else {
    ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "axis", -1, &axis, NULL));
  }
  k = (AnKernel*)cpu_kernels_new(sizeof *k, an_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "LayerNormalization/BatchNormalization: out of memory creating the kernel");
  k->epsilon = eps;
  k->axis = axis;
  k->batchnorm = batchnorm;
  *out = &k->base;
  return NULL;
}

static OrtStatus* an_layer_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return an_create_kind(info, 0, out);
}

static OrtStatus* an_batch_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return an_create_kind(info, 1, out);
}

OrtStatus* ort_cpu_ep_register_affine_norm(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st;
  g_api = api;
  /* 1: onnxruntime's LayerNormalization predates the ONNX op (17); the LayerNormFusion makes it at any opset */
  st = cpu_kernels_add_onnx(api, registry, "LayerNormalization", 1, "T", ORT_TENSOR_ELEMENT_FLOAT, an_layer_create,
                            cpu_kernels_estimate_none);
  /* 7: before it, consumed_inputs and is_test */
  if (!st) st = cpu_kernels_add_onnx(api, registry, "BatchNormalization", 7, "T", ORT_TENSOR_ELEMENT_FLOAT,
                                     an_batch_create, cpu_kernels_estimate_none);
  return st;
}
