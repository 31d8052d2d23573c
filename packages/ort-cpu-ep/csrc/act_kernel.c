/* com.microsoft QuickGelu (float32, no bias) as an ort-abi kernel: y = x * sigmoid(alpha * x) = x / (1 + exp(-alpha x)),
 * alpha default 1.702; alpha = 1 is SiLU, what the CPU provider's SiLUFusion makes of an MLP's x * Sigmoid(x).
 *
 * exp is vec_math.h's vm_exp8 (8-float vectors, within a few ulp of the C library's); above 88 it is inf
 * (y = -0, and NaN for x = -inf, as numpy and onnxruntime give), below -88 zero; NaN propagates.
 * Elementwise at the same index, so the plan may write y over x. No workspace. Threads split the elements when there are enough of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "vec_math.h" /* vm_exp8 */
#include "vec_math_avx512.h" /* vx_quick_gelu16 */

#define ACT_MIN_PER_THREAD (1 << 15) /* elements below which an extra thread does not pay */
#define ACT_MAX_RANK 16

static const OrtKernelApi* g_api = NULL;

typedef struct ActKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  float alpha;
} ActKernel;

#ifdef VX_AVX512
VX_TARGET static void act_quick_gelu_avx512(const float* x, float* y, int64_t n, float alpha) {
  const __m512 minus_alpha = _mm512_set1_ps(-alpha);
  VX_MAP(vx_quick_gelu16, x, y, n, minus_alpha);
}
#endif

/* y[i] = x[i] / (1 + exp(-alpha x[i])) for i in [0, n); one clone per x86-64 level, AVX-512 intrinsics where the
 * CPU has them (vec_math_avx512.h) */
CPU_KERNELS_CLONES
static void act_quick_gelu(const float* x, float* y, int64_t n, float alpha) {
  const vm_v8 a = vm_splat8(-alpha), one = vm_splat8(1.0f);
  int64_t i = 0;
#ifdef VX_AVX512
  if (vx_use_avx512()) {
    act_quick_gelu_avx512(x, y, n, alpha);
    return;
  }
#endif
  for (; i + 8 <= n; i += 8) {
    vm_v8 v, e;
    memcpy(&v, x + i, sizeof v);
    e = vm_exp8(v * a);
    v = v / (one + e);
    memcpy(y + i, &v, sizeof v);
  }
  if (i < n) { /* the tail through one padded vector */
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    vm_v8 v, e;
    memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));
    memcpy(&v, tail, sizeof v);
    e = vm_exp8(v * a);
    v = v / (one + e);
    memcpy(tail, &v, sizeof v);
    memcpy(y + i, tail, (size_t)(n - i) * sizeof(float));
  }
}

typedef struct ActJob {
  const float* x;
  float* y;
  int64_t n;
  float alpha;
} ActJob;

static void act_job(void* arg, int index, int count) {
  const ActJob* job = (const ActJob*)arg;
  int64_t i0, i1;
  cpu_kernels_share(job->n, index, count, 8, &i0, &i1);
  if (i0 < i1) act_quick_gelu(job->x + i0, job->y + i0, i1 - i0, job->alpha);
}

static OrtStatus* act_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  ActKernel* k = (ActKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, count = 0, i;
  const void* x = NULL;
  void* y = NULL;
  ActJob job;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "QuickGelu: input X is missing");
  /* X's element type: float32, checked by the host against the registered constraint before each Compute */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (rank > ACT_MAX_RANK) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "QuickGelu: X has rank above 16");
  for (count = 1, i = 0; i < rank; ++i) count *= (size_t)dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (count == 0) return NULL;
  job.x = (const float*)x; job.y = (float*)y; job.n = (int64_t)count; job.alpha = k->alpha;
  mnb_parallel(mnb_threads_for(job.n, ACT_MIN_PER_THREAD), act_job, &job);
  return NULL;
}

static OrtStatus* act_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ActKernel* k;
  int has = 0;
  float alpha = 1.702f;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "alpha", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "alpha", &alpha));
  k = (ActKernel*)cpu_kernels_new(sizeof *k, act_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "QuickGelu: out of memory creating the kernel");
  k->alpha = alpha;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_activation(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t f[1] = {ORT_TENSOR_ELEMENT_FLOAT};
  g_api = api;
  return cpu_kernels_add(api, registry, "QuickGelu", "com.microsoft", 1, f, 1, act_create, cpu_kernels_estimate_none);
}
