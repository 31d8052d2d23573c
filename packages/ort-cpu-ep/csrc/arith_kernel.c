/* Elementwise arithmetic as ort-abi kernels: ONNX Add, Sub, Mul, Div (since opset 7: multidirectional,
 * numpy-style broadcasting) and Neg (since opset 6) on float32; Add, Sub and Mul also on int64 and int32 (a
 * decoder's shape and attention-mask arithmetic), wrapping around on overflow as onnxruntime's and numpy's do.
 *
 * Broadcasting: the output shape is the inputs' shapes aligned on the right, each dimension equal or 1 in one of
 * them (0 against 1 gives 0); anything else is an error naming the op and both shapes. The loop: the output's
 * dimensions of size 1 dropped, then neighbours merged where both inputs step through them as one (so same
 * shapes, a scalar either side and a trailing vector ([B, S, H] + [H], [1, 1, H] + [H]) become one or two
 * dimensions), then runs along the innermost dimension, each input either contiguous (stride 1) or one value
 * (stride 0), in 16-float vectors (the integer loops are plain loops the compiler vectorizes). Each output element is one IEEE single-precision operation on its two inputs,
 * as numpy computes it: the same bits (division by zero, infinities, NaN, denormals; the float mode is left as
 * it is). Up to 64 dimensions (numpy's own limit). The plan may write the output over an input of the output's
 * shape: each vector of it is read before the same vector of the output is written. No workspace. The intra-op
 * threads split the output elements in whole vectors when each gets BIN_MIN_PER_THREAD or more (bin_execute). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads */

#pragma GCC diagnostic ignored "-Wpsabi" /* bin_v values never cross a call */

#define BIN_MAX_RANK 64
#define BIN_V 16 /* floats a vector */
#define BIN_MIN_PER_THREAD (1 << 15) /* output elements below which an extra thread does not pay */

typedef float bin_v __attribute__((vector_size(BIN_V * sizeof(float))));

typedef enum BinOp { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_NEG } BinOp;

static const char* const BIN_NAMES[] = {"Add", "Sub", "Mul", "Div", "Neg"};
static const OrtKernelApi* g_api = NULL;

typedef struct BinKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  BinOp op;
} BinKernel;

/* y[i] = a[i] OP b[i] (vv), a[i] OP b[0] (vs), a[0] OP b[i] (sv), for i in [0, n); one clone per x86-64 level.
 * Vectors go through memcpy: no alignment assumed, and y may be a or b exactly. */
#define BIN_LOOPS(NAME, OP)                                                                          \
  CPU_KERNELS_CLONES static void bin_##NAME##_vv(const void* a_, const void* b_, void* y_, int64_t n) { \
    const float *a = (const float*)a_, *b = (const float*)b_;                                        \
    float* y = (float*)y_;                                                                           \
    int64_t i = 0;                                                                                   \
    for (; i + BIN_V <= n; i += BIN_V) {                                                             \
      bin_v va, vb;                                                                                  \
      memcpy(&va, a + i, sizeof va);                                                                 \
      memcpy(&vb, b + i, sizeof vb);                                                                 \
      va = va OP vb;                                                                                 \
      memcpy(y + i, &va, sizeof va);                                                                 \
    }                                                                                                \
    for (; i < n; ++i) y[i] = a[i] OP b[i];                                                          \
  }                                                                                                  \
  CPU_KERNELS_CLONES static void bin_##NAME##_vs(const void* a_, const void* b_, void* y_, int64_t n) { \
    const float *a = (const float*)a_, *b = (const float*)b_;                                        \
    float* y = (float*)y_;                                                                           \
    const float s = b[0];                                                                            \
    int64_t i = 0;                                                                                   \
    for (; i + BIN_V <= n; i += BIN_V) {                                                             \
      bin_v va;                                                                                      \
      memcpy(&va, a + i, sizeof va);                                                                 \
      va = va OP s;                                                                                  \
      memcpy(y + i, &va, sizeof va);                                                                 \
    }                                                                                                \
    for (; i < n; ++i) y[i] = a[i] OP s;                                                             \
  }                                                                                                  \
  CPU_KERNELS_CLONES static void bin_##NAME##_sv(const void* a_, const void* b_, void* y_, int64_t n) { \
    const float *a = (const float*)a_, *b = (const float*)b_;                                        \
    float* y = (float*)y_;                                                                           \
    const float s = a[0];                                                                            \
    int64_t i = 0;                                                                                   \
    for (; i + BIN_V <= n; i += BIN_V) {                                                             \
      bin_v vb;                                                                                      \
      memcpy(&vb, b + i, sizeof vb);                                                                 \
      vb = s OP vb;                                                                                  \
      memcpy(y + i, &vb, sizeof vb);                                                                 \
    }                                                                                                \
    for (; i < n; ++i) y[i] = s OP b[i];                                                             \
  }

BIN_LOOPS(add, +)
BIN_LOOPS(sub, -)
BIN_LOOPS(mul, *)
BIN_LOOPS(div, /)

/* the integer loops: through the unsigned type (a wrap-around, never undefined), one clone per x86-64 level */
#define BIN_INT_LOOPS(T, U, NAME, OP)                                                                      \
  CPU_KERNELS_CLONES static void bin_##NAME##_vv(const void* a_, const void* b_, void* y_, int64_t n) { \
    const T *a = (const T*)a_, *b = (const T*)b_;                                                        \
    T* y = (T*)y_;                                                                                       \
    for (int64_t i = 0; i < n; ++i) y[i] = (T)((U)a[i] OP (U)b[i]);                                      \
  }                                                                                                      \
  CPU_KERNELS_CLONES static void bin_##NAME##_vs(const void* a_, const void* b_, void* y_, int64_t n) { \
    const T *a = (const T*)a_, *b = (const T*)b_;                                                        \
    T* y = (T*)y_;                                                                                       \
    const U s = (U)b[0];                                                                                 \
    for (int64_t i = 0; i < n; ++i) y[i] = (T)((U)a[i] OP s);                                            \
  }                                                                                                      \
  CPU_KERNELS_CLONES static void bin_##NAME##_sv(const void* a_, const void* b_, void* y_, int64_t n) { \
    const T *a = (const T*)a_, *b = (const T*)b_;                                                        \
    T* y = (T*)y_;                                                                                       \
    const U s = (U)a[0];                                                                                 \
    for (int64_t i = 0; i < n; ++i) y[i] = (T)(s OP (U)b[i]);                                            \
  }
BIN_INT_LOOPS(int64_t, uint64_t, add_i64, +)
BIN_INT_LOOPS(int64_t, uint64_t, sub_i64, -)
BIN_INT_LOOPS(int64_t, uint64_t, mul_i64, *)
BIN_INT_LOOPS(int32_t, uint32_t, add_i32, +)
BIN_INT_LOOPS(int32_t, uint32_t, sub_i32, -)
BIN_INT_LOOPS(int32_t, uint32_t, mul_i32, *)

/* the loops by element kind (BinKind) and op (Div and Neg are float32 only), through untyped pointers */
typedef void (*BinAnyLoop)(const void* a, const void* b, void* y, int64_t n);
typedef enum BinKind { BIN_F32, BIN_I64, BIN_I32 } BinKind;
static const size_t BIN_SIZE[3] = {sizeof(float), sizeof(int64_t), sizeof(int32_t)};
static const char* const BIN_KIND_NAMES[3] = {"float32", "int64", "int32"};
static const BinAnyLoop BIN_ANY[3][4][3] = {
    {{bin_add_vv, bin_add_vs, bin_add_sv},
     {bin_sub_vv, bin_sub_vs, bin_sub_sv},
     {bin_mul_vv, bin_mul_vs, bin_mul_sv},
     {bin_div_vv, bin_div_vs, bin_div_sv}},
    {{bin_add_i64_vv, bin_add_i64_vs, bin_add_i64_sv},
     {bin_sub_i64_vv, bin_sub_i64_vs, bin_sub_i64_sv},
     {bin_mul_i64_vv, bin_mul_i64_vs, bin_mul_i64_sv},
     {NULL, NULL, NULL}},
    {{bin_add_i32_vv, bin_add_i32_vs, bin_add_i32_sv},
     {bin_sub_i32_vv, bin_sub_i32_vs, bin_sub_i32_sv},
     {bin_mul_i32_vv, bin_mul_i32_vs, bin_mul_i32_sv},
     {NULL, NULL, NULL}},
};

CPU_KERNELS_CLONES
static void bin_neg(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + BIN_V <= n; i += BIN_V) {
    bin_v v;
    memcpy(&v, x + i, sizeof v);
    v = -v; /* the sign bit flipped, NaN included, as numpy's negative */
    memcpy(y + i, &v, sizeof v);
  }
  for (; i < n; ++i) y[i] = -x[i];
}

/* the broadcast loop after collapsing: `rank` >= 1 dimensions, element strides of a and b (0: broadcast), the
 * innermost stride of each 0 or 1 */
typedef struct BinPlan {
  const char* a;
  const char* b;
  char* y;
  BinOp op;
  BinKind kind;
  size_t size; /* bytes an element */
  int rank;
  int64_t count;
  int64_t dims[BIN_MAX_RANK], sa[BIN_MAX_RANK], sb[BIN_MAX_RANK];
} BinPlan;

/* one run of n outputs along the innermost dimension */
static void bin_run(const BinPlan* p, const char* a, const char* b, char* y, int64_t n) {
  int64_t sa = p->sa[p->rank - 1], sb = p->sb[p->rank - 1], i;
  const BinAnyLoop* loops = BIN_ANY[p->kind][p->op];
  if (sa == 1 && sb == 1) {
    loops[0](a, b, y, n);
  } else if (sa == 1) {
    loops[1](a, b, y, n);
  } else if (sb == 1) {
    loops[2](a, b, y, n);
  } else { /* both one value: only a single output element can be left like this */
    for (i = 0; i < n; ++i) loops[1](a, b, y + (size_t)i * p->size, 1);
  }
}

/* output elements [start, end) in row-major order */
static void bin_span(const BinPlan* p, int64_t start, int64_t end) {
  const int r = p->rank;
  const int64_t inner = p->dims[r - 1];
  int64_t idx[BIN_MAX_RANK], rem = start, oa = 0, ob = 0;
  int k;
  for (k = r - 1; k >= 0; --k) {
    idx[k] = rem % p->dims[k];
    rem /= p->dims[k];
    oa += idx[k] * p->sa[k];
    ob += idx[k] * p->sb[k];
  }
  while (start < end) {
    int64_t len = inner - idx[r - 1];
    if (len > end - start) len = end - start;
    bin_run(p, p->a + oa * (int64_t)p->size, p->b + ob * (int64_t)p->size, p->y + start * (int64_t)p->size, len);
    start += len;
    idx[r - 1] += len;
    oa += len * p->sa[r - 1];
    ob += len * p->sb[r - 1];
    for (k = r - 1; k > 0 && idx[k] == p->dims[k]; --k) { /* carry into the outer dimensions */
      oa -= p->dims[k] * p->sa[k];
      ob -= p->dims[k] * p->sb[k];
      idx[k] = 0;
      ++idx[k - 1];
      oa += p->sa[k - 1];
      ob += p->sb[k - 1];
    }
  }
}

/* index's share of the output elements, in whole vectors of BIN_V */
static void bin_job(void* arg, int index, int count) {
  const BinPlan* p = (const BinPlan*)arg;
  int64_t start, end;
  cpu_kernels_share(p->count, index, count, BIN_V, &start, &end);
  if (start >= end) return;
  if (p->op == BIN_NEG)
    bin_neg((const float*)p->a + start, (float*)p->y + start, end - start);
  else
    bin_span(p, start, end);
}

/* every output element, split across the intra-op threads when each gets BIN_MIN_PER_THREAD or more */
static void bin_execute(BinPlan* p) {
  mnb_parallel(mnb_threads_for(p->count, BIN_MIN_PER_THREAD), bin_job, p);
}

/* "[2, 3, 4]" into buf (truncated with "..." past its size) */
static void bin_format_shape(char* buf, size_t cap, const int64_t* dims, size_t rank) {
  size_t used = 0, i;
  used += (size_t)snprintf(buf, cap, "[");
  for (i = 0; i < rank && used < cap; ++i)
    used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)dims[i]);
  if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "]");
  if (used >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

static OrtStatus* bin_shape_error(BinOp op, const int64_t* da, size_t ra, const int64_t* db, size_t rb) {
  char sa[160], sb[160], msg[512];
  bin_format_shape(sa, sizeof sa, da, ra);
  bin_format_shape(sb, sizeof sb, db, rb);
  snprintf(msg, sizeof msg,
           "%s: inputs of shapes %s and %s do not broadcast (ONNX multidirectional broadcasting: aligned on the "
           "right, each dimension equal or 1 in one of them); give the node inputs of compatible shapes",
           BIN_NAMES[op], sa, sb);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* input `index`: float32 for every op, int64 or int32 for Add, Sub and Mul; *kind says which (input 1 must
 * have input 0's: the caller checks) */
static OrtStatus* bin_input(OrtKernelContext* ctx, BinOp op, size_t index, const OrtValue** value,
                            const int64_t** dims, size_t* rank, const char** data, BinKind* kind) {
  char msg[200];
  int32_t type = 0;
  const void* raw = NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, value));
  if (*value == NULL) {
    snprintf(msg, sizeof msg, "%s: input %d is missing", BIN_NAMES[op], (int)index);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(*value, &type));
  if (type == ORT_TENSOR_ELEMENT_FLOAT) {
    *kind = BIN_F32;
  } else if ((type == ORT_TENSOR_ELEMENT_INT64 || type == ORT_TENSOR_ELEMENT_INT32) && op <= BIN_MUL) {
    *kind = type == ORT_TENSOR_ELEMENT_INT64 ? BIN_I64 : BIN_I32;
  } else {
    snprintf(msg, sizeof msg, "%s: input %d has element type %d; this C kernel takes float32 (1)%s", BIN_NAMES[op],
             (int)index, (int)type, op <= BIN_MUL ? ", int64 (7) or int32 (6)" : " only");
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(*value, dims, rank));
  if (*rank > BIN_MAX_RANK) {
    snprintf(msg, sizeof msg, "%s: input %d has rank %lld; this C kernel takes up to %d", BIN_NAMES[op],
             (int)index, (long long)*rank, BIN_MAX_RANK);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(*value, &raw));
  *data = (const char*)raw;
  return NULL;
}

/* p's collapsed loop for output dims `out` (rank r) and the inputs' dims right-aligned to it */
static void bin_collapse(BinPlan* p, const int64_t* out, size_t r, const int64_t* da, size_t ra, const int64_t* db,
                         size_t rb) {
  int64_t sa[BIN_MAX_RANK], sb[BIN_MAX_RANK], step_a = 1, step_b = 1;
  size_t i;
  int n = 0;
  for (i = r; i-- > 0;) { /* contiguous strides, 0 along a broadcast (or absent) dimension */
    int64_t ea = i + ra >= r ? da[i + ra - r] : 1, eb = i + rb >= r ? db[i + rb - r] : 1;
    sa[i] = ea == 1 ? 0 : step_a;
    sb[i] = eb == 1 ? 0 : step_b;
    step_a *= ea;
    step_b *= eb;
  }
  for (i = 0; i < r; ++i) {
    if (out[i] == 1) continue; /* no step at all */
    if (n > 0 && p->sa[n - 1] == sa[i] * out[i] && p->sb[n - 1] == sb[i] * out[i]) {
      p->dims[n - 1] *= out[i]; /* the outer one steps as the inner one continued: one dimension */
      p->sa[n - 1] = sa[i];
      p->sb[n - 1] = sb[i];
      continue;
    }
    p->dims[n] = out[i];
    p->sa[n] = sa[i];
    p->sb[n] = sb[i];
    ++n;
  }
  if (n == 0) { /* one element */
    p->dims[0] = 1;
    p->sa[0] = p->sb[0] = 0;
    n = 1;
  }
  p->rank = n;
}

static OrtStatus* bin_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const BinOp op = ((BinKernel*)this_ptr)->op;
  const OrtValue *av = NULL, *bv = NULL;
  OrtValue* yv = NULL;
  const int64_t *da = NULL, *db = NULL;
  size_t ra = 0, rb = 0, r, i;
  int64_t out[BIN_MAX_RANK];
  const char *a = NULL, *b = NULL;
  void* y = NULL;
  BinPlan p;
  BinKind ka = BIN_F32, kb = BIN_F32;
  ORT_KERNEL_RETURN_IF_ERROR(bin_input(ctx, op, 0, &av, &da, &ra, &a, &ka));
  ORT_KERNEL_RETURN_IF_ERROR(bin_input(ctx, op, 1, &bv, &db, &rb, &b, &kb));
  if (ka != kb) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: inputs 0 and 1 have different element types (%s and %s); ONNX requires one type T",
             BIN_NAMES[op], BIN_KIND_NAMES[ka], BIN_KIND_NAMES[kb]);
    return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
  }
  r = ra > rb ? ra : rb;
  p.count = 1;
  for (i = 0; i < r; ++i) { /* right-aligned */
    int64_t ea = i + ra >= r ? da[i + ra - r] : 1, eb = i + rb >= r ? db[i + rb - r] : 1;
    if (ea != eb && ea != 1 && eb != 1) return bin_shape_error(op, da, ra, db, rb);
    out[i] = ea == 1 ? eb : ea;
    p.count *= out[i];
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out, r, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (p.count == 0) return NULL;
  p.a = a; p.b = b; p.y = (char*)y; p.op = op; p.kind = ka; p.size = BIN_SIZE[ka];
  bin_collapse(&p, out, r, da, ra, db, rb);
  bin_execute(&p);
  return NULL;
}

static OrtStatus* neg_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const OrtValue* xv = NULL;
  OrtValue* yv = NULL;
  const int64_t* dims = NULL;
  size_t rank = 0, i;
  const char* x = NULL;
  void* y = NULL;
  BinPlan p;
  BinKind kind = BIN_F32;
  (void)this_ptr;
  ORT_KERNEL_RETURN_IF_ERROR(bin_input(ctx, BIN_NEG, 0, &xv, &dims, &rank, &x, &kind));
  for (p.count = 1, i = 0; i < rank; ++i) p.count *= dims[i];
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &yv));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(yv, &y));
  if (p.count == 0) return NULL;
  p.a = x; p.b = NULL; p.y = (char*)y; p.op = BIN_NEG; p.kind = kind; p.size = BIN_SIZE[kind];
  p.rank = 1; p.dims[0] = p.count;
  bin_execute(&p);
  return NULL;
}

static OrtStatus* bin_create(BinOp op, OrtKernelImpl** out) {
  BinKernel* k = (BinKernel*)cpu_kernels_new(sizeof *k, op == BIN_NEG ? neg_compute : bin_compute, cpu_kernels_declare_none);
  if (k == NULL) {
    char msg[80];
    snprintf(msg, sizeof msg, "%s: out of memory creating the kernel", BIN_NAMES[op]);
    return g_api->CreateStatus(ORT_FAIL, msg);
  }
  k->op = op;
  *out = &k->base;
  return NULL;
}

#define BIN_CREATE(NAME, OP)                                                                   \
  static OrtStatus* bin_create_##NAME(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) { \
    (void)state; (void)info;                                                                   \
    return bin_create(OP, out);                                                                \
  }
BIN_CREATE(add, BIN_ADD)
BIN_CREATE(sub, BIN_SUB)
BIN_CREATE(mul, BIN_MUL)
BIN_CREATE(div, BIN_DIV)
BIN_CREATE(neg, BIN_NEG)

OrtStatus* ort_cpu_ep_register_arithmetic(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  static const OrtKernelCreateFunc creates[4] = {bin_create_add, bin_create_sub, bin_create_mul, bin_create_div};
  static const int32_t types[3] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_INT64, ORT_TENSOR_ELEMENT_INT32};
  OrtStatus* st = NULL;
  int i;
  g_api = api;
  /* since 7: numpy-style broadcasting (opsets 1-6 have broadcast / axis attributes: the numpy kernel runs them);
   * 13 and 14 change only the types, not the semantics; Div stays float32 (integer division's rounding and
   * division by zero are the numpy kernel's) */
  for (i = 0; i < 4 && !st; ++i)
    st = cpu_kernels_add_onnx_types(api, registry, BIN_NAMES[i], 7, "T", types, i == BIN_DIV ? 1 : 3, creates[i],
                                    cpu_kernels_estimate_none);
  /* since 6: Neg-1's consumed_inputs attribute is gone */
  if (!st) st = cpu_kernels_add_onnx(api, registry, "Neg", 6, "T", ORT_TENSOR_ELEMENT_FLOAT, bin_create_neg, cpu_kernels_estimate_none);
  /* Sum of two float32 inputs is Add (since 8: multidirectional broadcasting, as Add's); the provider's rules send
   * only two-input Sums here (resnet50's and shufflenet's residual adds), others stay with the numpy kernel */
  if (!st) st = cpu_kernels_add_onnx(api, registry, "Sum", 8, "T", ORT_TENSOR_ELEMENT_FLOAT, bin_create_add, cpu_kernels_estimate_none);
  return st;
}
