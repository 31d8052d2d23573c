/* RMS normalization kernels as ort-abi kernels: SimplifiedLayerNormalization (default domain, as the
 * onnxruntime-genai builder emits it) and com.microsoft SkipSimplifiedLayerNormalization, float32.
 *
 *   SimplifiedLayerNormalization:     Y = X / sqrt(mean(X^2) + epsilon) * scale over the last axis
 *   SkipSimplifiedLayerNormalization: S = input + skip (+ bias); Y = S / sqrt(mean(S^2) + epsilon) * gamma;
 *                                     output 3 is S (the residual the next layer reads)
 *
 * One pass per row; the row statistic stays in a register, so no workspace (the Level-1 estimate and the
 * Level-2 declaration both say 0 bytes). Outputs mean / inv_std_var (1 and 2) are not computed here: the
 * provider sends nodes that name them to the numpy kernel (ort_cpu_ep._ckernels.c_kernel_applies), since a
 * kernel of this ABI cannot tell a named output from an omitted one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define NORM_MAX_RANK 16

static const OrtKernelApi* g_api = NULL;

typedef struct NormKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  float epsilon;
  int skip;           /* 1: SkipSimplifiedLayerNormalization */
  size_t outputs;     /* the node's output count */
} NormKernel;

static OrtStatus* norm_error(const char* op, const char* what, long long a, long long b) {
  char msg[384];
  snprintf(msg, sizeof msg, "%s: %s (%lld, %lld)", op, what, a, b);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* sum of squares of n floats, 8 partial sums so the compiler vectorizes without -ffast-math */
CPU_KERNELS_CLONES
static float norm_sumsq(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0, j;
  for (; i + 8 <= n; i += 8)
    for (j = 0; j < 8; ++j) acc[j] += x[i + j] * x[i + j];
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* s = a + b (+ bias), returns sum(s^2) */
CPU_KERNELS_CLONES
static float norm_add_row(const float* a, const float* b, const float* bias, float* s, int64_t n) {
  int64_t i;
  if (bias != NULL)
    for (i = 0; i < n; ++i) s[i] = a[i] + b[i] + bias[i];
  else
    for (i = 0; i < n; ++i) s[i] = a[i] + b[i];
  return norm_sumsq(s, n);
}

CPU_KERNELS_CLONES
static void norm_scale_row(const float* x, const float* gamma, float inv, float* y, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) y[i] = x[i] * inv * gamma[i];
}

static float norm_inv(float sumsq, int64_t n, float eps) { return 1.0f / sqrtf(sumsq / (float)n + eps); }

/* input `index` (NULL when left out) and its element count. Its element type is not asked: the host checks every
 * input against the registered float32 constraints before each Compute, and each host call crosses the ABI. */
static OrtStatus* norm_input(OrtKernelContext* ctx, size_t n_inputs, size_t index, const float** data, size_t* count,
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
  for (i = 0; i < r; ++i) *count *= (size_t)d[i];
  if (dims != NULL) {
    *dims = d;
    *rank = r;
  }
  return g_api->Value_GetTensorData(v, (const void**)data);
}

static OrtStatus* norm_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  NormKernel* k = (NormKernel*)this_ptr;
  const char* op = k->skip ? "SkipSimplifiedLayerNormalization" : "SimplifiedLayerNormalization";
  const float *x, *skip = NULL, *gamma, *bias = NULL;
  size_t x_count, skip_count = 0, gamma_count, bias_count = 0, rank = 0;
  const int64_t* dims = NULL;
  int64_t hidden, rows, skip_rows = 0, r;
  OrtValue *y_value = NULL, *s_value = NULL;
  float *y, *s = NULL;
  int64_t out_dims[NORM_MAX_RANK];
  size_t i, n_inputs = 0;

  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_inputs));
  ORT_KERNEL_RETURN_IF_ERROR(norm_input(ctx, n_inputs, 0, &x, &x_count, &dims, &rank));
  if ((x == NULL && x_count != 0) || rank == 0 || rank > NORM_MAX_RANK) return norm_error(op, "input 0 must be present with rank 1..16 (rank, 16)", (long long)rank, 16);
  hidden = dims[rank - 1];
  for (i = 0; i < rank; ++i) out_dims[i] = dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(norm_input(ctx, n_inputs, k->skip ? 2 : 1, &gamma, &gamma_count, NULL, NULL));
  if (gamma == NULL || (int64_t)gamma_count != hidden)
    return norm_error(op, "the scale/gamma input must have the hidden size of elements (got, hidden)", (long long)gamma_count, hidden);
  if (k->skip) {
    ORT_KERNEL_RETURN_IF_ERROR(norm_input(ctx, n_inputs, 1, &skip, &skip_count, NULL, NULL));
    ORT_KERNEL_RETURN_IF_ERROR(norm_input(ctx, n_inputs, 3, &bias, &bias_count, NULL, NULL));
    if (skip == NULL || hidden == 0 || skip_count == 0 || skip_count % (size_t)hidden || x_count % skip_count)
      return norm_error(op, "skip must hold whole rows of the hidden size that tile the input (skip elements, input elements)",
                        (long long)skip_count, (long long)x_count);
    if (bias != NULL && (int64_t)bias_count != hidden)
      return norm_error(op, "bias must have the hidden size of elements (got, hidden)", (long long)bias_count, hidden);
    skip_rows = (int64_t)skip_count / hidden;
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, rank, &y_value));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y_value, (void**)&y));
  if (k->skip && k->outputs > 3) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 3, out_dims, rank, &s_value));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(s_value, (void**)&s));
  }
  if (x_count == 0 || hidden == 0) return NULL;
  rows = (int64_t)x_count / hidden;
  for (r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    float* yr = y + r * hidden;
    float sumsq;
    if (k->skip) {
      float* sr = s != NULL ? s + r * hidden : yr; /* without output 3 the sum lives in Y, then is scaled in place */
      sumsq = norm_add_row(xr, skip + (r % skip_rows) * hidden, bias, sr, hidden);
      norm_scale_row(sr, gamma, norm_inv(sumsq, hidden, k->epsilon), yr, hidden);
    } else {
      sumsq = norm_sumsq(xr, hidden);
      norm_scale_row(xr, gamma, norm_inv(sumsq, hidden, k->epsilon), yr, hidden);
    }
  }
  return NULL;
}

static OrtStatus* norm_create_kind(const OrtKernelInfo* info, int skip, OrtKernelImpl** out) {
  NormKernel* k;
  int has = 0;
  float eps = 1e-5f;
  size_t outputs = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "epsilon", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "epsilon", &eps));
  if (!skip) {
    int64_t axis = -1;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "axis", &has));
    if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInt(info, "axis", &axis));
    if (axis != -1)
      return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "SimplifiedLayerNormalization: the C kernel normalizes the last "
                                 "axis (axis=-1); other axes run on the numpy kernel");
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetOutputCount(info, &outputs));
  k = (NormKernel*)cpu_kernels_new(sizeof *k, norm_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "SimplifiedLayerNormalization: out of memory creating the kernel");
  k->epsilon = eps;
  k->skip = skip;
  k->outputs = outputs;
  *out = &k->base;
  return NULL;
}

static OrtStatus* norm_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return norm_create_kind(info, 0, out);
}

static OrtStatus* skip_norm_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return norm_create_kind(info, 1, out);
}

OrtStatus* ort_cpu_ep_register_norm(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t f[4] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT,
                               ORT_TENSOR_ELEMENT_FLOAT};
  OrtStatus* st;
  g_api = api;
  st = cpu_kernels_add(api, registry, "SimplifiedLayerNormalization", "", 1, f, 2, norm_create, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add(api, registry, "SkipSimplifiedLayerNormalization", "com.microsoft", 1, f, 4,
                                skip_norm_create, cpu_kernels_estimate_none);
  return st;
}
