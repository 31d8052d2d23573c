// com.microsoft MatMulNBits, 4- or 8-bit block-quantized weights; A, scales, bias and Y in float32, float16
// or bfloat16. B: uint8 [N, k_blocks, block_size*bits/8]. 4-bit: element k of row n in byte
// n*row_bytes + k/2 (low nibble = even k); zero_points (optional) uint8 [N, ceil(k_blocks/2)] packed the
// same way, default 8. 8-bit: one byte per element; zero_points uint8 [N, k_blocks], default 128.
// scales: [N, k_blocks]. Small M: mnb{4,8}_gemv_* reads the packed weights directly (one warp per output
// column). Larger M: mnb{4,8}_tiled_* computes one 64x64 output tile per block, dequantizing each 16-deep
// slice of B into shared memory (float) as it goes: no workspace, and B is never expanded in global memory.
#include "common.cuh"

#define GEMV_MAX_M 8
#define TM 64
#define TN 64
#define TK 16

template <int BITS, typename T>
__device__ __forceinline__ float dequant(const unsigned char* __restrict__ B, const T* __restrict__ scales,
                                         const unsigned char* __restrict__ zp, int n, int k, int block_size,
                                         int k_blocks, long long row_bytes) {
  const int kb = k / block_size;
  int q, z;
  if (BITS == 4) {
    const unsigned char byte = B[(long long)n * row_bytes + (k >> 1)];
    q = (k & 1) ? (byte >> 4) : (byte & 0xF);
    z = 8;
    if (zp) {
      const unsigned char zb = zp[(long long)n * ((k_blocks + 1) >> 1) + (kb >> 1)];
      z = (kb & 1) ? (zb >> 4) : (zb & 0xF);
    }
  } else {
    q = B[(long long)n * row_bytes + k];
    z = zp ? zp[(long long)n * k_blocks + kb] : 128;
  }
  return (float)(q - z) * to_f(scales[(long long)n * k_blocks + kb]);
}

template <int BITS, typename T>
__device__ __forceinline__ void gemv_impl(const T* __restrict__ A, const unsigned char* __restrict__ B,
                                          const T* __restrict__ scales, const unsigned char* __restrict__ zp,
                                          const T* __restrict__ bias, T* __restrict__ Y, int M, int N, int K,
                                          int block_size, int k_blocks) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = blockIdx.x * (blockDim.x >> 5) + warp;
  if (n >= N) return;  // the whole warp leaves together
  const long long row_bytes = (long long)k_blocks * (block_size * BITS / 8);
  float acc[GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; ++m) acc[m] = 0.f;
  for (int k = lane; k < K; k += 32) {
    const float w = dequant<BITS>(B, scales, zp, n, k, block_size, k_blocks, row_bytes);
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; ++m)
      if (m < M) acc[m] = fmaf(to_f(A[(long long)m * K + k]), w, acc[m]);
  }
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; ++m) {
    if (m >= M) break;
    float v = warp_sum(acc[m]);
    if (lane == 0) Y[(long long)m * N + n] = from_f<T>(v + (bias ? to_f(bias[n]) : 0.f));
  }
}

// One TM x TN tile of Y = A [M, K] x dequant(B) [K, N] (+ bias) per block, 256 threads, 4x4 outputs each;
// the K loop stages TM x TK of A and TK x TN dequantized weights in shared memory, float accumulation.
// blockIdx.x: column tile, blockIdx.y: row tile (the host cuts M into launches of <= 65535 row tiles).
template <int BITS, typename T>
__device__ __forceinline__ void tiled_impl(const T* __restrict__ A, const unsigned char* __restrict__ B,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zp,
                                           const T* __restrict__ bias, T* __restrict__ Y, int M, int N, int K,
                                           int block_size, int k_blocks) {
  __shared__ float As[TK][TM + 4];
  __shared__ float Ws[TK][TN + 4];
  const long long row_bytes = (long long)k_blocks * (block_size * BITS / 8);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += TK) {
    for (int i = threadIdx.x; i < TM * TK; i += 256) {
      const int r = i / TK, c = i % TK, gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? to_f(A[(long long)gr * K + gc]) : 0.f;
    }
    for (int i = threadIdx.x; i < TK * TN; i += 256) {
      const int c = i / TK, r = i % TK, gk = k0 + r, gn = col0 + c;  // consecutive threads walk k of one column
      Ws[r][c] = (gk < K && gn < N) ? dequant<BITS>(B, scales, zp, gn, gk, block_size, k_blocks, row_bytes) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; ++kk) {
      float a[4], w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = Ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx + 16 * j;
      if (c >= N) continue;
      Y[(long long)r * N + c] = from_f<T>(acc[i][j] + (bias ? to_f(bias[c]) : 0.f));
    }
  }
}

extern "C" __global__ void __launch_bounds__(128) mnb4_gemv_f32(
    const float* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ scales,
    const unsigned char* __restrict__ zp, const float* __restrict__ bias, float* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb4_gemv_f16(
    const f16_t* __restrict__ A, const unsigned char* __restrict__ B, const f16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const f16_t* __restrict__ bias, f16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb4_tiled_f32(
    const float* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ scales,
    const unsigned char* __restrict__ zp, const float* __restrict__ bias, float* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb4_tiled_f16(
    const f16_t* __restrict__ A, const unsigned char* __restrict__ B, const f16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const f16_t* __restrict__ bias, f16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb4_gemv_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb4_tiled_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb8_gemv_f32(
    const float* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ scales,
    const unsigned char* __restrict__ zp, const float* __restrict__ bias, float* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb8_gemv_f16(
    const f16_t* __restrict__ A, const unsigned char* __restrict__ B, const f16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const f16_t* __restrict__ bias, f16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb8_tiled_f32(
    const float* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ scales,
    const unsigned char* __restrict__ zp, const float* __restrict__ bias, float* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb8_tiled_f16(
    const f16_t* __restrict__ A, const unsigned char* __restrict__ B, const f16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const f16_t* __restrict__ bias, f16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb8_gemv_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(256) mnb8_tiled_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  tiled_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}
