// Shared helpers for ort-cuda-ep kernels (included through NVRTC's include path).
#pragma once

#define ORT_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions; `scratch` holds one float per warp (32 floats is always enough).
// Every thread of the block must call them; all get the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = (threadIdx.x < nwarps) ? scratch[threadIdx.x] : 0.f;
  if (warp == 0) r = warp_sum(r);
  if (threadIdx.x == 0) scratch[0] = r;
  __syncthreads();
  return scratch[0];
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = (threadIdx.x < nwarps) ? scratch[threadIdx.x] : -ORT_INF;
  if (warp == 0) r = warp_max(r);
  if (threadIdx.x == 0) scratch[0] = r;
  __syncthreads();
  return scratch[0];
}

// Element offsets of linear index i over 6 row-major dims `d`, for two stride sets (0 on a broadcast
// dim, negative for a reversed one): the index math of broadcast and strided kernels.
__device__ __forceinline__ void offsets6(long long i, const long long* d, const long long* sa, const long long* sb,
                                         long long& ia, long long& ib) {
  long long rem = i;
  ia = 0;
  ib = 0;
#pragma unroll
  for (int k = 5; k >= 0; --k) {
    const long long c = rem % d[k];
    rem /= d[k];
    ia += c * sa[k];
    ib += c * sb[k];
  }
}

// float16 without cuda_fp16.h (NVRTC has no toolkit headers here): storage is the raw 16 bits,
// arithmetic is float32, conversions are single PTX instructions (round to nearest even).
typedef unsigned short f16_t;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(f16_t v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ f16_t from_f<f16_t>(float v) {
  f16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

// bfloat16: the upper 16 bits of a float32; a struct so that overloads tell it from float16's raw bits.
struct bf16_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_f(bf16_t v) { return __uint_as_float(((unsigned int)v.bits) << 16); }
template <> __device__ __forceinline__ bf16_t from_f<bf16_t>(float v) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));  // round to nearest even (sm_80+)
  return h;
}

// One chunk of keys [kc, kc + nthreads) of the online (flash) softmax, every thread of the block calling it:
// `score` is this thread's key score (-inf past k_end), V rows start at vbase + key * v_stride; updates the
// running max m, sum l and the output accumulators of dims threadIdx.x and threadIdx.x + nthreads.
// `p` holds nthreads floats of shared memory, `scratch` 32 (block reductions).
template <typename T>
__device__ __forceinline__ void flash_chunk(float score, long long kc, long long k_end, int nthreads, const T* vbase,
                                            long long v_stride, int D, float* p, float* scratch, float& m, float& l,
                                            float& acc0, float& acc1) {
  const long long j = kc + threadIdx.x;
  const float cmax = block_max(score, scratch);
  const float m_new = fmaxf(m, cmax);
  const float pj = (j < k_end) ? expf(score - m_new) : 0.f;
  p[threadIdx.x] = pj;
  const float psum = block_sum(pj, scratch);  // also orders the p[] stores before the reads below
  const float corr = (m == -ORT_INF) ? 0.f : expf(m - m_new);
  l = l * corr + psum;
  const long long left = k_end - kc;
  const int cnt = (int)(left < nthreads ? left : nthreads);
  const int d0 = threadIdx.x, d1 = threadIdx.x + nthreads;
  float s0 = 0.f, s1 = 0.f;
  for (int t = 0; t < cnt; ++t) {
    const T* vr = vbase + (kc + t) * v_stride;
    if (d0 < D) s0 = fmaf(p[t], to_f(vr[d0]), s0);
    if (d1 < D) s1 = fmaf(p[t], to_f(vr[d1]), s1);
  }
  acc0 = acc0 * corr + s0;
  acc1 = acc1 * corr + s1;
  m = m_new;
  __syncthreads();  // p[] is rewritten by the next chunk
}

// The end of one flash split of query row `row` (of `rows`): with one split, the normalized output row
// (o_row, D values) and its log-sum-exp; else the split's normalized partial output (float32, zero-padded to
// Dr) and LSE for flash_combine.
template <typename T>
__device__ __forceinline__ void flash_finish(float m, float l, float acc0, float acc1, int nthreads, T* o_row, int D,
                                             int Dr, int num_splits, int split, long long rows, long long row,
                                             float* softmax_lse, float* lse_accum, float* o_accum) {
  const float inv = (l > 0.f) ? 1.f / l : 0.f;
  const float lse = (l > 0.f) ? m + logf(l) : -ORT_INF;
  if (num_splits == 1) {
    if (threadIdx.x < D) o_row[threadIdx.x] = from_f<T>(acc0 * inv);
    if (threadIdx.x + nthreads < D) o_row[threadIdx.x + nthreads] = from_f<T>(acc1 * inv);
    if (threadIdx.x == 0) softmax_lse[row] = lse;
  } else {
    const long long srow = (long long)split * rows + row;
    float* o = o_accum + srow * Dr;
    if (threadIdx.x < Dr) o[threadIdx.x] = (threadIdx.x < D) ? acc0 * inv : 0.f;
    if (threadIdx.x + nthreads < Dr) o[threadIdx.x + nthreads] = (threadIdx.x + nthreads < D) ? acc1 * inv : 0.f;
    if (threadIdx.x == 0) lse_accum[srow] = lse;
  }
}

// Merge the splits of query row blockIdx.x ((b * H + h) * S + s) with their LSEs into O [B, S, H, D] and
// softmax_lse; nthreads threads, num_splits <= 128.
template <typename T>
__device__ __forceinline__ void flash_combine(const float* __restrict__ lse_accum, const float* __restrict__ o_accum,
                                              T* __restrict__ O, float* __restrict__ softmax_lse, int B, int H, int S,
                                              int D, int Dr, int num_splits, int nthreads) {
  __shared__ float w[128];
  __shared__ float scratch[32];
  const long long row = blockIdx.x;
  const long long rows = (long long)B * H * S;
  const float v = (threadIdx.x < num_splits) ? lse_accum[threadIdx.x * rows + row] : -ORT_INF;
  const float mx = block_max(v, scratch);
  const float e = (threadIdx.x < num_splits && mx != -ORT_INF) ? expf(v - mx) : 0.f;
  const float total = block_sum(e, scratch);
  if (threadIdx.x < 128) w[threadIdx.x] = (total > 0.f) ? e / total : 0.f;
  if (threadIdx.x == 0) softmax_lse[row] = (total > 0.f) ? mx + logf(total) : -ORT_INF;
  __syncthreads();
  const int s = (int)(row % S);
  const long long bh = row / S;
  const int h = (int)(bh % H), b = (int)(bh / H);
  T* o = O + ((long long)b * S + s) * H * D + (long long)h * D;
  for (int d = threadIdx.x; d < D; d += nthreads) {
    float acc = 0.f;
    for (int k = 0; k < num_splits; ++k) acc = fmaf(w[k], o_accum[(k * rows + row) * Dr + d], acc);
    o[d] = from_f<T>(acc);
  }
}
