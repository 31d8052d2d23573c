// com.microsoft GroupQueryAttention: rotary embedding, KV-cache append and causal attention with
// grouped KV heads (query head h reads KV head h / (H / Hkv)). float32 or float16 storage; all math,
// the split LSEs and the split partial outputs are float32.
//
// Layouts (contiguous): query rows [B, S, row] with `row` = H*D (separate q/k/v) or (H + 2*Hkv)*D
// (packed: q heads, then k heads, then v heads); new key/value rows [B, S, krow] read at element
// offsets k_off / v_off inside each row; past and present KV [B, Hkv, P or T, D] (BNSH); output
// [B, S, H*D]; cos/sin caches [cos_rows, R/2] (R = rotary dims, R <= D).
//
// Per batch entry b (the rule of ONNX Runtime's GroupQueryAttention without query_seqlens):
//   Tb = seqlens_k[b] + 1 tokens after this step, clamped into [0, T] (T = present length)
//   Qb = min(S, Tb) new tokens (query rows [Qb, S) are padding: their output is unspecified)
//   Pb = Tb - Qb tokens cached before this step
// present[b, :, t] = past[b, :, t] for t < Pb (zero where t >= P), the rotated new key / new value
// row t - Pb for Pb <= t < Tb, and zero for t >= Tb. Query row s sits at position Pb + s and sees
// keys j < min(Pb + s + 1, Tb). Rotary positions are clamped to cos_rows - 1 (the host checks
// cos_rows >= total_sequence_length, as ONNX Runtime does; the clamp only keeps reads in bounds).
//
// Rotary (rotary_half = R/2 > 0): non-interleaved pairs (i, i + R/2), interleaved pairs (2i, 2i + 1):
//   out_first = x_first * cos[pos, i] - x_second * sin[pos, i]
//   out_second = x_second * cos[pos, i] + x_first * sin[pos, i];  dims >= R are copied.
//
// gqa_present_<T>: 1-D grid-stride loop over B*Hkv*T*D elements (256 threads); writes present_k and
//   present_v.
// gqa_attn_<T>: 1-D grid of B*H*S*num_splits blocks (split fastest), 128 threads. Each block owns one
//   query row (b, h, s) and keys [split*keys_per_split, (split+1)*keys_per_split) of its visible
//   range; it loads the query row, rotates and scales it in shared memory, runs an online softmax in
//   chunks of 128 keys over present_k / present_v, and writes the output row with its log-sum-exp
//   softmax_lse[row] (num_splits == 1) or a normalized partial o_accum[split, row, 0:Dr] (zero past D)
//   with its log-sum-exp lse_accum[split, row] (row = (b*H + h)*S + s; a split without keys writes
//   zeros and -inf). The workspace is the flash-decoding layout of attention.cu (_attention_recipe).
// gqa_combine_<T>: grid B*H*S, 128 threads; merges the splits with their LSEs into the output and
//   softmax_lse (num_splits <= 128).
#include "common.cuh"

#define GQA_THREADS 128
#define GQA_MAX_D 256

template <typename T>
__device__ __forceinline__ float rotated(const T* x, int d, int rotary_half, int interleaved, const T* cos_row,
                                         const T* sin_row) {
  const float xd = to_f(x[d]);
  if (rotary_half <= 0 || d >= 2 * rotary_half) return xd;
  if (interleaved) {
    const int i = d >> 1;
    const float c = to_f(cos_row[i]), s = to_f(sin_row[i]);
    return (d & 1) ? xd * c + to_f(x[d - 1]) * s : xd * c - to_f(x[d + 1]) * s;
  }
  if (d < rotary_half) {
    const float c = to_f(cos_row[d]), s = to_f(sin_row[d]);
    return xd * c - to_f(x[d + rotary_half]) * s;
  }
  const int i = d - rotary_half;
  const float c = to_f(cos_row[i]), s = to_f(sin_row[i]);
  return xd * c + to_f(x[i]) * s;
}

// Tokens after this step for batch entry b, clamped into [0, T].
__device__ __forceinline__ int total_len(const int* seqlens_k, int b, int T) {
  const long long t = (long long)seqlens_k[b] + 1;
  return (int)(t < 0 ? 0 : (t > T ? T : t));
}

template <typename T>
__device__ __forceinline__ void present_impl(
    const T* __restrict__ new_k, const T* __restrict__ new_v, long long new_row, long long k_off, long long v_off,
    const T* __restrict__ past_k, const T* __restrict__ past_v, const int* __restrict__ seqlens_k,
    const T* __restrict__ cos_cache, const T* __restrict__ sin_cache, T* __restrict__ present_k,
    T* __restrict__ present_v, int B, int Hkv, int S, int P, int T_, int D, int rotary_half, int interleaved,
    int cos_rows) {
  const long long n = (long long)B * Hkv * T_ * D;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (long long)gridDim.x * blockDim.x) {
    const int d = (int)(idx % D);
    const long long r = idx / D;  // (b * Hkv + hk) * T + t
    const int t = (int)(r % T_);
    const long long bh = r / T_;
    const int hk = (int)(bh % Hkv), b = (int)(bh / Hkv);
    const int Tb = total_len(seqlens_k, b, T_);
    const int Qb = Tb < S ? Tb : S;
    const int Pb = Tb - Qb;
    float kv = 0.f, vv = 0.f;
    if (t < Pb) {
      if (t < P) {
        const long long at = (bh * P + t) * D + d;
        kv = to_f(past_k[at]);
        vv = to_f(past_v[at]);
      }
    } else if (t < Tb) {
      const long long row = ((long long)b * S + (t - Pb)) * new_row;
      const T* kr = new_k + row + k_off + (long long)hk * D;
      const int pos = t < cos_rows ? t : cos_rows - 1;
      const long long c0 = (long long)(pos < 0 ? 0 : pos) * rotary_half;
      kv = rotated(kr, d, rotary_half, interleaved, cos_cache + c0, sin_cache + c0);
      vv = to_f(new_v[row + v_off + (long long)hk * D + d]);
    }
    present_k[idx] = from_f<T>(kv);
    present_v[idx] = from_f<T>(vv);
  }
}

template <typename T>
__device__ __forceinline__ void attn_impl(
    const T* __restrict__ Q, long long q_row, const T* __restrict__ Kc, const T* __restrict__ Vc,
    const int* __restrict__ seqlens_k, const T* __restrict__ cos_cache, const T* __restrict__ sin_cache,
    T* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum, float* __restrict__ o_accum,
    int B, int H, int Hkv, int S, int T_, int D, int Dr, float scale, int rotary_half, int interleaved, int cos_rows,
    int num_splits, int keys_per_split) {
  __shared__ float qs[GQA_MAX_D];
  __shared__ float p[GQA_THREADS];
  __shared__ float scratch[32];
  const long long blk = blockIdx.x;
  const int split = (int)(blk % num_splits);
  const long long row = blk / num_splits;  // (b * H + h) * S + s
  const int s = (int)(row % S);
  const long long bh = row / S;
  const int h = (int)(bh % H), b = (int)(bh / H);
  const int hk = h / (H / Hkv);
  const int Tb = total_len(seqlens_k, b, T_);
  const int Qb = Tb < S ? Tb : S;
  const int Pb = Tb - Qb;

  const T* q = Q + ((long long)b * S + s) * q_row + (long long)h * D;
  int pos = Pb + s;
  pos = pos < cos_rows ? pos : cos_rows - 1;
  const long long c0 = (long long)(pos < 0 ? 0 : pos) * rotary_half;
  for (int d = threadIdx.x; d < D; d += GQA_THREADS)
    qs[d] = rotated(q, d, rotary_half, interleaved, cos_cache + c0, sin_cache + c0) * scale;
  __syncthreads();

  long long visible = (long long)Pb + s + 1;  // key j is visible iff j <= Pb + s and j < Tb
  if (visible > Tb) visible = Tb;
  const long long k_begin = (long long)split * keys_per_split;
  long long k_end = k_begin + keys_per_split;
  if (k_end > visible) k_end = visible;
  const T* kbase = Kc + ((long long)b * Hkv + hk) * T_ * D;
  const T* vbase = Vc + ((long long)b * Hkv + hk) * T_ * D;

  float m = -ORT_INF, l = 0.f;
  float acc0 = 0.f, acc1 = 0.f;  // output dims threadIdx.x and threadIdx.x + 128
  for (long long kc = k_begin; kc < k_end; kc += GQA_THREADS) {
    const long long j = kc + threadIdx.x;
    float score = -ORT_INF;
    if (j < k_end) {
      const T* kr = kbase + j * D;
      float acc = 0.f;
      for (int d = 0; d < D; ++d) acc = fmaf(qs[d], to_f(kr[d]), acc);
      score = acc;
    }
    flash_chunk(score, kc, k_end, GQA_THREADS, vbase, (long long)D, D, p, scratch, m, l, acc0, acc1);
  }
  flash_finish(m, l, acc0, acc1, GQA_THREADS, O + ((long long)b * S + s) * H * D + (long long)h * D, D, Dr,
               num_splits, split, (long long)B * H * S, row, softmax_lse, lse_accum, o_accum);
}

template <typename T>
__device__ __forceinline__ void combine_impl(const float* __restrict__ lse_accum, const float* __restrict__ o_accum,
                                             T* __restrict__ O, float* __restrict__ softmax_lse, int B, int H, int S,
                                             int D, int Dr, int num_splits) {
  flash_combine(lse_accum, o_accum, O, softmax_lse, B, H, S, D, Dr, num_splits, GQA_THREADS);
}

extern "C" __global__ void gqa_present_f32(
    const float* __restrict__ new_k, const float* __restrict__ new_v, long long new_row, long long k_off,
    long long v_off, const float* __restrict__ past_k, const float* __restrict__ past_v,
    const int* __restrict__ seqlens_k, const float* __restrict__ cos_cache, const float* __restrict__ sin_cache,
    float* __restrict__ present_k, float* __restrict__ present_v, int B, int Hkv, int S, int P, int T_, int D,
    int rotary_half, int interleaved, int cos_rows) {
  present_impl(new_k, new_v, new_row, k_off, v_off, past_k, past_v, seqlens_k, cos_cache, sin_cache, present_k,
               present_v, B, Hkv, S, P, T_, D, rotary_half, interleaved, cos_rows);
}

extern "C" __global__ void gqa_present_f16(
    const f16_t* __restrict__ new_k, const f16_t* __restrict__ new_v, long long new_row, long long k_off,
    long long v_off, const f16_t* __restrict__ past_k, const f16_t* __restrict__ past_v,
    const int* __restrict__ seqlens_k, const f16_t* __restrict__ cos_cache, const f16_t* __restrict__ sin_cache,
    f16_t* __restrict__ present_k, f16_t* __restrict__ present_v, int B, int Hkv, int S, int P, int T_, int D,
    int rotary_half, int interleaved, int cos_rows) {
  present_impl(new_k, new_v, new_row, k_off, v_off, past_k, past_v, seqlens_k, cos_cache, sin_cache, present_k,
               present_v, B, Hkv, S, P, T_, D, rotary_half, interleaved, cos_rows);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_attn_f32(
    const float* __restrict__ Q, long long q_row, const float* __restrict__ Kc, const float* __restrict__ Vc,
    const int* __restrict__ seqlens_k, const float* __restrict__ cos_cache, const float* __restrict__ sin_cache,
    float* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum, float* __restrict__ o_accum,
    int B, int H, int Hkv, int S, int T_, int D, int Dr, float scale, int rotary_half, int interleaved, int cos_rows,
    int num_splits, int keys_per_split) {
  attn_impl(Q, q_row, Kc, Vc, seqlens_k, cos_cache, sin_cache, O, softmax_lse, lse_accum, o_accum, B, H, Hkv, S, T_, D,
            Dr, scale, rotary_half, interleaved, cos_rows, num_splits, keys_per_split);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_attn_f16(
    const f16_t* __restrict__ Q, long long q_row, const f16_t* __restrict__ Kc, const f16_t* __restrict__ Vc,
    const int* __restrict__ seqlens_k, const f16_t* __restrict__ cos_cache, const f16_t* __restrict__ sin_cache,
    f16_t* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum, float* __restrict__ o_accum,
    int B, int H, int Hkv, int S, int T_, int D, int Dr, float scale, int rotary_half, int interleaved, int cos_rows,
    int num_splits, int keys_per_split) {
  attn_impl(Q, q_row, Kc, Vc, seqlens_k, cos_cache, sin_cache, O, softmax_lse, lse_accum, o_accum, B, H, Hkv, S, T_, D,
            Dr, scale, rotary_half, interleaved, cos_rows, num_splits, keys_per_split);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_combine_f32(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, float* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int S, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, S, D, Dr, num_splits);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_combine_f16(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, f16_t* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int S, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, S, D, Dr, num_splits);
}

extern "C" __global__ void gqa_present_bf16(
    const bf16_t* __restrict__ new_k, const bf16_t* __restrict__ new_v, long long new_row, long long k_off,
    long long v_off, const bf16_t* __restrict__ past_k, const bf16_t* __restrict__ past_v,
    const int* __restrict__ seqlens_k, const bf16_t* __restrict__ cos_cache, const bf16_t* __restrict__ sin_cache,
    bf16_t* __restrict__ present_k, bf16_t* __restrict__ present_v, int B, int Hkv, int S, int P, int T_, int D,
    int rotary_half, int interleaved, int cos_rows) {
  present_impl(new_k, new_v, new_row, k_off, v_off, past_k, past_v, seqlens_k, cos_cache, sin_cache, present_k,
               present_v, B, Hkv, S, P, T_, D, rotary_half, interleaved, cos_rows);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_attn_bf16(
    const bf16_t* __restrict__ Q, long long q_row, const bf16_t* __restrict__ Kc, const bf16_t* __restrict__ Vc,
    const int* __restrict__ seqlens_k, const bf16_t* __restrict__ cos_cache, const bf16_t* __restrict__ sin_cache,
    bf16_t* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum, float* __restrict__ o_accum,
    int B, int H, int Hkv, int S, int T_, int D, int Dr, float scale, int rotary_half, int interleaved, int cos_rows,
    int num_splits, int keys_per_split) {
  attn_impl(Q, q_row, Kc, Vc, seqlens_k, cos_cache, sin_cache, O, softmax_lse, lse_accum, o_accum, B, H, Hkv, S, T_, D,
            Dr, scale, rotary_half, interleaved, cos_rows, num_splits, keys_per_split);
}

extern "C" __global__ void __launch_bounds__(GQA_THREADS) gqa_combine_bf16(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, bf16_t* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int S, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, S, D, Dr, num_splits);
}
