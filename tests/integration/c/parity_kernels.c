/*
 * parity_kernels.c -- the C column of the ABI parity matrix (tests/integration/test_abi_parity.py).
 *
 * Three ops, each implementing ort-cuda-ep's workspace recipe exactly (one recipe, three languages):
 *   com.microsoft::MultiHeadAttention  flash-decoding split-KV workspace (one slot, 256-byte aligned
 *                                      regions: softmax LSE | split LSE | split outputs)
 *   com.microsoft::MatMulNBits         4-bit weights; no workspace on either path (the CUDA tiled
 *                                      path dequantizes B per tile in shared memory), but the same
 *                                      validation: a malformed or overflowing node is unavailable
 *   Softmax (13+)                      last axis, no workspace (the CUDA kernel reduces in registers)
 * Level 1 and Level 2 both call the same recipe functions below. A recipe is "unavailable" unless
 * every present input has a static shape whose extents fit a 32-bit index, exactly as the CUDA EP.
 *
 * Build: cc -std=c99 -O1 -shared -fPIC -I$(python -c 'import ort_abi; print(ort_abi.get_include())') \
 *           parity_kernels.c -o libparity_kernels.so -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_kernel_abi.h"

ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()

#define PARITY_EP "CPUExecutionProvider"
#define SLOT_ID 0
#define MAX_DIM 2147483647LL
#define MAX_BYTES 9223372036854775807ULL
#define ALIGNMENT 256ULL
#define MAX_SPLITS 128
#define MAX_INPUTS 16

static const OrtKernelApi* g_api = NULL;

static OrtStatus* errorf(OrtErrorCode code, const char* fmt, long long a) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a);
  return g_api->CreateStatus(code, msg);
}

/* ---- checked arithmetic (ort_cuda_ep._checked): -1 on overflow ---- */
static int mul2(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > MAX_BYTES / a) return -1;
  *out = a * b;
  return 0;
}

static int add2(uint64_t a, uint64_t b, uint64_t* out) {
  if (a > MAX_BYTES || b > MAX_BYTES - a) return -1;
  *out = a + b;
  return 0;
}

static int align_up(uint64_t v, uint64_t* out) { return add2(v, (ALIGNMENT - v % ALIGNMENT) % ALIGNMENT, out); }

/* ---- input shapes as both levels see them ---- */
typedef struct Shapes {
  size_t count;
  int present[MAX_INPUTS];
  size_t rank[MAX_INPUTS];
  int64_t dims[MAX_INPUTS][8];
} Shapes;

/* 0 when every present input is static with extents in [0, MAX_DIM] and rank <= 8, else -1 */
static int check_static(const Shapes* s) {
  size_t i, d;
  for (i = 0; i < s->count; ++i) {
    if (!s->present[i]) continue;
    if (s->rank[i] > 8) return -1;
    for (d = 0; d < s->rank[i]; ++d)
      if (s->dims[i][d] < 0 || s->dims[i][d] > MAX_DIM) return -1;
  }
  return 0;
}

/* Level 1: read the node; -1 when an input is present without a static shape */
static int shapes_from_node(const OrtEpApi* api, const OrtNode* node, Shapes* s) {
  size_t n, i;
  memset(s, 0, sizeof *s);
  if (api->Node_GetInputCount(node, &n) != NULL || n > MAX_INPUTS) return -1;
  s->count = n;
  for (i = 0; i < n; ++i) {
    int present = 0;
    const int64_t* dims = NULL;
    size_t rank = 0;
    OrtStatus* st = api->Node_HasInput(node, i, &present);
    if (st != NULL) {
      api->ReleaseStatus(st);
      return -1;
    }
    s->present[i] = present;
    if (!present) continue;
    st = api->Node_GetInputShape(node, i, &dims, &rank);
    if (st != NULL) {
      api->ReleaseStatus(st);
      return -1;
    }
    if (dims == NULL || rank > 8) return -1; /* not static (or rank-0 reported without dims) */
    s->rank[i] = rank;
    memcpy(s->dims[i], dims, rank * sizeof(int64_t));
  }
  return check_static(s);
}

/* Level 2: the declaration's shapes; -1 when a present input is not static */
static int shapes_from_decl(const OrtWorkspaceInputShape* in, size_t n, Shapes* s) {
  size_t i;
  memset(s, 0, sizeof *s);
  if (n > MAX_INPUTS) return -1;
  s->count = n;
  for (i = 0; i < n; ++i) {
    if (in[i].state == ORT_WORKSPACE_INPUT_MISSING) continue;
    s->present[i] = 1;
    if (in[i].state != ORT_WORKSPACE_INPUT_SHAPED || in[i].rank > 8) return -1;
    s->rank[i] = in[i].rank;
    if (in[i].rank) memcpy(s->dims[i], in[i].dims, in[i].rank * sizeof(int64_t));
  }
  return check_static(s);
}

/* ================================ attention recipe ================================ */
static int64_t block_n_for(int64_t head_size) { return head_size <= 64 ? 256 : (head_size <= 128 ? 128 : 64); }

/* onnxruntime flash num_splits_heuristic, float32 efficiency, as ort_cuda_ep computes it */
static int64_t num_splits(int64_t b, int64_t sq, int64_t skv, int64_t h, int64_t d, int64_t sms) {
  int64_t n_blocks = (skv + block_n_for(d) - 1) / block_n_for(d);
  int64_t m_blocks = (sq + 63) / 64;
  int64_t bnm = b * h * m_blocks;
  int64_t cap = sms < MAX_SPLITS ? sms : MAX_SPLITS, s;
  float eff[MAX_SPLITS + 1];
  int eligible[MAX_SPLITS + 1];
  float best = 0.0f;
  if ((float)bnm >= 0.8f * (float)sms) return 1;
  for (s = 1; s <= cap; ++s) {
    float waves = (float)(bnm * s) / (float)sms;
    eff[s] = waves / ceilf(waves);
    eligible[s] = s <= n_blocks && (s == 1 || (n_blocks + s - 1) / s != (n_blocks + s - 2) / (s - 1));
    if (eligible[s] && eff[s] > best) best = eff[s];
  }
  for (s = 1; s <= cap; ++s)
    if (eligible[s] && (double)eff[s] >= 0.85 * (double)best) return s;
  return 1;
}

typedef struct AttnRecipe {
  int64_t splits, head_size_rounded, keys_per_split;
  uint64_t lse_accum_offset, out_accum_offset, total;
} AttnRecipe;

static int attention_recipe(int64_t b, int64_t sq, int64_t skv, int64_t h, int64_t d, int64_t sms, AttnRecipe* r) {
  uint64_t rows, tmp, lse, lse_acc, out_acc, off1, off2;
  int64_t n_blocks, bps;
  if (b < 0 || sq < 0 || skv < 0 || h < 0 || d <= 0 || sms <= 0) return -1;
  if (b > MAX_DIM || sq > MAX_DIM || skv > MAX_DIM || h > MAX_DIM || d > MAX_DIM || sms > MAX_DIM) return -1;
  memset(r, 0, sizeof *r);
  r->splits = 1;
  r->head_size_rounded = (d + 31) / 32 * 32;
  if (mul2((uint64_t)b, (uint64_t)h, &tmp) || mul2(tmp, (uint64_t)sq, &rows) || rows > (uint64_t)MAX_DIM) return -1;
  if (mul2((uint64_t)b * (uint64_t)h, (uint64_t)((sq + 63) / 64), &tmp)) return -1;
  n_blocks = (skv + block_n_for(d) - 1) / block_n_for(d);
  r->keys_per_split = skv > 1 ? skv : 1;
  if (rows == 0) return 0;
  r->splits = num_splits(b, sq, skv, h, d, sms);
  if (mul2(4, rows, &lse)) return -1;
  if (r->splits > 1) {
    if (mul2(4 * (uint64_t)r->splits, rows, &lse_acc) || mul2(lse_acc, (uint64_t)r->head_size_rounded, &out_acc))
      return -1;
    if (align_up(lse, &off1) || add2(off1, lse_acc, &tmp) || align_up(tmp, &off2) || add2(off2, out_acc, &r->total))
      return -1;
    r->lse_accum_offset = off1;
    r->out_accum_offset = off2;
    bps = n_blocks ? (n_blocks + r->splits - 1) / r->splits : 0;
    r->keys_per_split = bps * block_n_for(d);
  } else {
    r->total = lse;
  }
  return 0;
}

/* q [B, S, hidden], k [B, L, hidden], heads from the attribute */
static int attention_bytes(const Shapes* s, int64_t heads, int64_t sms, AttnRecipe* r) {
  const int64_t *q = s->dims[0], *k = s->dims[1];
  if (check_static(s) || s->count < 2 || !s->present[0] || !s->present[1]) return -1;
  if (s->rank[0] != 3 || s->rank[1] != 3 || q[0] != k[0]) return -1;
  if (heads <= 0 || heads > MAX_DIM || q[2] % heads) return -1;
  return attention_recipe(q[0], q[1], k[1], heads, q[2] / heads, sms, r);
}

/* ================================ MatMulNBits recipe ================================ */
typedef struct NBitsAttrs {
  int64_t n, k, bits, block_size;
} NBitsAttrs;

/* 0 and *bytes set (always 0: neither path needs workspace), or -1 when malformed or overflowing */
static int nbits_recipe(const Shapes* s, const NBitsAttrs* a, uint64_t* m_out, uint64_t* bytes) {
  uint64_t m = 1, tmp;
  size_t i;
  if (check_static(s) || s->count < 1 || !s->present[0] || s->rank[0] < 1) return -1;
  if (s->dims[0][s->rank[0] - 1] != a->k) return -1;
  for (i = 0; i + 1 < s->rank[0]; ++i)
    if (mul2(m, (uint64_t)s->dims[0][i], &m)) return -1;
  if (m > (uint64_t)MAX_DIM) return -1;
  if (a->n < 0 || a->n > MAX_DIM || a->k < 0 || a->k > MAX_DIM || a->bits != 4) return -1;
  if (a->block_size < 16 || a->block_size > MAX_DIM || (a->block_size & (a->block_size - 1))) return -1;
  if (mul2(4 * m, (uint64_t)a->n, &tmp) || mul2(4 * m, (uint64_t)a->k, &tmp)) return -1;
  *m_out = m;
  *bytes = 0;
  return 0;
}

/* ================================ kernels ================================ */
typedef enum { OP_ATTENTION, OP_NBITS, OP_SOFTMAX } OpKind;

typedef struct ParityKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  OpKind op;
  int64_t sms, heads;
  float scale;
  NBitsAttrs nb;
} ParityKernel;

static void parity_release(OrtKernelImpl* k) { free(k); }

static OrtStatus* float_input(OrtKernelContext* ctx, size_t i, const float** data, const int64_t** dims, size_t* rank) {
  const OrtValue* v = NULL;
  int32_t type = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, i, &v));
  if (v == NULL) {
    *data = NULL;
    return NULL;
  }
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetElementType(v, &type));
  if (type != ORT_TENSOR_ELEMENT_FLOAT && type != ORT_TENSOR_ELEMENT_UINT8)
    return errorf(ORT_INVALID_ARGUMENT, "input %lld must be float32 or uint8", (long long)i);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorData(v, (const void**)data));
  return g_api->Value_GetShape(v, dims, rank);
}

static OrtStatus* workspace(OrtKernelContext* ctx, uint64_t bytes, void** out) {
  *out = NULL;
  if (bytes == 0) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, SLOT_ID, (size_t)bytes, out));
  if (*out == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, (size_t)bytes, out));
  return NULL;
}

static OrtStatus* shapes_from_ctx(OrtKernelContext* ctx, Shapes* s) {
  size_t n, i;
  memset(s, 0, sizeof *s);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n));
  if (n > MAX_INPUTS) return errorf(ORT_INVALID_ARGUMENT, "too many inputs: %lld", (long long)n);
  s->count = n;
  for (i = 0; i < n; ++i) {
    const OrtValue* v = NULL;
    const int64_t* dims;
    size_t rank;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, i, &v));
    if (v == NULL) continue;
    ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, &dims, &rank));
    if (rank > 8) return errorf(ORT_INVALID_ARGUMENT, "input rank %lld > 8", (long long)rank);
    s->present[i] = 1;
    s->rank[i] = rank;
    if (rank) memcpy(s->dims[i], dims, rank * sizeof(int64_t));
  }
  return NULL;
}

static OrtStatus* attention_compute(ParityKernel* k, OrtKernelContext* ctx) {
  Shapes s;
  AttnRecipe r;
  const float *q, *kk, *v;
  const int64_t* dims;
  size_t rank;
  OrtValue* y;
  float *out, *lse, *lse_acc = NULL, *o_acc = NULL, scale;
  void* ws;
  int64_t B, S, L, H = k->heads, D, hid, b, h, i, j, d, sp;
  ORT_KERNEL_RETURN_IF_ERROR(shapes_from_ctx(ctx, &s));
  if (attention_bytes(&s, H, k->sms, &r) != 0)
    return errorf(ORT_INVALID_ARGUMENT, "MultiHeadAttention: shapes out of range (query rank %lld)", (long long)s.rank[0]);
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 0, &q, &dims, &rank));
  B = dims[0], S = dims[1], hid = dims[2], D = hid / H;
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 1, &kk, &dims, &rank));
  L = dims[1];
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 2, &v, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, s.dims[0], 3, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  if (B * S * hid == 0) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(workspace(ctx, r.total, &ws));
  lse = (float*)ws;
  if (r.splits > 1) {
    lse_acc = (float*)((char*)ws + r.lse_accum_offset);
    o_acc = (float*)((char*)ws + r.out_accum_offset);
  }
  scale = k->scale != 0.0f ? k->scale : 1.0f / sqrtf((float)D);
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < S; ++i) {
        int64_t row = (b * H + h) * S + i, rows = B * H * S;
        const float* qi = q + (b * S + i) * hid + h * D;
        float* oi = out + (b * S + i) * hid + h * D;
        float total_lse = -INFINITY;
        for (sp = 0; sp < r.splits; ++sp) {
          int64_t lo = sp * r.keys_per_split, hi = lo + r.keys_per_split < L ? lo + r.keys_per_split : L;
          float mx = -INFINITY, sum = 0.0f, part_lse;
          float* acc = r.splits > 1 ? o_acc + (sp * rows + row) * r.head_size_rounded : oi;
          for (d = 0; d < D; ++d) acc[d] = 0.0f;
          for (j = lo; j < hi; ++j) {
            float sc = 0.0f;
            for (d = 0; d < D; ++d) sc += qi[d] * kk[(b * L + j) * hid + h * D + d];
            sc *= scale;
            if (sc > mx) mx = sc;
          }
          for (j = lo; j < hi; ++j) {
            float sc = 0.0f, p;
            for (d = 0; d < D; ++d) sc += qi[d] * kk[(b * L + j) * hid + h * D + d];
            p = expf(sc * scale - mx);
            sum += p;
            for (d = 0; d < D; ++d) acc[d] += p * v[(b * L + j) * hid + h * D + d];
          }
          if (sum > 0.0f)
            for (d = 0; d < D; ++d) acc[d] /= sum;
          part_lse = sum > 0.0f ? mx + logf(sum) : -INFINITY;
          if (r.splits > 1) lse_acc[sp * rows + row] = part_lse;
          else total_lse = part_lse;
        }
        if (r.splits > 1) { /* combine the splits by their log-sum-exp */
          float mx = -INFINITY, sum = 0.0f;
          for (sp = 0; sp < r.splits; ++sp)
            if (lse_acc[sp * rows + row] > mx) mx = lse_acc[sp * rows + row];
          for (sp = 0; sp < r.splits; ++sp) sum += expf(lse_acc[sp * rows + row] - mx);
          total_lse = mx + logf(sum);
          for (d = 0; d < D; ++d) oi[d] = 0.0f;
          for (sp = 0; sp < r.splits; ++sp) {
            float w = expf(lse_acc[sp * rows + row] - total_lse);
            const float* acc = o_acc + (sp * rows + row) * r.head_size_rounded;
            for (d = 0; d < D; ++d) oi[d] += w * acc[d];
          }
        }
        lse[row] = total_lse;
      }
  return NULL;
}

static OrtStatus* nbits_compute(ParityKernel* k, OrtKernelContext* ctx) {
  Shapes s;
  uint64_t m, bytes;
  const float *a, *scales, *bias = NULL;
  const uint8_t *bq, *zp = NULL;
  const int64_t* dims;
  size_t rank, i;
  int64_t out_dims[8], N = k->nb.n, K = k->nb.k, bs = k->nb.block_size, kb = (K + bs - 1) / bs, row, n, kk;
  OrtValue* y;
  float* out;
  ORT_KERNEL_RETURN_IF_ERROR(shapes_from_ctx(ctx, &s));
  if (nbits_recipe(&s, &k->nb, &m, &bytes) != 0)
    return errorf(ORT_INVALID_ARGUMENT, "MatMulNBits: input A of rank %lld is out of range", (long long)s.rank[0]);
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 0, &a, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 1, (const float**)&bq, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 2, &scales, &dims, &rank));
  if (s.count > 3) ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 3, (const float**)&zp, &dims, &rank));
  if (s.count > 5) ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 5, &bias, &dims, &rank));
  for (i = 0; i + 1 < s.rank[0]; ++i) out_dims[i] = s.dims[0][i];
  out_dims[s.rank[0] - 1] = N;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, s.rank[0], &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  if (m == 0 || N == 0) return NULL;
  (void)bytes;
#define NB_W(nn, kx)                                                                                               \
  (((float)((bq[((nn) * kb + (kx) / bs) * (bs / 2) + ((kx) % bs) / 2] >> (4 * ((kx) % 2))) & 0xF) -               \
    (float)(zp ? (zp[(nn) * ((kb + 1) / 2) + ((kx) / bs) / 2] >> (4 * (((kx) / bs) % 2))) & 0xF : 8)) *            \
   scales[(nn) * kb + (kx) / bs])
  { /* both paths read the packed weights directly */
    for (row = 0; row < (int64_t)m; ++row)
      for (n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (kk = 0; kk < K; ++kk) acc += a[row * K + kk] * NB_W(n, kk);
        out[row * N + n] = acc + (bias ? bias[n] : 0.0f);
      }
  }
#undef NB_W
  return NULL;
}

static OrtStatus* softmax_compute(OrtKernelContext* ctx) {
  const float* x;
  const int64_t* dims;
  size_t rank, n, i;
  OrtValue* y;
  float* out;
  int64_t cols, rows, r, c;
  ORT_KERNEL_RETURN_IF_ERROR(float_input(ctx, 0, &x, &dims, &rank));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(y, (void**)&out));
  for (n = 1, i = 0; i < rank; ++i) n *= (size_t)dims[i];
  cols = rank ? dims[rank - 1] : 1;
  rows = cols ? (int64_t)n / cols : 0;
  for (r = 0; r < rows; ++r) {
    const float* xi = x + r * cols;
    float mx = xi[0], sum = 0.0f;
    for (c = 1; c < cols; ++c) mx = xi[c] > mx ? xi[c] : mx;
    for (c = 0; c < cols; ++c) sum += expf(xi[c] - mx);
    for (c = 0; c < cols; ++c) out[r * cols + c] = expf(xi[c] - mx) / sum;
  }
  return NULL;
}

static OrtStatus* parity_compute(OrtKernelImpl* self, OrtKernelContext* ctx) {
  ParityKernel* k = (ParityKernel*)self;
  if (k->op == OP_ATTENTION) return attention_compute(k, ctx);
  if (k->op == OP_NBITS) return nbits_compute(k, ctx);
  return softmax_compute(ctx);
}

/* Level 2: the same recipe as the estimate; unknown shapes declare nothing (scratch at run time) */
static OrtStatus* parity_declare(OrtKernelImpl* self, const OrtWorkspaceInputShape* in, size_t n,
                                 OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  ParityKernel* k = (ParityKernel*)self;
  Shapes s;
  uint64_t bytes = 0, m;
  AttnRecipe r;
  *num_slots = 0;
  if (max_slots < 1) return errorf(ORT_INVALID_ARGUMENT, "no room for a slot (max_slots %lld)", (long long)max_slots);
  if (k->op == OP_SOFTMAX || shapes_from_decl(in, n, &s) != 0) return NULL;
  if (k->op == OP_ATTENTION) {
    if (attention_bytes(&s, k->heads, k->sms, &r) != 0) return NULL;
    bytes = r.total;
  } else if (nbits_recipe(&s, &k->nb, &m, &bytes) != 0) {
    return NULL;
  }
  if (bytes == 0) return NULL;
  slots[0].slot_id = SLOT_ID;
  slots[0].size_bytes = (size_t)bytes;
  *num_slots = 1;
  return NULL;
}

/* ---- Level 1 ---- */
static OrtStatus* unavailable(const OrtEpApi* api, const char* why) { return api->CreateStatus(ORT_NOT_IMPLEMENTED, why); }

static OrtStatus* attention_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  Shapes s;
  AttnRecipe r;
  int64_t heads = 0, sms = 0;
  if (shapes_from_node(api, node, &s) != 0) return unavailable(api, "MultiHeadAttention: shapes not static");
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "num_heads", &heads));
  ORT_KERNEL_RETURN_IF_ERROR(api->Ep_GetDeviceProperty(ep, "multi_processor_count", &sms));
  if (attention_bytes(&s, heads, sms, &r) != 0) return unavailable(api, "MultiHeadAttention: recipe unavailable");
  *out = (size_t)r.total;
  return NULL;
}

static OrtStatus* nbits_attrs_node(const OrtEpApi* api, const OrtNode* node, NBitsAttrs* a) {
  int has = 0;
  a->bits = 4;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "N", &a->n));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "K", &a->k));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "block_size", &a->block_size));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, "bits", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetAttributeInt(node, "bits", &a->bits));
  return NULL;
}

static OrtStatus* nbits_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  Shapes s;
  NBitsAttrs a;
  uint64_t m, bytes;
  (void)ep;
  if (shapes_from_node(api, node, &s) != 0) return unavailable(api, "MatMulNBits: shapes not static");
  ORT_KERNEL_RETURN_IF_ERROR(nbits_attrs_node(api, node, &a));
  if (nbits_recipe(&s, &a, &m, &bytes) != 0) return unavailable(api, "MatMulNBits: recipe unavailable");
  *out = (size_t)bytes;
  return NULL;
}

static OrtStatus* softmax_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  (void)api;
  (void)node;
  (void)ep;
  *out = 0; /* the recipe "none": no workspace whatever the shapes */
  return NULL;
}

/* ---- create ---- */
static OrtStatus* new_kernel(OpKind op, ParityKernel** out) {
  ParityKernel* k = (ParityKernel*)calloc(1, sizeof *k);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "out of memory creating a kernel");
  k->base.ort_version_supported = ORT_KERNEL_ABI_VERSION;
  k->base.Compute = parity_compute;
  k->base.Release = parity_release;
  k->base.DeclareWorkspaceRequirements = parity_declare;
  k->op = op;
  *out = k;
  return NULL;
}

static OrtStatus* create_attention(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ParityKernel* k;
  const OrtEp* ep = NULL;
  int has = 0;
  OrtStatus* st;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(new_kernel(OP_ATTENTION, &k));
  st = g_api->KernelInfo_GetAttributeInt(info, "num_heads", &k->heads);
  if (!st) st = g_api->KernelInfo_HasAttribute(info, "scale", &has);
  if (!st && has) st = g_api->KernelInfo_GetAttributeFloat(info, "scale", &k->scale);
  if (!st) st = g_api->KernelInfo_GetEp(info, &ep);
  if (!st && ep == NULL) st = g_api->CreateStatus(ORT_INVALID_ARGUMENT, "MultiHeadAttention needs an EP with multi_processor_count");
  if (!st) st = g_api->Ep_GetDeviceProperty(ep, "multi_processor_count", &k->sms);
  if (st) {
    free(k);
    return st;
  }
  *out = &k->base;
  return NULL;
}

static OrtStatus* create_nbits(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ParityKernel* k;
  int has = 0;
  OrtStatus* st;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(new_kernel(OP_NBITS, &k));
  k->nb.bits = 4;
  st = g_api->KernelInfo_GetAttributeInt(info, "N", &k->nb.n);
  if (!st) st = g_api->KernelInfo_GetAttributeInt(info, "K", &k->nb.k);
  if (!st) st = g_api->KernelInfo_GetAttributeInt(info, "block_size", &k->nb.block_size);
  if (!st) st = g_api->KernelInfo_HasAttribute(info, "bits", &has);
  if (!st && has) st = g_api->KernelInfo_GetAttributeInt(info, "bits", &k->nb.bits);
  if (st) {
    free(k);
    return st;
  }
  *out = &k->base;
  return NULL;
}

static OrtStatus* create_softmax(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  ParityKernel* k;
  int has = 0;
  int64_t axis = -1;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "axis", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeInt(info, "axis", &axis));
  if (axis != -1) return errorf(ORT_INVALID_ARGUMENT, "Softmax axis %lld: only -1 (the last axis) is supported", (long long)axis);
  ORT_KERNEL_RETURN_IF_ERROR(new_kernel(OP_SOFTMAX, &k));
  *out = &k->base;
  return NULL;
}

static OrtStatus* add_one(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, const char* domain,
                          int since, OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate) {
  OrtKernelDefBuilder* b = NULL;
  OrtKernelDef* def = NULL;
  OrtStatus* st = api->CreateKernelDefBuilder(&b);
  if (st) return st;
  st = api->KernelDefBuilder_SetOperatorType(b, op);
  if (!st) st = api->KernelDefBuilder_SetDomain(b, domain);
  if (!st) st = api->KernelDefBuilder_SetSinceVersion(b, since, 0);
  if (!st) st = api->KernelDefBuilder_SetExecutionProvider(b, PARITY_EP);
  if (!st) st = api->KernelDefBuilder_Build(b, &def);
  api->ReleaseKernelDefBuilder(b);
  if (!st) st = api->KernelRegistry_AddKernelV2(registry, def, create, NULL, estimate);
  if (def) api->ReleaseKernelDef(def);
  return st;
}

ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  if (api->version < ORT_KERNEL_ABI_VERSION_WORKSPACE)
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "parity_kernels needs a host with ABI version >= 2");
  g_api = api;
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "MultiHeadAttention", "com.microsoft", 1, create_attention,
                                     attention_estimate));
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "MatMulNBits", "com.microsoft", 1, create_nbits, nbits_estimate));
  ORT_KERNEL_RETURN_IF_ERROR(add_one(api, registry, "Softmax", "", 13, create_softmax, softmax_estimate));
  return NULL;
}
