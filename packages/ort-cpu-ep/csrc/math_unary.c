/* float32 elementwise math as ort-abi kernels (the piecewise-linear activations are act_unary.c): Sqrt, Reciprocal and
 * Abs (IEEE exact: numpy's bits), Exp (vm_exp16 / vm_exp8, within a few ulp of the C library's; inf past float32's
 * range, below -88 zero) and Tanh (Cephes' tanhf: x + x^3 P(x^2) below |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1)
 * with x's sign; within a few ulp), in 16-float vectors (Exp and Tanh in AVX-512 intrinsics where the CPU has them:
 * vec_math_avx512.h). NaN propagates. Elementwise at the same index, so the plan may write Y over X; threads split the elements
 * when there are enough of them. No workspace. */
#pragma GCC optimize("no-math-errno", "fp-contract=off") /* sqrtf vectorizes; no fused multiply-adds */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */
#include "vec_math.h"
#include "vec_math_avx512.h" /* vx_exp16, vx_tanh16 */

#define MU_MIN_PER_THREAD (1 << 16) /* elements below which an extra thread does not pay */

enum { MU_SQRT = 0, MU_RECIPROCAL, MU_ABS, MU_EXP, MU_TANH, MU_COUNT };
static const char* const MU_NAMES[MU_COUNT] = {"Sqrt", "Reciprocal", "Abs", "Exp", "Tanh"};

static const OrtKernelApi* g_api = NULL;

typedef struct MuKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int op;
} MuKernel;

/* tanh on VT vectors: below |x| = 0.625 the polynomial, else 1 - 2 / (exp(2|x|) + 1) with x's sign; a NaN takes the
 * second branch (NaN < 0.625 is false) and stays NaN. (A NaN mask beside it made GCC's 16-float AVX-512 code 4x
 * slower.) */
#define MU_DEFINE_TANH(NAME, VT, IT, SPLAT, EXP)                                                            \
  static inline __attribute__((always_inline)) VT NAME(VT x) {                                             \
    const IT sign = (IT)x & (IT)SPLAT(-0.0f);                                                              \
    const VT z = (VT)((IT)x & ~(IT)SPLAT(-0.0f)), s = x * x, one = SPLAT(1.0f);                            \
    const VT small = ((((SPLAT(-5.70498872745E-3f) * s + SPLAT(2.06390887954E-2f)) * s +                   \
                        SPLAT(-5.37397155531E-2f)) * s + SPLAT(1.33314422036E-1f)) * s +                   \
                      SPLAT(-3.33332819422E-1f)) * s * x + x;                                              \
    const VT large = (VT)((IT)(one - SPLAT(2.0f) / (EXP(z + z) + one)) | sign); /* exp overflow: 1 */      \
    const IT below = z < SPLAT(0.625f);                                                                    \
    return (VT)(((IT)small & below) | ((IT)large & ~below));                                               \
  }
MU_DEFINE_TANH(mu_tanh8, vm_v8, vm_i8, vm_splat8, vm_exp8)
MU_DEFINE_TANH(mu_tanh16, vm_v16, vm_i16, vm_splat16, vm_exp16)

/* exp(x) up to float32's overflow at 88.72: a lane above 88 (where vm_exp8 says inf) is exp(x - 1) * e, one more
 * rounding; past 89.72 inf either way */
static inline __attribute__((always_inline)) vm_v8 mu_exp8(vm_v8 x) {
  const vm_i8 above = x > vm_splat8(88.0f);
  const vm_v8 shifted = (vm_v8)(((vm_i8)(x - vm_splat8(1.0f)) & above) | ((vm_i8)x & ~above));
  const vm_v8 e = vm_exp8(shifted);
  return (vm_v8)(((vm_i8)(e * vm_splat8(2.71828182845904524f)) & above) | ((vm_i8)e & ~above));
}

/* the same on 16 floats (one zmm in the AVX-512 clone) */
static inline __attribute__((always_inline)) vm_v16 mu_exp16(vm_v16 x) {
  const vm_i16 above = x > vm_splat16(88.0f);
  const vm_v16 shifted = (vm_v16)(((vm_i16)(x - vm_splat16(1.0f)) & above) | ((vm_i16)x & ~above));
  const vm_v16 e = vm_exp16(shifted);
  return (vm_v16)(((vm_i16)(e * vm_splat16(2.71828182845904524f)) & above) | ((vm_i16)e & ~above));
}

static inline __attribute__((always_inline)) vm_v8 mu_vec8(int op, vm_v8 v) {
  return op == MU_EXP ? mu_exp8(v) : mu_tanh8(v);
}

/* Exp / Tanh over the whole 16-float vectors of x[0, n); returns how many it did (the rest: mu_vector_loop) */
static inline __attribute__((always_inline)) int64_t mu_loop16(int op, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  vm_v16 v;
  for (; i + 16 <= n; i += 16) {
    memcpy(&v, x + i, sizeof v);
    v = op == MU_EXP ? mu_exp16(v) : mu_tanh16(v);
    memcpy(y + i, &v, sizeof v);
  }
  return i;
}

/* Exp / Tanh over n floats, the tail through one padded vector */
static inline __attribute__((always_inline)) void mu_vector_loop(int op, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  vm_v8 v;
  for (; i + 8 <= n; i += 8) {
    memcpy(&v, x + i, sizeof v);
    v = mu_vec8(op, v);
    memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));
    memcpy(&v, tail, sizeof v);
    v = mu_vec8(op, v);
    memcpy(tail, &v, sizeof v);
    memcpy(y + i, tail, (size_t)(n - i) * sizeof(float));
  }
}

#ifdef VX_AVX512
/* Exp / Tanh over n floats in AVX-512 intrinsics (vec_math_avx512.h: the same math in half the instructions) */
VX_TARGET static void mu_apply_avx512(int op, const float* x, float* y, int64_t n) {
  if (op == MU_EXP)
    VX_MAP(vx_exp16, x, y, n);
  else
    VX_MAP(vx_tanh16, x, y, n);
}
#endif

CPU_KERNELS_CLONES
static void mu_apply(int op, const float* x, float* y, int64_t n) {
  int64_t i;
#ifdef VX_AVX512
  if ((op == MU_EXP || op == MU_TANH) && vx_use_avx512()) {
    mu_apply_avx512(op, x, y, n);
    return;
  }
#endif
  switch (op) {
    case MU_SQRT:
      for (i = 0; i < n; ++i) y[i] = sqrtf(x[i]);
      break;
    case MU_RECIPROCAL:
      for (i = 0; i < n; ++i) y[i] = 1.0f / x[i];
      break;
    case MU_ABS:
      for (i = 0; i < n; ++i) y[i] = fabsf(x[i]);
      break;
    case MU_EXP:
      i = mu_loop16(MU_EXP, x, y, n);
      mu_vector_loop(MU_EXP, x + i, y + i, n - i);
      break;
    default:
      i = mu_loop16(MU_TANH, x, y, n);
      mu_vector_loop(MU_TANH, x + i, y + i, n - i);
      break;
  }
}

typedef struct MuJob {
  const float* x;
  float* y;
  int64_t n;
  int op;
} MuJob;

static void mu_job(void* arg, int index, int count) {
  const MuJob* job = (const MuJob*)arg;
  int64_t i0, i1;
  cpu_kernels_share(job->n, index, count, 16, &i0, &i1);
  if (i0 < i1) mu_apply(job->op, job->x + i0, job->y + i0, i1 - i0);
}

static OrtStatus* mu_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MuKernel* k = (const MuKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  const void* x = NULL;
  void* y = NULL;
  MuJob job;
  char msg[160];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) {
    snprintf(msg, sizeof msg, "%s: input X is missing; it is required", MU_NAMES[k->op]);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  for (job.n = 1, i = 0; i < rank; ++i) job.n *= dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (job.n == 0) return NULL;
  job.x = (const float*)x; job.y = (float*)y; job.op = k->op;
  mnb_parallel(mnb_threads_for(job.n, MU_MIN_PER_THREAD), mu_job, &job);
  return NULL;
}

static OrtStatus* mu_new(int op, OrtKernelImpl** out) {
  MuKernel* k = (MuKernel*)cpu_kernels_new(sizeof *k, mu_compute, cpu_kernels_declare_none);
  char msg[96];
  if (k == NULL) {
    snprintf(msg, sizeof msg, "%s: out of memory creating the kernel", MU_NAMES[op]);
    return g_api->CreateStatus(ORT_FAIL, msg);
  }
  k->op = op;
  *out = &k->base;
  return NULL;
}

#define MU_CREATE(fn, op)                                                                   \
  static OrtStatus* fn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state; (void)info;                                                          \
    return mu_new(op, out);                                                           \
  }
MU_CREATE(mu_sqrt, MU_SQRT)
MU_CREATE(mu_reciprocal, MU_RECIPROCAL)
MU_CREATE(mu_abs, MU_ABS)
MU_CREATE(mu_exp, MU_EXP)
MU_CREATE(mu_tanh, MU_TANH)

OrtStatus* ort_cpu_ep_register_math_unary(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const OrtKernelCreateFunc creates[MU_COUNT] = {mu_sqrt, mu_reciprocal, mu_abs, mu_exp, mu_tanh};
  OrtStatus* st = NULL;
  int i;
  g_api = api;
  for (i = 0; i < MU_COUNT && !st; ++i) /* 6: the opset each took its current form (consumed_inputs dropped) */
    st = cpu_kernels_add_onnx(api, registry, MU_NAMES[i], 6, "T", ORT_TENSOR_ELEMENT_FLOAT, creates[i],
                              cpu_kernels_estimate_none);
  return st;
}
