// Multi-head attention with split-K over the keys (flash-decoding).
// Q: [B, Sq, H, D], K/V: [B, L, H, D], O: [B, Sq, H, D] (BSNH, contiguous; D <= 256), float32 or
// float16 storage; all math, the LSEs and the split partial outputs are float32.
// attn_split_f32: 1-D grid of B * H * Sq * num_splits blocks (split fastest), 128 threads; each
// block owns one query row and
// one split of keys [s*keys_per_split, (s+1)*keys_per_split), runs an online softmax over it in
// chunks of 128 keys and writes either the final output (num_splits == 1) or a normalized
// partial output o_accum[s, b, h, q, 0:Dr] with its log-sum-exp lse_accum[s, b, h, q].
// attn_combine_f32: grid (B * H * Sq), 128 threads; merges the splits with their LSEs.
// softmax_lse[b, h, q] always receives the row's final log-sum-exp.
// causal_offset < 0: no mask; else query qi sees keys j <= qi + causal_offset (ONNX Runtime's
// unidirectional rule with the past length as offset; 0 without a past input).
#include "common.cuh"

#define ATT_THREADS 128
#define ATT_MAX_D 256

template <typename T>
__device__ __forceinline__ void split_impl(
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
    T* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum,
    float* __restrict__ o_accum, int B, int H, int Sq, int L, int D, int Dr, float scale, int causal_offset,
    int num_splits, int keys_per_split) {
  __shared__ float qs[ATT_MAX_D];
  __shared__ float p[ATT_THREADS];
  __shared__ float scratch[32];
  const long long blk = blockIdx.x;
  const int split = (int)(blk % num_splits);
  const long long qrow = blk / num_splits;  // (b * H + h) * Sq + qi
  const int qi = (int)(qrow % Sq);
  const int bh = (int)(qrow / Sq);
  const int b = bh / H, h = bh % H;
  const long long row_stride = (long long)H * D;
  const T* q = Q + ((long long)b * Sq + qi) * row_stride + (long long)h * D;
  const T* kbase = K + (long long)b * L * row_stride + (long long)h * D;
  const T* vbase = V + (long long)b * L * row_stride + (long long)h * D;
  for (int d = threadIdx.x; d < D; d += ATT_THREADS) qs[d] = to_f(q[d]) * scale;
  __syncthreads();

  long long k_begin = (long long)split * keys_per_split;
  long long k_end = min((long long)L, k_begin + keys_per_split);
  if (causal_offset >= 0) k_end = min(k_end, (long long)qi + causal_offset + 1);  // key j visible iff j <= qi + offset

  float m = -ORT_INF, l = 0.f;
  float acc0 = 0.f, acc1 = 0.f;  // output dims threadIdx.x and threadIdx.x + 128
  for (long long kc = k_begin; kc < k_end; kc += ATT_THREADS) {
    const long long j = kc + threadIdx.x;
    float score = -ORT_INF;
    if (j < k_end) {
      const T* kr = kbase + j * row_stride;
      float s = 0.f;
      if (sizeof(T) == 4 && (D & 3) == 0 && (((unsigned long long)kr) & 15) == 0) {  // 16-byte loads of a float row
        const float4* kr4 = reinterpret_cast<const float4*>(kr);
        for (int d4 = 0; d4 < (D >> 2); ++d4) {
          const float4 kv = kr4[d4];
          s = fmaf(qs[4 * d4], kv.x, s);
          s = fmaf(qs[4 * d4 + 1], kv.y, s);
          s = fmaf(qs[4 * d4 + 2], kv.z, s);
          s = fmaf(qs[4 * d4 + 3], kv.w, s);
        }
      } else {
        for (int d = 0; d < D; ++d) s = fmaf(qs[d], to_f(kr[d]), s);
      }
      score = s;
    }
    flash_chunk(score, kc, k_end, ATT_THREADS, vbase, row_stride, D, p, scratch, m, l, acc0, acc1);
  }
  flash_finish(m, l, acc0, acc1, ATT_THREADS, O + ((long long)b * Sq + qi) * row_stride + (long long)h * D, D, Dr,
               num_splits, split, (long long)B * H * Sq, qrow, softmax_lse, lse_accum, o_accum);
}

template <typename T>
__device__ __forceinline__ void combine_impl(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, T* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int Sq, int D, int Dr, int num_splits) {
  flash_combine(lse_accum, o_accum, O, softmax_lse, B, H, Sq, D, Dr, num_splits, ATT_THREADS);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_split_f32(
    const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
    float* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum,
    float* __restrict__ o_accum, int B, int H, int Sq, int L, int D, int Dr, float scale, int causal_offset,
    int num_splits, int keys_per_split) {
  split_impl(Q, K, V, O, softmax_lse, lse_accum, o_accum, B, H, Sq, L, D, Dr, scale, causal_offset, num_splits,
             keys_per_split);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_split_f16(
    const f16_t* __restrict__ Q, const f16_t* __restrict__ K, const f16_t* __restrict__ V,
    f16_t* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum,
    float* __restrict__ o_accum, int B, int H, int Sq, int L, int D, int Dr, float scale, int causal_offset,
    int num_splits, int keys_per_split) {
  split_impl(Q, K, V, O, softmax_lse, lse_accum, o_accum, B, H, Sq, L, D, Dr, scale, causal_offset, num_splits,
             keys_per_split);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_combine_f32(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, float* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int Sq, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, Sq, D, Dr, num_splits);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_combine_f16(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, f16_t* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int Sq, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, Sq, D, Dr, num_splits);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_split_bf16(
    const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
    bf16_t* __restrict__ O, float* __restrict__ softmax_lse, float* __restrict__ lse_accum,
    float* __restrict__ o_accum, int B, int H, int Sq, int L, int D, int Dr, float scale, int causal_offset,
    int num_splits, int keys_per_split) {
  split_impl(Q, K, V, O, softmax_lse, lse_accum, o_accum, B, H, Sq, L, D, Dr, scale, causal_offset, num_splits,
             keys_per_split);
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS) attn_combine_bf16(
    const float* __restrict__ lse_accum, const float* __restrict__ o_accum, bf16_t* __restrict__ O,
    float* __restrict__ softmax_lse, int B, int H, int Sq, int D, int Dr, int num_splits) {
  combine_impl(lse_accum, o_accum, O, softmax_lse, B, H, Sq, D, Dr, num_splits);
}
