/* ONNX Cast (opset 6+: `to` an element type number) between the fixed-size numeric types float32, float64, int8,
 * uint8, int32, int64 and bool, as an ort-abi kernel, with onnxruntime's (C's) conversions: to bool x != 0 (NaN is
 * true), from bool 0 / 1, between integers the low bits (two's complement), integer to float rounded to nearest,
 * float to int32 / int64 truncated toward zero (ort_cpu_ep._ckernels sends float to int8 / uint8, whose C conversion
 * is undefined past the type's range, to the numpy kernel). Elementwise; a cast to the same type is a copy; the
 * intra-op threads split the elements when each gets CAST_MIN_PER_THREAD or more. No workspace. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define CAST_MIN_PER_THREAD (1 << 16) /* elements below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct CastKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int64_t to;
} CastKernel;

/* the element types, their C types and indices into CAST_LOOPS */
#define CAST_TYPES(X)                                   \
  X(0, ORT_TENSOR_ELEMENT_FLOAT, float)                 \
  X(1, ORT_TENSOR_ELEMENT_DOUBLE, double)               \
  X(2, ORT_TENSOR_ELEMENT_INT8, int8_t)                 \
  X(3, ORT_TENSOR_ELEMENT_UINT8, uint8_t)               \
  X(4, ORT_TENSOR_ELEMENT_INT32, int32_t)               \
  X(5, ORT_TENSOR_ELEMENT_INT64, int64_t)               \
  X(6, ORT_TENSOR_ELEMENT_BOOL, _Bool)
#define CAST_N 7

typedef void (*CastLoop)(const void* x, void* y, int64_t n);

/* y = (D)x for every source S; C's conversion to _Bool is x != 0. A bool source is read as its bytes (0 or 1), which
 * vectorizes where _Bool loads do not */
typedef uint8_t cast_bool_bytes;
#define CAST_LOAD(S) CAST_LOAD_##S
#define CAST_LOAD_float float
#define CAST_LOAD_double double
#define CAST_LOAD_int8_t int8_t
#define CAST_LOAD_uint8_t uint8_t
#define CAST_LOAD_int32_t int32_t
#define CAST_LOAD_int64_t int64_t
#define CAST_LOAD__Bool cast_bool_bytes
#define CAST_FROM(S_INDEX, S_TYPE_ID, S)                                            \
  CAST_TYPES_TO(S, float, 0) CAST_TYPES_TO(S, double, 1) CAST_TYPES_TO(S, int8_t, 2) \
  CAST_TYPES_TO(S, uint8_t, 3) CAST_TYPES_TO(S, int32_t, 4) CAST_TYPES_TO(S, int64_t, 5) CAST_TYPES_TO(S, _Bool, 6)
#define CAST_TYPES_TO(S, D, D_INDEX)                                              \
  CPU_KERNELS_CLONES static void cast_##S##_##D_INDEX(const void* x, void* y, int64_t n) { \
    const CAST_LOAD(S)* a = (const CAST_LOAD(S)*)x;                              \
    D* b = (D*)y;                                                                \
    int64_t i;                                                                   \
    for (i = 0; i < n; ++i) b[i] = (D)a[i];                                      \
  }
CAST_TYPES(CAST_FROM)

#define CAST_ROW(S_INDEX, S_TYPE_ID, S) \
  {cast_##S##_0, cast_##S##_1, cast_##S##_2, cast_##S##_3, cast_##S##_4, cast_##S##_5, cast_##S##_6},
static const CastLoop CAST_LOOPS[CAST_N][CAST_N] = {CAST_TYPES(CAST_ROW)};

#define CAST_SIZE(S_INDEX, S_TYPE_ID, S) sizeof(S),
static const size_t CAST_SIZES[CAST_N] = {CAST_TYPES(CAST_SIZE)};

typedef struct CastJob {
  CastLoop loop;
  const char* x;
  char* y;
  int64_t n;
  size_t sx, sy; /* bytes an element of x and of y */
} CastJob;

/* index's share of the elements, in multiples of 64 */
static void cast_job(void* arg, int index, int count) {
  const CastJob* job = (const CastJob*)arg;
  int64_t i0, i1;
  cpu_kernels_share(job->n, index, count, 64, &i0, &i1);
  if (i0 < i1) job->loop(job->x + i0 * (int64_t)job->sx, job->y + i0 * (int64_t)job->sy, i1 - i0);
}

#define CAST_ID(S_INDEX, S_TYPE_ID, S) S_TYPE_ID,
static const int32_t CAST_IDS[CAST_N] = {CAST_TYPES(CAST_ID)};

static int cast_index(int64_t type) {
  int i;
  for (i = 0; i < CAST_N; ++i)
    if (CAST_IDS[i] == type) return i;
  return -1;
}

static OrtStatus* cast_fail(const char* what, long long a) {
  char msg[320];
  snprintf(msg, sizeof msg, "Cast: %s (%lld); this C kernel casts between float, double, int8, uint8, int32, int64 "
           "and bool (the numpy kernel takes the others)", what, a);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus* cast_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const CastKernel* k = (const CastKernel*)this_ptr;
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  int32_t type = 0;
  int64_t n = 1;
  int from, to = cast_index(k->to);
  const void* x = NULL;
  void* y = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, 0, &xv));
  if (xv == NULL) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "Cast: input is missing; it is required");
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(xv, &type));
  from = cast_index(type);
  if (from < 0) return cast_fail("input element type", type);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(xv, &dims, &rank));
  for (i = 0; i < rank; ++i) n *= dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(xv, &x));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (n > 0) {
    CastJob job = {CAST_LOOPS[from][to], (const char*)x, (char*)y, n, CAST_SIZES[from], CAST_SIZES[to]};
    mnb_parallel(mnb_threads_for(n, CAST_MIN_PER_THREAD), cast_job, &job);
  }
  return NULL;
}

static OrtStatus* cast_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  CastKernel* k;
  int64_t to = 0;
  int has = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(cpu_kernels_attr_int(g_api, info, "to", 0, &to, &has));
  if (!has) return g_api->CreateStatus(ORT_INVALID_ARGUMENT, "Cast: attribute 'to' is missing; it is required");
  if (cast_index(to) < 0) return cast_fail("attribute to", (long long)to);
  k = (CastKernel*)cpu_kernels_new(sizeof *k, cast_compute, cpu_kernels_declare_none);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "Cast: out of memory creating the kernel");
  k->to = to;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_cast(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  g_api = api;
  /* 6: `to` an integer (Cast-1 names the type); 19 added saturate, which concerns float8 only */
  return cpu_kernels_add_onnx_types(api, registry, "Cast", 6, "T1", CAST_IDS, CAST_N, cast_create,
                                    cpu_kernels_estimate_none);
}
