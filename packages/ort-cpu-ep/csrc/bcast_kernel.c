/* Broadcasting ops beside the float32 arithmetic (arith_kernel.c), as ort-abi kernels: Expand (any fixed-size element
 * type: X broadcast against the int64 `shape` input, opset 8+), Equal / Less / Greater / LessOrEqual /
 * GreaterOrEqual (float32, int32, int64 -> bool) and two-input Max / Min (float32; NaN propagates, numpy's maximum /
 * minimum). The output shape is the inputs' aligned on the right, each extent equal or 1 in one of them (0 against 1
 * gives 0); anything else is an error quoting both shapes. The loop: neighbouring dimensions merged where every input
 * steps through them as one, then runs along the innermost dimension, each input contiguous or one value; the
 * intra-op threads split the runs when there are enough outputs (bc_execute). No workspace. */
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#define BC_MAX_RANK 16
#define BC_TEXT 160
#define BC_MIN_PER_THREAD (1 << 16) /* outputs below which an extra thread does not pay */

enum { BC_EXPAND = 0, BC_EQUAL, BC_LESS, BC_GREATER, BC_LESS_EQUAL, BC_GREATER_EQUAL, BC_MAX, BC_MIN, BC_OPS };
static const char* const BC_NAMES[BC_OPS] = {"Expand", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                             "Max", "Min"};

static const OrtKernelApi* g_api = NULL;

typedef struct BcKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int op;
} BcKernel;

/* one run of n outputs: a and b step sa / sb elements (0 or 1) */
typedef void (*BcRun)(const void* a, int64_t sa, const void* b, int64_t sb, void* y, int64_t n);

/* the three stride patterns as separate loops (each vectorizes): both contiguous, a one value, b one value */
#define BC_COMPARE(NAME, T, OP)                                                                        \
  CPU_KERNELS_CLONES static void bc_##NAME(const void* a, int64_t sa, const void* b, int64_t sb, void* y, \
                                          int64_t n) {                                                 \
    const T* x0 = (const T*)a;                                                                         \
    const T* x1 = (const T*)b;                                                                         \
    uint8_t* out = (uint8_t*)y; /* bool bytes: uint8 stores vectorize, _Bool ones do not */                \
    int64_t i;                                                                                         \
    if (sa && sb) {                                                                                    \
      for (i = 0; i < n; ++i) out[i] = x0[i] OP x1[i];                                                 \
    } else if (sb) {                                                                                   \
      const T v = x0[0];                                                                               \
      for (i = 0; i < n; ++i) out[i] = v OP x1[i];                                                     \
    } else if (sa) {                                                                                   \
      const T v = x1[0];                                                                               \
      for (i = 0; i < n; ++i) out[i] = x0[i] OP v;                                                     \
    } else {                                                                                           \
      const uint8_t v = x0[0] OP x1[0];                                                                \
      for (i = 0; i < n; ++i) out[i] = v;                                                              \
    }                                                                                                  \
  }
#define BC_COMPARES(T, SUFFIX)                                                                          \
  BC_COMPARE(eq_##SUFFIX, T, ==) BC_COMPARE(lt_##SUFFIX, T, <) BC_COMPARE(gt_##SUFFIX, T, >)            \
  BC_COMPARE(le_##SUFFIX, T, <=) BC_COMPARE(ge_##SUFFIX, T, >=)
BC_COMPARES(float, f32)
BC_COMPARES(int32_t, i32)
BC_COMPARES(int64_t, i64)

/* numpy's maximum / minimum: a NaN of either side is the result */
CPU_KERNELS_CLONES static void bc_max_f32(const void* a, int64_t sa, const void* b, int64_t sb, void* y, int64_t n) {
  const float *x0 = (const float*)a, *x1 = (const float*)b;
  float* out = (float*)y;
  int64_t i;
  for (i = 0; i < n; ++i) {
    const float p = x0[i * sa], q = x1[i * sb];
    out[i] = p != p ? p : (q > p || q != q ? q : p);
  }
}

CPU_KERNELS_CLONES static void bc_min_f32(const void* a, int64_t sa, const void* b, int64_t sb, void* y, int64_t n) {
  const float *x0 = (const float*)a, *x1 = (const float*)b;
  float* out = (float*)y;
  int64_t i;
  for (i = 0; i < n; ++i) {
    const float p = x0[i * sa], q = x1[i * sb];
    out[i] = p != p ? p : (q < p || q != q ? q : p);
  }
}

/* the element type's loop for `op`, NULL when this kernel does not take it */
static BcRun bc_run_for(int op, int32_t type) {
  static const BcRun f32[5] = {bc_eq_f32, bc_lt_f32, bc_gt_f32, bc_le_f32, bc_ge_f32};
  static const BcRun i32[5] = {bc_eq_i32, bc_lt_i32, bc_gt_i32, bc_le_i32, bc_ge_i32};
  static const BcRun i64[5] = {bc_eq_i64, bc_lt_i64, bc_gt_i64, bc_le_i64, bc_ge_i64};
  if (op == BC_MAX || op == BC_MIN) return type == ORT_TENSOR_ELEMENT_FLOAT ? (op == BC_MAX ? bc_max_f32 : bc_min_f32) : NULL;
  if (type == ORT_TENSOR_ELEMENT_FLOAT) return f32[op - BC_EQUAL];
  if (type == ORT_TENSOR_ELEMENT_INT32) return i32[op - BC_EQUAL];
  if (type == ORT_TENSOR_ELEMENT_INT64) return i64[op - BC_EQUAL];
  return NULL;
}

static size_t bc_elem_size(int32_t type) {
  switch (type) {
    case ORT_TENSOR_ELEMENT_BOOL: case ORT_TENSOR_ELEMENT_UINT8: case ORT_TENSOR_ELEMENT_INT8: return 1;
    case ORT_TENSOR_ELEMENT_UINT16: case ORT_TENSOR_ELEMENT_INT16: case ORT_TENSOR_ELEMENT_FLOAT16:
    case ORT_TENSOR_ELEMENT_BFLOAT16: return 2;
    case ORT_TENSOR_ELEMENT_FLOAT: case ORT_TENSOR_ELEMENT_INT32: case ORT_TENSOR_ELEMENT_UINT32: return 4;
    case ORT_TENSOR_ELEMENT_DOUBLE: case ORT_TENSOR_ELEMENT_INT64: case ORT_TENSOR_ELEMENT_UINT64: return 8;
    default: return 0;
  }
}

static void bc_shape_str(char* out, size_t len, const int64_t* dims, size_t rank) {
  size_t i, used = 0;
  used += (size_t)snprintf(out, len, "[");
  for (i = 0; i < rank && used < len; ++i)
    used += (size_t)snprintf(out + used, len - used, i ? ", %lld" : "%lld", (long long)dims[i]);
  if (used < len) snprintf(out + used, len - used, "]");
}

/* the broadcast plan of two operands: merged dims, element strides of each (0: broadcast) */
typedef struct BcPlan {
  int rank;
  int64_t dims[BC_MAX_RANK], s[2][BC_MAX_RANK], count;
} BcPlan;

/* out = the broadcast shape of a and b; 0 or a message */
static int bc_plan(const int64_t* const* d, const size_t* r, int64_t* out, size_t* out_rank, BcPlan* p, char* err,
                   size_t len) {
  size_t rank = r[0] > r[1] ? r[0] : r[1], i;
  int k, m = 0;
  int64_t ext[2][BC_MAX_RANK], stride[2] = {1, 1};
  char a[BC_TEXT], b[BC_TEXT];
  if (rank > BC_MAX_RANK) {
    snprintf(err, len, "the broadcast shape has rank %zu; this C kernel takes up to %d", rank, BC_MAX_RANK);
    return 1;
  }
  for (i = 0; i < rank; ++i) {
    for (k = 0; k < 2; ++k) ext[k][i] = i + r[k] >= rank ? d[k][i + r[k] - rank] : 1;
    if (ext[0][i] != ext[1][i] && ext[0][i] != 1 && ext[1][i] != 1) {
      bc_shape_str(a, sizeof a, d[0], r[0]);
      bc_shape_str(b, sizeof b, d[1], r[1]);
      snprintf(err, len, "shapes %s and %s do not broadcast (axis %zu: %lld against %lld); make each extent equal "
               "or 1", a, b, i, (long long)ext[0][i], (long long)ext[1][i]);
      return 1;
    }
    out[i] = ext[0][i] == 1 ? ext[1][i] : ext[0][i];
  }
  *out_rank = rank;
  p->count = 1;
  for (i = 0; i < rank; ++i) p->count *= out[i];
  /* innermost first: element strides, merged with the previous (inner) dim where every operand steps on */
  for (i = rank; i-- > 0;) {
    int64_t s[2];
    if (out[i] == 1) continue;
    for (k = 0; k < 2; ++k) s[k] = ext[k][i] == 1 ? 0 : stride[k];
    if (m > 0 && s[0] == p->s[0][m - 1] * p->dims[m - 1] && s[1] == p->s[1][m - 1] * p->dims[m - 1]) {
      p->dims[m - 1] *= out[i];
    } else {
      p->dims[m] = out[i];
      p->s[0][m] = s[0];
      p->s[1][m] = s[1];
      ++m;
    }
    for (k = 0; k < 2; ++k) stride[k] *= ext[k][i];
  }
  if (m == 0) { /* a single element */
    p->dims[0] = 1;
    p->s[0][0] = p->s[1][0] = 0;
    m = 1;
  }
  /* stored innermost first; reverse into outermost first */
  for (k = 0; k < m / 2; ++k) {
    int64_t t = p->dims[k], u;
    p->dims[k] = p->dims[m - 1 - k]; p->dims[m - 1 - k] = t;
    for (i = 0; i < 2; ++i) {
      u = p->s[i][k]; p->s[i][k] = p->s[i][m - 1 - k]; p->s[i][m - 1 - k] = u;
    }
  }
  p->rank = m;
  return 0;
}

/* runs [r0, r1) of the plan (a run: `inner` outputs along the innermost dimension, in row-major order); Expand (run
 * NULL) copies element `size` bytes of a where the inner stride is 0 or 1 */
static void bc_rows(const BcPlan* p, const char* a, size_t sa, const char* b, size_t sb, char* y, size_t sy,
                    BcRun run, int64_t r0, int64_t r1) {
  int64_t idx[BC_MAX_RANK], off[2] = {0, 0}, inner = p->dims[p->rank - 1], o = r0 * inner, rem = r0, row;
  const int64_t ia = p->s[0][p->rank - 1], ib = p->s[1][p->rank - 1];
  int d;
  for (d = p->rank - 2; d >= 0; --d) { /* the odometer at run r0 */
    idx[d] = rem % p->dims[d];
    rem /= p->dims[d];
    off[0] += idx[d] * p->s[0][d];
    off[1] += idx[d] * p->s[1][d];
  }
  for (row = r0; row < r1; ++row) {
    if (run != NULL) {
      run(a + off[0] * (int64_t)sa, ia, b + off[1] * (int64_t)sb, ib, y + o * (int64_t)sy, inner);
    } else if (ia == 1) {
      memcpy(y + o * (int64_t)sy, a + off[0] * (int64_t)sa, (size_t)inner * sa);
    } else {
      int64_t j;
      for (j = 0; j < inner; ++j) memcpy(y + (o + j) * (int64_t)sy, a + off[0] * (int64_t)sa, sa);
    }
    o += inner;
    for (d = p->rank - 2; d >= 0; --d) { /* the odometer over the outer dims */
      off[0] += p->s[0][d];
      off[1] += p->s[1][d];
      if (++idx[d] < p->dims[d]) break;
      off[0] -= p->s[0][d] * p->dims[d];
      off[1] -= p->s[1][d] * p->dims[d];
      idx[d] = 0;
    }
  }
}

typedef struct BcJob {
  const BcPlan* plan;
  const char *a, *b;
  size_t sa, sb, sy;
  char* y;
  BcRun run;
  int64_t rows;
} BcJob;

static void bc_job(void* arg, int index, int count) {
  const BcJob* j = (const BcJob*)arg;
  int64_t r0, r1;
  cpu_kernels_share(j->rows, index, count, 1, &r0, &r1);
  if (r0 < r1) bc_rows(j->plan, j->a, j->sa, j->b, j->sb, j->y, j->sy, j->run, r0, r1);
}

/* every run of the plan, split across the intra-op threads by whole runs when each gets BC_MIN_PER_THREAD outputs
 * or more */
static void bc_execute(const BcPlan* p, const char* a, size_t sa, const char* b, size_t sb, char* y, size_t sy,
                       BcRun run) {
  BcJob job = {p, a, b, sa, sb, sy, y, run, 0};
  int threads;
  if (p->count == 0) return;
  job.rows = p->count / p->dims[p->rank - 1];
  threads = mnb_threads_for(p->count, BC_MIN_PER_THREAD);
  mnb_parallel((int64_t)threads > job.rows ? (int)job.rows : threads, bc_job, &job);
}

static OrtStatus* bc_fail(const BcKernel* k, const char* what) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s: %s", BC_NAMES[k->op], what);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus* bc_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const BcKernel* k = (const BcKernel*)this_ptr;
  const OrtValue* v[2] = {NULL, NULL};
  const int64_t* d[2] = {NULL, NULL};
  size_t r[2] = {0, 0}, out_rank = 0, size[2], ysize;
  int32_t type[2] = {0, 0};
  const void* data[2] = {NULL, NULL};
  int64_t out[BC_MAX_RANK], shape_values[BC_MAX_RANK];
  OrtValue* yv = NULL;
  void* y = NULL;
  BcRun run = NULL;
  BcPlan plan;
  char err[420];
  int i;
  for (i = 0; i < 2; ++i) {
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, (size_t)i, &v[i]));
    if (v[i] == NULL) return bc_fail(k, i ? "input 1 is missing; it is required" : "input 0 is missing; it is required");
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(v[i], &type[i]));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v[i], &d[i], &r[i]));
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(v[i], &data[i]));
    size[i] = bc_elem_size(type[i]);
  }
  if (k->op == BC_EXPAND) { /* input 1 holds the shape: its values are operand 1's extents */
    int64_t n = 1;
    size_t j;
    for (j = 0; j < r[1]; ++j) n *= d[1][j];
    if (type[1] != ORT_TENSOR_ELEMENT_INT64 || r[1] > 1 || n > BC_MAX_RANK)
      return bc_fail(k, "input shape must be a 1-D int64 tensor of at most 16 values");
    memcpy(shape_values, data[1], (size_t)n * sizeof(int64_t));
    d[1] = shape_values;
    r[1] = (size_t)n;
    size[1] = 0;
    ysize = size[0];
    if (ysize == 0) return bc_fail(k, "input 0 has an element type this C kernel does not move");
  } else {
    run = bc_run_for(k->op, type[0]);
    if (run == NULL || type[1] != type[0]) {
      snprintf(err, sizeof err, "element types %d and %d; this C kernel takes two inputs of one type among float32, "
               "int32, int64 (Max / Min: float32)", (int)type[0], (int)type[1]);
      return bc_fail(k, err);
    }
    ysize = k->op == BC_MAX || k->op == BC_MIN ? size[0] : 1;
  }
  if (bc_plan(d, r, out, &out_rank, &plan, err, sizeof err)) return bc_fail(k, err);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out, out_rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  bc_execute(&plan, (const char*)data[0], size[0], (const char*)data[1], size[1], (char*)y, ysize, run);
  return NULL;
}

static OrtStatus* bc_new(int op, OrtKernelImpl** out) {
  BcKernel* k = (BcKernel*)cpu_kernels_new(sizeof *k, bc_compute, cpu_kernels_declare_none);
  char msg[96];
  if (k == NULL) {
    snprintf(msg, sizeof msg, "%s: out of memory creating the kernel", BC_NAMES[op]);
    return g_api->CreateStatus(ORT_FAIL, msg);
  }
  k->op = op;
  *out = &k->base;
  return NULL;
}

#define BC_CREATE(fn, op)                                                                   \
  static OrtStatus* fn(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state; (void)info;                                                          \
    return bc_new(op, out);                                                           \
  }
BC_CREATE(bc_expand, BC_EXPAND)
BC_CREATE(bc_equal, BC_EQUAL)
BC_CREATE(bc_less, BC_LESS)
BC_CREATE(bc_greater, BC_GREATER)
BC_CREATE(bc_less_equal, BC_LESS_EQUAL)
BC_CREATE(bc_greater_equal, BC_GREATER_EQUAL)
BC_CREATE(bc_max, BC_MAX)
BC_CREATE(bc_min, BC_MIN)

OrtStatus* ort_cpu_ep_register_broadcast(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const int32_t moved[] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_UINT8, ORT_TENSOR_ELEMENT_INT8,
                                  ORT_TENSOR_ELEMENT_UINT16, ORT_TENSOR_ELEMENT_INT16, ORT_TENSOR_ELEMENT_INT32,
                                  ORT_TENSOR_ELEMENT_INT64, ORT_TENSOR_ELEMENT_BOOL, ORT_TENSOR_ELEMENT_FLOAT16,
                                  ORT_TENSOR_ELEMENT_DOUBLE, ORT_TENSOR_ELEMENT_UINT32, ORT_TENSOR_ELEMENT_UINT64,
                                  ORT_TENSOR_ELEMENT_BFLOAT16};
  static const int32_t compared[] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_INT32, ORT_TENSOR_ELEMENT_INT64};
  /* since: the opset the op took numpy broadcasting (7; Expand 8; LessOrEqual / GreaterOrEqual 12; Max / Min 8) */
  static const struct {
    const char* op;
    int since;
    OrtKernelCreateFunc create;
  } cmp[5] = {{"Equal", 7, bc_equal}, {"Less", 7, bc_less}, {"Greater", 7, bc_greater},
              {"LessOrEqual", 12, bc_less_equal}, {"GreaterOrEqual", 12, bc_greater_equal}};
  OrtStatus* st;
  int i;
  g_api = api;
  st = cpu_kernels_add_onnx_types(api, registry, "Expand", 8, "T", moved, (int)(sizeof moved / sizeof moved[0]),
                                  bc_expand, cpu_kernels_estimate_none);
  for (i = 0; i < 5 && !st; ++i)
    st = cpu_kernels_add_onnx_types(api, registry, cmp[i].op, cmp[i].since, "T", compared, 3, cmp[i].create,
                                    cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "Max", 8, "T", ORT_TENSOR_ELEMENT_FLOAT, bc_max, cpu_kernels_estimate_none);
  if (!st) st = cpu_kernels_add_onnx(api, registry, "Min", 8, "T", ORT_TENSOR_ELEMENT_FLOAT, bc_min, cpu_kernels_estimate_none);
  return st;
}
