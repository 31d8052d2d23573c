/* com.microsoft GroupQueryAttention (float32) as an ort-abi kernel, for the attribute set the
 * onnxruntime-genai builder exports: causal, local_window_size -1, softcap 0, no attention bias / head sink /
 * position_ids / qk output / quantized cache, with or without do_rotary (cos_cache/sin_cache, half-split or
 * interleaved). Nodes outside that set run on the numpy kernel (ort_cpu_ep._ckernels.c_kernel_applies); the
 * numpy kernel (ops_extra_attention.py) is the reference this one is tested against.
 *
 *   query (B, S, N*H) with key/value (B, S, Nkv*H), or packed (B, S, (N + 2 Nkv) * H); past_key/value
 *   (B, Nkv, P, H); seqlens_k (B,) int32 = total length - 1; total_sequence_length int32 scalar.
 *   present length T = max(total, P). First prompt (S == total): new rows land at row 0; otherwise entry b
 *   keeps past rows [0, seqlens_k[b] + 1 - S) and the new rows follow; rows past the new ones are zeros.
 *   Row s of entry b attends to keys [0, min(past_b + s + 1, seqlens_k[b] + 1)); head n reads kv head
 *   n / (N / Nkv).
 *
 * Workspace: slot 0 holds one buffer per thread (the rotated query row and one row of scores,
 * gqa_thread_floats(T, H) floats), for the threads in effect at declaration; Compute uses no more threads
 * than that. Without a planned slot (dynamic shapes) Compute takes scratch memory of the same size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "mnb.h" /* mnb_parallel, mnb_threads: the library's intra-op threads */

#define GQA_SLOT_THREADS 0
#define GQA_MIN_WORK_PER_THREAD (1 << 16) /* multiply-adds below which an extra thread does not pay */

static const OrtKernelApi* g_api = NULL;

typedef struct GqaKernel {
  OrtKernelImpl base; /* first: the host sees an OrtKernelImpl* */
  int64_t heads, kv_heads;
  float scale; /* 0: 1 / sqrt(head size) */
  int rotary, interleaved;
  size_t declared; /* bytes declared for slot 0 (0: none) */
} GqaKernel;

typedef struct GqaProblem {
  int64_t B, S, N, Nkv, H, P, T, group;
  int64_t q_stride, kv_stride;          /* floats between consecutive tokens of query, of key/value */
  const float *q, *k, *v;               /* token (0, 0), head 0 of each */
  const float *past_k, *past_v;         /* (B, Nkv, P, H) or NULL */
  float *present_k, *present_v, *out;   /* (B, Nkv, T, H), (B, S, N*H) */
  const int32_t* seqlens;
  int first_prompt;
  const float *cos, *sin;               /* (max_pos, half) or NULL */
  int64_t half;
  int interleaved;
  float scale;
} GqaProblem;

static OrtStatus* gqa_error(const char* what, long long a, long long b, long long c) {
  char msg[512];
  snprintf(msg, sizeof msg, what, a, b, c);
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

static int64_t gqa_thread_floats(int64_t T, int64_t H) { return ((H + T) + 15) / 16 * 16; }

static int64_t gqa_past_rows(const GqaProblem* p, int64_t b) {
  return p->first_prompt ? 0 : (int64_t)p->seqlens[b] + 1 - p->S;
}

/* dst = rotate(src) at position pos (dst may not overlap src) */
static void gqa_rotate(const GqaProblem* p, const float* src, float* dst, int64_t pos) {
  const float* c = p->cos + pos * p->half;
  const float* s = p->sin + pos * p->half;
  int64_t i, h = p->half;
  if (p->interleaved) {
    for (i = 0; i < h; ++i) {
      float x1 = src[2 * i], x2 = src[2 * i + 1];
      dst[2 * i] = x1 * c[i] - x2 * s[i];
      dst[2 * i + 1] = x2 * c[i] + x1 * s[i];
    }
  } else {
    for (i = 0; i < h; ++i) {
      float x1 = src[i], x2 = src[i + h];
      dst[i] = x1 * c[i] - x2 * s[i];
      dst[i + h] = x2 * c[i] + x1 * s[i];
    }
  }
  if (2 * h < p->H) memcpy(dst + 2 * h, src + 2 * h, (size_t)(p->H - 2 * h) * sizeof(float));
}

/* present rows of entry b, kv head g: past rows, the new (rotated) rows, zeros after */
static void gqa_fill_present(const GqaProblem* p, int64_t b, int64_t g) {
  int64_t H = p->H, past = gqa_past_rows(p, b), s, end = past + p->S < p->T ? past + p->S : p->T;
  size_t head = (size_t)((b * p->Nkv + g) * p->T * H);
  float *pk = p->present_k + head, *pv = p->present_v + head;
  if (past > 0) {
    size_t src = (size_t)((b * p->Nkv + g) * p->P * H);
    memcpy(pk, p->past_k + src, (size_t)(past * H) * sizeof(float));
    memcpy(pv, p->past_v + src, (size_t)(past * H) * sizeof(float));
  }
  for (s = 0; past + s < end; ++s) {
    const float* k = p->k + (b * p->S + s) * p->kv_stride + g * H;
    const float* v = p->v + (b * p->S + s) * p->kv_stride + g * H;
    if (p->cos != NULL) gqa_rotate(p, k, pk + (past + s) * H, past + s);
    else memcpy(pk + (past + s) * H, k, (size_t)H * sizeof(float));
    memcpy(pv + (past + s) * H, v, (size_t)H * sizeof(float));
  }
  if (end < p->T) {
    memset(pk + end * H, 0, (size_t)((p->T - end) * H) * sizeof(float));
    memset(pv + end * H, 0, (size_t)((p->T - end) * H) * sizeof(float));
  }
}

static inline __attribute__((always_inline)) float gqa_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0, j;
  for (; i + 8 <= n; i += 8)
    for (j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#pragma GCC diagnostic ignored "-Wpsabi" /* gqa_v8 values never cross a call: the helpers inline */

/* 8 floats in GCC's vector extension (clang has it too): one AVX register, two SSE ones in the default
 * clone; loads and stores through memcpy, so no alignment is assumed */
typedef float gqa_v8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) gqa_v8 gqa_load(const float* p) {
  gqa_v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

#define GQA_SUM8(v) ((((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))

/* scores[j] = scale * q . keys[j] for j < rows; returns their maximum. Head sizes that are multiples of 8
 * take 4 key rows at a time in vectors; one clone per x86-64 level, dispatched once per output row. */
CPU_KERNELS_CLONES
static float gqa_scores(const float* q, const float* keys, int64_t rows, int64_t H, float scale, float* scores) {
  float m = -INFINITY;
  int64_t j = 0, i;
  if (H % 8 == 0) {
    for (; j + 4 <= rows; j += 4) {
      const float *k0 = keys + j * H, *k1 = k0 + H, *k2 = k1 + H, *k3 = k2 + H;
      gqa_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
      for (i = 0; i < H; i += 8) {
        gqa_v8 x = gqa_load(q + i);
        a0 += x * gqa_load(k0 + i);
        a1 += x * gqa_load(k1 + i);
        a2 += x * gqa_load(k2 + i);
        a3 += x * gqa_load(k3 + i);
      }
      scores[j] = GQA_SUM8(a0) * scale;
      scores[j + 1] = GQA_SUM8(a1) * scale;
      scores[j + 2] = GQA_SUM8(a2) * scale;
      scores[j + 3] = GQA_SUM8(a3) * scale;
    }
  }
  for (; j < rows; ++j) scores[j] = gqa_dot(q, keys + j * H, H) * scale;
  for (j = 0; j < rows; ++j)
    if (scores[j] > m) m = scores[j];
  return m;
}

/* out = sum_j weights[j] * values[j]; 32 features at a time held in four vectors across the rows */
CPU_KERNELS_CLONES
static void gqa_combine(const float* weights, const float* values, int64_t rows, int64_t H, float* out) {
  int64_t c = 0, j;
  for (; c + 32 <= H; c += 32) {
    gqa_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (j = 0; j < rows; ++j) {
      const float* v = values + j * H + c;
      const gqa_v8 w = {weights[j], weights[j], weights[j], weights[j], weights[j], weights[j], weights[j], weights[j]};
      a0 += w * gqa_load(v);
      a1 += w * gqa_load(v + 8);
      a2 += w * gqa_load(v + 16);
      a3 += w * gqa_load(v + 24);
    }
    memcpy(out + c, &a0, sizeof a0);
    memcpy(out + c + 8, &a1, sizeof a1);
    memcpy(out + c + 16, &a2, sizeof a2);
    memcpy(out + c + 24, &a3, sizeof a3);
  }
  for (; c + 8 <= H; c += 8) {
    gqa_v8 a0 = {0};
    for (j = 0; j < rows; ++j) {
      const gqa_v8 w = {weights[j], weights[j], weights[j], weights[j], weights[j], weights[j], weights[j], weights[j]};
      a0 += w * gqa_load(values + j * H + c);
    }
    memcpy(out + c, &a0, sizeof a0);
  }
  for (; c < H; ++c) {
    float acc = 0.0f;
    for (j = 0; j < rows; ++j) acc += weights[j] * values[j * H + c];
    out[c] = acc;
  }
}

/* one output row: entry b, head n, query position s */
static void gqa_row(const GqaProblem* p, int64_t item, float* buffer) {
  int64_t s = item % p->S, n = (item / p->S) % p->N, b = item / (p->S * p->N);
  int64_t H = p->H, g = n / p->group, past = gqa_past_rows(p, b), j;
  int64_t total_b = (int64_t)p->seqlens[b] + 1, eff = past + s + 1 < total_b ? past + s + 1 : total_b;
  const float* q = p->q + (b * p->S + s) * p->q_stride + n * H;
  const float* keys = p->present_k + (b * p->Nkv + g) * p->T * H;
  const float* values = p->present_v + (b * p->Nkv + g) * p->T * H;
  float* out = p->out + (b * p->S + s) * p->N * H + n * H;
  float *qr = buffer, *scores = buffer + H, m, den = 0.0f, inv;
  if (eff <= 0) { /* every key masked: zeros, as the numpy kernel gives */
    memset(out, 0, (size_t)H * sizeof(float));
    return;
  }
  if (p->cos != NULL) gqa_rotate(p, q, qr, past + s);
  else memcpy(qr, q, (size_t)H * sizeof(float));
  m = gqa_scores(qr, keys, eff, H, p->scale, scores);
  for (j = 0; j < eff; ++j) {
    scores[j] = expf(scores[j] - m);
    den += scores[j];
  }
  inv = 1.0f / den;
  for (j = 0; j < eff; ++j) scores[j] *= inv;
  gqa_combine(scores, values, eff, H, out);
}

typedef struct GqaJob {
  const GqaProblem* p;
  char* buffers;
  size_t buffer_bytes;
  int64_t items;
  int64_t next; /* the first item no thread has taken yet (atomic) */
} GqaJob;

static void gqa_job(void* arg, int index, int count) {
  GqaJob* job = (GqaJob*)arg;
  float* buffer = (float*)(job->buffers + (size_t)index * job->buffer_bytes);
  int64_t chunk = job->items / ((int64_t)count * 8), i;
  if (chunk < 1) chunk = 1;
  for (;;) {
    int64_t i0 = __atomic_fetch_add(&job->next, chunk, __ATOMIC_RELAXED), i1 = i0 + chunk;
    if (i0 >= job->items) break;
    if (i1 > job->items) i1 = job->items;
    for (i = i0; i < i1; ++i) gqa_row(job->p, i, buffer);
  }
}

/* ---- inputs ---- */

/* input `index` (NULL when the node leaves it out). Its element type is not asked: the host checks every input
 * against the registered type constraints (T<k>) before each Compute, as onnxruntime does for a kernel
 * definition; each host call costs a crossing of the ABI, so a kernel makes as few as it can. */
static OrtStatus* gqa_input(OrtKernelContext* ctx, size_t count, size_t index, const float** data,
                            const int64_t** dims, size_t* rank) {
  const OrtValue* v = NULL;
  *data = NULL;
  *rank = 0;
  if (index >= count) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == NULL) return NULL;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetShape(v, dims, rank));
  return g_api->Value_GetTensorData(v, (const void**)data);
}

static OrtStatus* gqa_workspace(OrtKernelContext* ctx, GqaKernel* k, size_t bytes, void** out) {
  *out = NULL;
  if (k->declared >= bytes) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetPreallocatedWorkspace(ctx, GQA_SLOT_THREADS, bytes, out));
  if (*out == NULL) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetScratchBuffer(ctx, bytes, out));
  return NULL;
}

static OrtStatus* gqa_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  GqaKernel* k = (GqaKernel*)this_ptr;
  GqaProblem p;
  GqaJob job;
  const float *query, *key, *value, *past_k, *past_v, *cos, *sin, *seq_f, *total_f;
  const int64_t *qd = NULL, *kd = NULL, *vd = NULL, *pkd = NULL, *pvd = NULL, *cd = NULL, *sd = NULL, *sqd = NULL, *td = NULL;
  size_t qr, kr, vr, pkr, pvr, cr, sr, sqr, tr, threads_bytes;
  int64_t total, b, g, out_dims[3], present_dims[4], work, max_pos = 0;
  OrtValue *out_v = NULL, *pk_v = NULL, *pv_v = NULL;
  void* buffers = NULL;
  int threads;
  size_t n_inputs = 0;

  memset(&p, 0, sizeof p);
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetInputCount(ctx, &n_inputs));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 0, &query, &qd, &qr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 1, &key, &kd, &kr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 2, &value, &vd, &vr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 3, &past_k, &pkd, &pkr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 4, &past_v, &pvd, &pvr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 5, &seq_f, &sqd, &sqr));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 6, &total_f, &td, &tr));
  if (query == NULL || qr != 3) return gqa_error("GroupQueryAttention: query has rank %lld; expected rank 3 (batch, sequence, hidden)%.0lld%.0lld", (long long)qr, 0, 0);
  if ((key == NULL) != (value == NULL)) return gqa_error("GroupQueryAttention: key and value must both be present or both absent (key %lld, value %lld)%.0lld", key != NULL, value != NULL, 0);
  if (seq_f == NULL || total_f == NULL || tr > 1 || (tr == 1 && td[0] != 1))
    return gqa_error("GroupQueryAttention: seqlens_k and a one-element total_sequence_length are required (rank %lld)%.0lld%.0lld", (long long)tr, 0, 0);
  p.B = qd[0]; p.S = qd[1]; p.N = k->heads; p.Nkv = k->kv_heads; p.group = p.N / p.Nkv;
  p.H = key == NULL ? qd[2] / (p.N + 2 * p.Nkv) : qd[2] / p.N;
  if (p.H <= 0 || qd[2] != (key == NULL ? (p.N + 2 * p.Nkv) : p.N) * p.H)
    return gqa_error("GroupQueryAttention: query hidden size %lld does not split into num_heads=%lld (plus 2 x kv_num_heads=%lld when packed)",
                     qd[2], p.N, p.Nkv);
  {
    int64_t count = 1;
    size_t d;
    for (d = 0; d < sqr; ++d) count *= sqd[d];
    if (count != p.B)
      return gqa_error("GroupQueryAttention: seqlens_k has %lld elements (rank %lld); expected one per batch entry (%lld)",
                       count, (long long)sqr, p.B);
  }
  if (key != NULL) {
    if (kr != 3 || vr != 3 || kd[0] != p.B || kd[1] != p.S || kd[2] != p.Nkv * p.H || vd[0] != p.B || vd[1] != p.S || vd[2] != kd[2])
      return gqa_error("GroupQueryAttention: key/value must be (batch=%lld, sequence=%lld, kv_num_heads * head_size=%lld)", p.B, p.S, p.Nkv * p.H);
    p.q = query; p.k = key; p.v = value;
    p.q_stride = p.N * p.H; p.kv_stride = p.Nkv * p.H;
  } else {
    p.q = query; p.k = query + p.N * p.H; p.v = query + (p.N + p.Nkv) * p.H;
    p.q_stride = p.kv_stride = (p.N + 2 * p.Nkv) * p.H;
  }
  if ((past_k == NULL) != (past_v == NULL)) return gqa_error("GroupQueryAttention: past_key and past_value must both be present or both absent (%lld, %lld)%.0lld", past_k != NULL, past_v != NULL, 0);
  if (past_k != NULL) {
    if (pkr != 4 || pvr != 4 || pkd[0] != p.B || pkd[1] != p.Nkv || pkd[3] != p.H || memcmp(pkd, pvd, 4 * sizeof(int64_t)))
      return gqa_error("GroupQueryAttention: past_key/past_value must both be (batch=%lld, kv_num_heads=%lld, past, head_size=%lld)", p.B, p.Nkv, p.H);
    p.P = pkd[2];
  }
  total = (int64_t)((const int32_t*)total_f)[0];
  p.seqlens = (const int32_t*)seq_f;
  p.T = total > p.P ? total : p.P;
  p.first_prompt = p.S == total;
  if (!p.first_prompt && p.S != 1 && p.B != 1)
    return gqa_error("GroupQueryAttention: sequence_length %lld with total_sequence_length %lld is a subsequent prompt, which needs "
                     "batch_size 1 (got %lld); feed the prompt in one step or one batch entry at a time", p.S, total, p.B);
  for (b = 0; b < p.B; ++b) {
    int64_t past = gqa_past_rows(&p, b);
    if (past < 0 || past > p.P || (int64_t)p.seqlens[b] + 1 > p.T)
      return gqa_error("GroupQueryAttention: seqlens_k[%lld] = %lld does not fit past length %lld; seqlens_k must be past + new - 1",
                       (long long)b, (long long)p.seqlens[b], p.P);
  }
  if (k->rotary) {
    ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 7, &cos, &cd, &cr));
    ORT_KERNEL_RETURN_IF_ERROR(gqa_input(ctx, n_inputs, 8, &sin, &sd, &sr));
    if (cos == NULL || sin == NULL || cr != 2 || sr != 2 || cd[0] != sd[0] || cd[1] != sd[1] || 2 * cd[1] > p.H || cd[1] < 1)
      return gqa_error("GroupQueryAttention: do_rotary=1 needs cos_cache and sin_cache of one shape (max_positions, rotary_dim / 2) "
                       "with rotary_dim <= head_size=%lld (cos rank %lld, sin rank %lld)", p.H, (long long)cr, (long long)sr);
    p.cos = cos; p.sin = sin; p.half = cd[1]; p.interleaved = k->interleaved; max_pos = cd[0];
    for (b = 0; b < p.B; ++b)
      if (gqa_past_rows(&p, b) + p.S > max_pos)
        return gqa_error("GroupQueryAttention: position %lld is beyond cos_cache's %lld rows (batch entry %lld); export longer caches",
                         gqa_past_rows(&p, b) + p.S - 1, max_pos, (long long)b);
  }
  p.scale = k->scale != 0.0f ? k->scale : 1.0f / sqrtf((float)p.H);
  p.past_k = past_k; p.past_v = past_v;

  out_dims[0] = p.B; out_dims[1] = p.S; out_dims[2] = p.N * p.H;
  present_dims[0] = p.B; present_dims[1] = p.Nkv; present_dims[2] = p.T; present_dims[3] = p.H;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 0, out_dims, 3, &out_v));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(out_v, (void**)&p.out));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 1, present_dims, 4, &pk_v));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(pk_v, (void**)&p.present_k));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelContext_GetOutput(ctx, 2, present_dims, 4, &pv_v));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->Value_GetTensorMutableData(pv_v, (void**)&p.present_v));
  for (b = 0; b < p.B; ++b)
    for (g = 0; g < p.Nkv; ++g) gqa_fill_present(&p, b, g);
  job.items = p.B * p.N * p.S;
  if (job.items == 0) return NULL;
  job.buffer_bytes = (size_t)gqa_thread_floats(p.T, p.H) * sizeof(float);
  work = job.items * p.T * p.H;
  threads = mnb_threads();
  if ((int64_t)threads > job.items) threads = (int)job.items;
  if ((int64_t)threads > work / GQA_MIN_WORK_PER_THREAD) threads = (int)(work / GQA_MIN_WORK_PER_THREAD);
  if (threads < 1) threads = 1;
  if (k->declared >= job.buffer_bytes && (size_t)threads * job.buffer_bytes > k->declared)
    threads = (int)(k->declared / job.buffer_bytes); /* the declared buffers bound the threads */
  threads_bytes = (size_t)threads * job.buffer_bytes;
  ORT_KERNEL_RETURN_IF_ERROR(gqa_workspace(ctx, k, threads_bytes, &buffers));
  job.p = &p;
  job.buffers = (char*)buffers;
  job.next = 0;
  mnb_parallel(threads, gqa_job, &job);
  return NULL;
}

/* ---- Level 1 and Level 2: one size rule ---- */

static size_t gqa_slot_bytes(int64_t S, int64_t P, int64_t H) {
  return (size_t)mnb_threads() * (size_t)gqa_thread_floats(P + S, H) * sizeof(float);
}

/* head size from the query width and the head counts (packed when key is absent) */
static int64_t gqa_head_size(int64_t width, int64_t N, int64_t Nkv, int packed) {
  int64_t d = packed ? N + 2 * Nkv : N;
  return d > 0 ? width / d : 0;
}

static OrtStatus* gqa_node_int(const OrtEpApi* api, const OrtNode* node, const char* name, int64_t dflt, int64_t* out) {
  int has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasAttribute(node, name, &has));
  *out = dflt;
  return has ? api->Node_GetAttributeInt(node, name, out) : NULL;
}

static OrtStatus* gqa_estimate(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out) {
  const int64_t *qd = NULL, *pd = NULL;
  size_t qr = 0, pr = 0;
  int64_t N, Nkv, P = 0;
  int has_key = 0, has_past = 0;
  (void)ep;
  ORT_KERNEL_RETURN_IF_ERROR(gqa_node_int(api, node, "num_heads", 0, &N));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_node_int(api, node, "kv_num_heads", 0, &Nkv));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 0, &qd, &qr));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasInput(node, 1, &has_key));
  ORT_KERNEL_RETURN_IF_ERROR(api->Node_HasInput(node, 3, &has_past));
  if (has_past) ORT_KERNEL_RETURN_IF_ERROR(api->Node_GetInputShape(node, 3, &pd, &pr));
  if (qd == NULL || qr != 3 || qd[1] < 0 || qd[2] < 0 || (has_past && (pd == NULL || pr != 4 || pd[2] < 0)))
    return api->CreateStatus(ORT_NOT_IMPLEMENTED, "GroupQueryAttention estimate: needs the static query and past shapes");
  if (has_past) P = pd[2];
  *out = gqa_slot_bytes(qd[1], P, gqa_head_size(qd[2], N, Nkv, !has_key));
  return NULL;
}

static OrtStatus* gqa_declare(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                              OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots) {
  GqaKernel* k = (GqaKernel*)this_ptr;
  const OrtWorkspaceInputShape *q = num_inputs > 0 ? &shapes[0] : NULL, *past = num_inputs > 3 ? &shapes[3] : NULL;
  int packed = num_inputs < 2 || shapes[1].state == ORT_WORKSPACE_INPUT_MISSING;
  int64_t P = 0;
  *num_slots = 0;
  k->declared = 0;
  if (max_slots < 1) return gqa_error("GroupQueryAttention declaration: %lld slots offered, 1 needed%.0lld%.0lld", (long long)max_slots, 0, 0);
  if (q == NULL || q->state != ORT_WORKSPACE_INPUT_SHAPED || q->rank != 3 || q->dims[1] < 0 || q->dims[2] < 0) return NULL;
  if (past != NULL && past->state != ORT_WORKSPACE_INPUT_MISSING) {
    if (past->state != ORT_WORKSPACE_INPUT_SHAPED || past->rank != 4 || past->dims[2] < 0) return NULL; /* scratch at Compute */
    P = past->dims[2];
  }
  slots[0].slot_id = GQA_SLOT_THREADS;
  slots[0].size_bytes = k->declared = gqa_slot_bytes(q->dims[1], P, gqa_head_size(q->dims[2], k->heads, k->kv_heads, packed));
  *num_slots = 1;
  return NULL;
}

static OrtStatus* gqa_info_int(const OrtKernelInfo* info, const char* name, int64_t dflt, int64_t* out) {
  int has = 0;
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, name, &has));
  *out = dflt;
  return has ? g_api->KernelInfo_GetAttributeInt(info, name, out) : NULL;
}

static OrtStatus* gqa_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  int64_t heads, kv_heads, rotary, interleaved, window, causal;
  float scale = 0.0f, softcap = 0.0f;
  int has = 0;
  GqaKernel* k;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "num_heads", 0, &heads));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "kv_num_heads", 0, &kv_heads));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "do_rotary", 0, &rotary));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "rotary_interleaved", 0, &interleaved));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "local_window_size", -1, &window));
  ORT_KERNEL_RETURN_IF_ERROR(gqa_info_int(info, "causal", 1, &causal));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "scale", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "scale", &scale));
  ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_HasAttribute(info, "softcap", &has));
  if (has) ORT_KERNEL_RETURN_IF_ERROR(g_api->KernelInfo_GetAttributeFloat(info, "softcap", &softcap));
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
    return gqa_error("GroupQueryAttention: num_heads=%lld, kv_num_heads=%lld; num_heads must be a positive multiple of kv_num_heads%.0lld",
                     heads, kv_heads, 0);
  if (window != -1 || causal != 1 || softcap != 0.0f)
    return gqa_error("GroupQueryAttention: the C kernel takes local_window_size=-1, causal=1, softcap=0 (got %lld, %lld, softcap*1000=%lld); "
                     "other values run on the numpy kernel", window, causal, (long long)(softcap * 1000));
  k = (GqaKernel*)cpu_kernels_new(sizeof *k, gqa_compute, gqa_declare);
  if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "GroupQueryAttention: out of memory creating the kernel");
  k->heads = heads;
  k->kv_heads = kv_heads;
  k->scale = scale;
  k->rotary = rotary != 0;
  k->interleaved = interleaved != 0;
  *out = &k->base;
  return NULL;
}

OrtStatus* ort_cpu_ep_register_gqa(const OrtKernelApi* api, OrtKernelRegistry* registry) {
  /* input k bound by T<k>: query, key, value, past_key, past_value float32; seqlens_k, total int32; caches float32 */
  static const int32_t types[9] = {ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT,
                                   ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_INT32,
                                   ORT_TENSOR_ELEMENT_INT32, ORT_TENSOR_ELEMENT_FLOAT, ORT_TENSOR_ELEMENT_FLOAT};
  g_api = api;
  return cpu_kernels_add(api, registry, "GroupQueryAttention", "com.microsoft", 1, types, 9, gqa_create, gqa_estimate);
}
