// Packed (padding-free) attention for com.microsoft PackedAttention / PackedMultiHeadAttention.
// Tokens of every sequence are packed back to back: token i's padded position is p = token_offset[i]
// (b = p / S, s = p % S), its sequence's keys are the packed tokens cum[b] .. cum[b] + len - 1 with
// len = cum[b + 1] - cum[b] (the packing order the ops define), and it attends to all of them (no
// padding is ever read). Token i, head h: Q row at Q + i*q_row + h*q_head (Dqk values, + q_bias[h*Dqk]),
// K row of token t at K + t*k_row + h*k_head (+ k_bias), V likewise with Dv values (+ v_bias, added to
// the normalized output: the softmax weights sum to 1); attention_bias (optional) adds
// ab[b*ab_b + h*ab_h + s*S + j] to the score of key j. Output O[i, h*Dv + d].
// Malformed offsets cannot read out of bounds: p outside [0, B*S) writes zeros, len is clamped to
// [0, min(S, token_count - cum[b])] and cum[b] to [0, token_count].
// Grid token_count * H blocks (head fastest), 128 threads, one online softmax over chunks of 128 keys
// (flash_chunk of common.cuh); no workspace.
#include "common.cuh"

#define PA_THREADS 128
#define PA_MAX_D 256

template <typename T>
__device__ __forceinline__ void packed_impl(
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, const T* __restrict__ q_bias,
    const T* __restrict__ k_bias, const T* __restrict__ v_bias, const int* __restrict__ token_offset,
    const int* __restrict__ cum, const T* __restrict__ ab, T* __restrict__ O, int token_count, int B, int S, int H,
    int Dqk, int Dv, long long q_row, long long k_row, long long v_row, int q_head, int k_head, int v_head,
    long long ab_b, long long ab_h, float scale) {
  __shared__ float qs[PA_MAX_D];
  __shared__ float kb[PA_MAX_D];
  __shared__ float p[PA_THREADS];
  __shared__ float scratch[32];
  const long long blk = blockIdx.x;
  const int h = (int)(blk % H);
  const long long i = blk / H;
  T* o_row = O + i * ((long long)H * Dv) + (long long)h * Dv;
  const long long pos = token_offset[i];
  if (pos < 0 || pos >= (long long)B * S) {
    for (int d = threadIdx.x; d < Dv; d += PA_THREADS) o_row[d] = from_f<T>(0.f);
    return;
  }
  const int b = (int)(pos / S), s = (int)(pos % S);
  long long begin = cum[b];
  begin = begin < 0 ? 0 : (begin > token_count ? token_count : begin);
  long long len = (long long)cum[b + 1] - cum[b];
  if (len > S) len = S;
  if (len > token_count - begin) len = token_count - begin;
  if (len < 0) len = 0;

  const T* q = Q + i * q_row + (long long)h * q_head;
  for (int d = threadIdx.x; d < Dqk; d += PA_THREADS) {
    float v = to_f(q[d]);
    if (q_bias) v += to_f(q_bias[h * Dqk + d]);
    qs[d] = v * scale;
    kb[d] = k_bias ? to_f(k_bias[h * Dqk + d]) : 0.f;
  }
  __syncthreads();
  const T* kbase = K + begin * k_row + (long long)h * k_head;
  const T* vbase = V + begin * v_row + (long long)h * v_head;
  const T* abrow = ab ? ab + b * ab_b + h * ab_h + (long long)s * S : nullptr;

  float m = -ORT_INF, l = 0.f, acc0 = 0.f, acc1 = 0.f;
  for (long long kc = 0; kc < len; kc += PA_THREADS) {
    const long long j = kc + threadIdx.x;
    float score = -ORT_INF;
    if (j < len) {
      const T* kr = kbase + j * k_row;
      float sc = 0.f;
      for (int d = 0; d < Dqk; ++d) sc = fmaf(qs[d], to_f(kr[d]) + kb[d], sc);
      if (abrow) sc += to_f(abrow[j]);
      score = sc;
    }
    flash_chunk(score, kc, len, PA_THREADS, vbase, v_row, Dv, p, scratch, m, l, acc0, acc1);
  }
  const float inv = (l > 0.f) ? 1.f / l : 0.f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + PA_THREADS;
  const bool any = l > 0.f;
  if (d0 < Dv) o_row[d0] = from_f<T>(acc0 * inv + ((v_bias && any) ? to_f(v_bias[h * Dv + d0]) : 0.f));
  if (d1 < Dv) o_row[d1] = from_f<T>(acc1 * inv + ((v_bias && any) ? to_f(v_bias[h * Dv + d1]) : 0.f));
}

extern "C" __global__ void __launch_bounds__(PA_THREADS) packed_attn_f32(
    const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V, const float* __restrict__ q_bias,
    const float* __restrict__ k_bias, const float* __restrict__ v_bias, const int* __restrict__ token_offset,
    const int* __restrict__ cum, const float* __restrict__ ab, float* __restrict__ O, int token_count, int B, int S, int H,
    int Dqk, int Dv, long long q_row, long long k_row, long long v_row, int q_head, int k_head, int v_head,
    long long ab_b, long long ab_h, float scale) {
  packed_impl(Q, K, V, q_bias, k_bias, v_bias, token_offset, cum, ab, O, token_count, B, S, H, Dqk, Dv, q_row, k_row,
              v_row, q_head, k_head, v_head, ab_b, ab_h, scale);
}

extern "C" __global__ void __launch_bounds__(PA_THREADS) packed_attn_f16(
    const f16_t* __restrict__ Q, const f16_t* __restrict__ K, const f16_t* __restrict__ V, const f16_t* __restrict__ q_bias,
    const f16_t* __restrict__ k_bias, const f16_t* __restrict__ v_bias, const int* __restrict__ token_offset,
    const int* __restrict__ cum, const f16_t* __restrict__ ab, f16_t* __restrict__ O, int token_count, int B, int S, int H,
    int Dqk, int Dv, long long q_row, long long k_row, long long v_row, int q_head, int k_head, int v_head,
    long long ab_b, long long ab_h, float scale) {
  packed_impl(Q, K, V, q_bias, k_bias, v_bias, token_offset, cum, ab, O, token_count, B, S, H, Dqk, Dv, q_row, k_row,
              v_row, q_head, k_head, v_head, ab_b, ab_h, scale);
}

extern "C" __global__ void __launch_bounds__(PA_THREADS) packed_attn_bf16(
    const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V, const bf16_t* __restrict__ q_bias,
    const bf16_t* __restrict__ k_bias, const bf16_t* __restrict__ v_bias, const int* __restrict__ token_offset,
    const int* __restrict__ cum, const bf16_t* __restrict__ ab, bf16_t* __restrict__ O, int token_count, int B, int S, int H,
    int Dqk, int Dv, long long q_row, long long k_row, long long v_row, int q_head, int k_head, int v_head,
    long long ab_b, long long ab_h, float scale) {
  packed_impl(Q, K, V, q_bias, k_bias, v_bias, token_offset, cum, ab, O, token_count, B, S, H, Dqk, Dv, q_row, k_row,
              v_row, q_head, k_head, v_head, ab_b, ab_h, scale);
}
