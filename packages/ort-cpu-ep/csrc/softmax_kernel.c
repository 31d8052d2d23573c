/* ONNX Softmax (float32) over contiguous rows as an ort-abi kernel: before opset 13 the input coerced to 2-D at
 * `axis` (any axis: a row is every value from it on), from 13 on the axis given where every dimension after it is
 * 1 (the last axis, or a classifier's [N, 1000, 1, 1] over axis 1); per row,
 * y = exp(x - max(x)) / sum(exp(x - max(x))), in three passes over the row (the max; exp into y and its sum;
 * y scaled). Two paths with one exp polynomial (vec_math.h's VM_EXP_POLY, within a few ulp of the C library's
 * exp): AVX-512F on 16-float vectors, 2^n by vscalefps, tails by masks; elsewhere (or below
 * ort_cpu_ep_set_isa_cap 2) 8-float GCC vectors in target_clones (vm_exp8_upto88).
 *
 * SM_DIVIDE picks the last pass: 0 (the default) multiplies by the sum's reciprocal as onnxruntime's MLAS does
 * (one more rounding: within 3.5e-7 of the float64 softmax instead of 2.4e-7, for rows of random normals), 1
 * divides as numpy does. Measured on AVX-512, 128-float rows in L2: 0.30 vs 0.40 ns per value (vdivps).
 *
 * Results below FLT_MIN (1.2e-38) are 0 where numpy gives denormals: each thread computes its rows with MXCSR's
 * flush-to-zero and denormals-are-zero set, and restores its mode after. A denormal costs an Intel core about a
 * hundred cycles per instruction: scores spread wider than 87 (random N(0, 30), or an untrained model's) make a
 * fifth of the outputs denormal, and (1, 32, 512, 512) took 58 ms instead of 4.7 (onnxruntime: 64 ms).
 *
 * Special values as numpy gives them: a NaN anywhere in a row makes the row NaN (exp(NaN - max) enters the
 * sum), as does +inf (inf - inf) and a row of -inf only (-inf - -inf); -inf entries of a finite row give 0.
 * A row is read fully by the max pass, and the exp pass reads each vector of x before writing the
 * same vector of y, so the plan may write y over x. No workspace. Threads take contiguous runs of rows when
 * there are enough elements; a row's arithmetic is the same whatever thread computes it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h"      /* mnb_parallel, mnb_threads, g_isa_cap */
#include "vec_math.h" /* vm_exp8_upto88, vm_max8 */
#include "vec_math_avx512.h" /* vx_use_avx512 */

#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
#define SM_FTZ_DAZ 0x8040u /* MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6) */
#endif

#ifndef SM_DIVIDE
#define SM_DIVIDE 0
#endif
#define SM_MIN_PER_THREAD (1 << 15) /* elements below which an extra thread does not pay */
#define SM_MAX_RANK 16

static const OrtKernelApi* g_api = NULL;

static inline __attribute__((always_inline)) vm_v8 sm_load(const float* p) {
  vm_v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __attribute__((always_inline)) void sm_store(float* p, vm_v8 v) { memcpy(p, &v, sizeof v); }

/* the row's tail (n - i < 8 values) in one vector, the missing lanes `pad` */
static inline __attribute__((always_inline)) vm_v8 sm_tail(const float* p, int64_t count, float pad) {
  float t[8] = {pad, pad, pad, pad, pad, pad, pad, pad};
  memcpy(t, p, (size_t)count * sizeof(float));
  return sm_load(t);
}

static inline __attribute__((always_inline)) float sm_lanes_max(vm_v8 v) {
  float m = v[0];
  int j;
  for (j = 1; j < 8; ++j) m = v[j] > m ? v[j] : m;
  return m;
}

static inline __attribute__((always_inline)) float sm_lanes_sum(vm_v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* the softmax of `rows` rows of n > 0 floats each; one clone per x86-64 level */
CPU_KERNELS_CLONES
static void sm_rows(const float* x, float* y, int64_t rows, int64_t n) {
  const int64_t n8 = n & ~(int64_t)7, n32 = n & ~(int64_t)31, n16 = n & ~(int64_t)15;
  int64_t r, i;
  for (r = 0; r < rows; ++r, x += n, y += n) {
    vm_v8 m0 = vm_splat8(-INFINITY), m1 = m0, m2 = m0, m3 = m0, s0 = vm_splat8(0.0f), s1 = s0, mv, e0, e1, scale;
    float m, s;
    /* the max: four chains (a max's latency is several of its issue slots) */
    for (i = 0; i < n32; i += 32) {
      m0 = vm_max8(sm_load(x + i), m0);
      m1 = vm_max8(sm_load(x + i + 8), m1);
      m2 = vm_max8(sm_load(x + i + 16), m2);
      m3 = vm_max8(sm_load(x + i + 24), m3);
    }
    for (; i < n8; i += 8) m0 = vm_max8(sm_load(x + i), m0);
    if (i < n) m1 = vm_max8(sm_tail(x + i, n - i, -INFINITY), m1);
    m = sm_lanes_max(vm_max8(vm_max8(m0, m1), vm_max8(m2, m3)));
    /* exp(x - max) into y and its sum, two chains; the tail's missing lanes are -inf: exp 0 */
    mv = vm_splat8(m);
    for (i = 0; i < n16; i += 16) {
      e0 = vm_exp8_upto88(sm_load(x + i) - mv);
      e1 = vm_exp8_upto88(sm_load(x + i + 8) - mv);
      sm_store(y + i, e0);
      sm_store(y + i + 8, e1);
      s0 += e0;
      s1 += e1;
    }
    for (; i < n8; i += 8) {
      e0 = vm_exp8_upto88(sm_load(x + i) - mv);
      sm_store(y + i, e0);
      s0 += e0;
    }
    if (i < n) {
      float t[8];
      e1 = vm_exp8_upto88(sm_tail(x + i, n - i, -INFINITY) - mv);
      s1 += e1;
      memcpy(t, &e1, sizeof t);
      memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
    s = sm_lanes_sum(s0 + s1);
    /* y / sum */
#if SM_DIVIDE
    scale = vm_splat8(s);
    for (i = 0; i < n8; i += 8) sm_store(y + i, sm_load(y + i) / scale);
    for (; i < n; ++i) y[i] = y[i] / s;
#else
    scale = vm_splat8(1.0f / s);
    for (i = 0; i < n8; i += 8) sm_store(y + i, sm_load(y + i) * scale);
    for (; i < n; ++i) y[i] = y[i] * scale[0];
#endif
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SM_AVX512 1
#define SM_T512 __attribute__((target("avx512f,fma")))

static inline __attribute__((always_inline)) SM_T512 __m512 sm_splat16(float v) { return _mm512_set1_ps(v); }

/* exp(x) for 16 floats x <= 0 (or NaN): n = round(x log2 e), r = x - n ln2, 2^n applied by vscalefps (0 below
 * FLT_MIN under flush-to-zero); x is clamped at -104, below the least denormal, so that n stays finite.
 * max(lo, x) keeps a NaN x (vmaxps returns its second operand when either is NaN). */
static inline __attribute__((always_inline)) SM_T512 __m512 sm_exp16(__m512 x) {
  __m512 n, r, p;
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  n = _mm512_roundscale_ps(x * sm_splat16(VM_LOG2E), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = x - n * sm_splat16(VM_LN2_HI) - n * sm_splat16(VM_LN2_LO);
  p = VM_EXP_POLY(r, sm_splat16);
  return _mm512_scalef_ps(p, n);
}

/* sm_rows on 16-float AVX-512 vectors, the tails through masked loads and stores */
SM_T512 static void sm_rows_avx512(const float* x, float* y, int64_t rows, int64_t n) {
  const int64_t n16 = n & ~(int64_t)15, n32 = n & ~(int64_t)31, n64 = n & ~(int64_t)63;
  const __mmask16 tail = (__mmask16)((1u << (n - n16)) - 1u);
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  int64_t r, i;
  for (r = 0; r < rows; ++r, x += n, y += n) {
    __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf, s0 = _mm512_setzero_ps(), s1 = s0, mv, e0, e1, scale;
    float s;
    for (i = 0; i < n64; i += 64) {
      m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
      m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
      m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 32));
      m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 48));
    }
    for (; i < n16; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    if (tail) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, tail, x + n16));
    mv = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))));
    for (i = 0; i < n64; i += 64) {
      __m512 e2, e3;
      e0 = sm_exp16(_mm512_loadu_ps(x + i) - mv);
      e1 = sm_exp16(_mm512_loadu_ps(x + i + 16) - mv);
      e2 = sm_exp16(_mm512_loadu_ps(x + i + 32) - mv);
      e3 = sm_exp16(_mm512_loadu_ps(x + i + 48) - mv);
      _mm512_storeu_ps(y + i, e0);
      _mm512_storeu_ps(y + i + 16, e1);
      _mm512_storeu_ps(y + i + 32, e2);
      _mm512_storeu_ps(y + i + 48, e3);
      s0 += e0 + e2;
      s1 += e1 + e3;
    }
    for (; i < n32; i += 32) {
      e0 = sm_exp16(_mm512_loadu_ps(x + i) - mv);
      e1 = sm_exp16(_mm512_loadu_ps(x + i + 16) - mv);
      _mm512_storeu_ps(y + i, e0);
      _mm512_storeu_ps(y + i + 16, e1);
      s0 += e0;
      s1 += e1;
    }
    for (; i < n16; i += 16) {
      e0 = sm_exp16(_mm512_loadu_ps(x + i) - mv);
      _mm512_storeu_ps(y + i, e0);
      s0 += e0;
    }
    if (tail) {
      e1 = _mm512_maskz_mov_ps(tail, sm_exp16(_mm512_maskz_loadu_ps(tail, x + n16) - mv));
      _mm512_mask_storeu_ps(y + n16, tail, e1);
      s1 += e1;
    }
    s = _mm512_reduce_add_ps(s0 + s1);
#if SM_DIVIDE
    scale = _mm512_set1_ps(s);
    for (i = 0; i < n16; i += 16) _mm512_storeu_ps(y + i, _mm512_loadu_ps(y + i) / scale);
    if (tail) _mm512_mask_storeu_ps(y + n16, tail, _mm512_maskz_loadu_ps(tail, y + n16) / scale);
#else
    scale = _mm512_set1_ps(1.0f / s);
    for (i = 0; i < n16; i += 16) _mm512_storeu_ps(y + i, _mm512_loadu_ps(y + i) * scale);
    if (tail) _mm512_mask_storeu_ps(y + n16, tail, _mm512_maskz_loadu_ps(tail, y + n16) * scale);
#endif
  }
}
#endif

/* 1: the AVX-512 path (the CPU has AVX-512F and ort_cpu_ep_set_isa_cap allows level 2), 0: sm_rows */
static int sm_use_avx512(void) {
#ifdef SM_AVX512
  return vx_use_avx512();
#else
  return 0;
#endif
}

typedef struct SmJob {
  const float* x;
  float* y;
  int64_t rows, n;
  int avx512; /* decided once per call: every thread computes its rows the same way */
} SmJob;

static void sm_job(void* arg, int index, int count) {
  const SmJob* job = (const SmJob*)arg;
  int64_t per = (job->rows + count - 1) / count, r0 = per * index, r1 = r0 + per;
#ifdef SM_FTZ_DAZ
  unsigned int csr;
#endif
  if (r1 > job->rows) r1 = job->rows;
  if (r0 >= r1) return;
#ifdef SM_FTZ_DAZ
  csr = _mm_getcsr();
  _mm_setcsr(csr | SM_FTZ_DAZ);
#endif
#ifdef SM_AVX512
  if (job->avx512)
    sm_rows_avx512(job->x + r0 * job->n, job->y + r0 * job->n, r1 - r0, job->n);
  else
#endif
    sm_rows(job->x + r0 * job->n, job->y + r0 * job->n, r1 - r0, job->n);
#ifdef SM_FTZ_DAZ
  _mm_setcsr(csr); /* the thread's own mode again */
#endif
}

static OrtStatus* sm_error(const char* fmt, long long a, long long b) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a, b);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

typedef struct SmKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int64_t axis;
  int old; /* opsets 1..12: the input coerced to 2-D at axis */
} SmKernel;

static OrtStatus* sm_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  SmKernel* k = (SmKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  int64_t axis, count = 1;
  const void* x = NULL;
  void* y = NULL;
  SmJob job;
  int threads;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "Softmax: input is missing");
  /* the element type: float32, checked by the host against the registered constraint before each Compute */
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  if (rank < 1 || rank > SM_MAX_RANK)
    return sm_error("Softmax: input has rank %lld; this C kernel takes 1..%lld", (long long)rank, SM_MAX_RANK);
  axis = k->axis < 0 ? k->axis + (int64_t)rank : k->axis;
  if (axis < 0 || axis >= (int64_t)rank)
    return sm_error("Softmax: axis %lld is out of range for a rank-%lld input; give an axis in [-rank, rank)",
                    (long long)k->axis, (long long)rank);
  for (i = (size_t)axis + 1; !k->old && i < rank; ++i)
    if (dims[i] != 1)
      return sm_error("Softmax: axis %lld of a rank-%lld input with more than one value after it; this C kernel "
                      "takes rows of contiguous values (the numpy kernel runs the others)", (long long)k->axis,
                      (long long)rank);
  for (i = 0; i < rank; ++i) count *= dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (count == 0) return NULL; /* no rows, or rows of no values: an empty output */
  job.x = (const float*)x; job.y = (float*)y;
  for (job.n = 1, i = (size_t)axis; i < rank; ++i) job.n *= dims[i]; /* a row: the axis and what follows */
  job.rows = count / job.n;
  job.avx512 = sm_use_avx512();
  threads = mnb_threads();
  if ((int64_t)threads > count / SM_MIN_PER_THREAD) threads = (int)(count / SM_MIN_PER_THREAD);
  if ((int64_t)threads > job.rows) threads = (int)job.rows;
  if (threads < 1) threads = 1;
  mnb_parallel(threads, sm_job, &job);
  return NULL;
}

/* opset 13 on: axis defaults to -1; `old` (opsets 1..12): to 1, the input coerced to 2-D at axis */
static OrtStatus* sm_create_axis(const OrtKernelInfo* info, int old, OrtKernelImpl** out) {
  SmKernel* k;
  int64_t axis = -1;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "axis", old ? 1 : -1, &axis, NULL));
  k = (SmKernel*)cpu_kernels_new(sizeof *k, sm_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Softmax: out of memory creating the kernel");
  k->axis = axis;
  k->old = old;
  *out = &k->base;
  return NULL;
}

static OrtStatus* sm_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return sm_create_axis(info, 0, out);
}

static OrtStatus* sm_create_v1(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  (void)state;
  return sm_create_axis(info, 1, out);
}

OrtStatus* ort_cpu_ep_register_softmax(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  OrtStatus* st;
  g_api = api;
  /* 13: the axis semantics this kernel has; 1..12: axis default 1, the input coerced to 2-D there */
  st = cpu_kernels_add_onnx(api, registry, "Softmax", 13, "T", ORT_TENSOR_ELEMENT_FLOAT, sm_create, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx_until(api, registry, "Softmax", 1, 12, "T", ORT_TENSOR_ELEMENT_FLOAT, sm_create_v1,
                                           cpu_kernels_estimate_none);
  return st;
}
