// com.microsoft MatMulNBits, 4- or 8-bit block-quantized weights; A, scales, bias and Y in float32, float16
// or bfloat16. B: uint8 [N, k_blocks, block_size*bits/8]. 4-bit: element k of row n in byte
// n*row_bytes + k/2 (low nibble = even k); zero_points (optional) uint8 [N, ceil(k_blocks/2)] packed the
// same way, default 8. 8-bit: one byte per element; zero_points uint8 [N, k_blocks], default 128.
// scales: [N, k_blocks]. Small M: mnb{4,8}_gemv_* reads the packed weights directly (one warp per output
// column). Larger M: mnb{4,8}_dequant_* expands B into a [K, N] workspace of A's type, then matmul_* runs.
#include "common.cuh"

#define GEMV_MAX_M 8

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

template <int BITS, typename T>
__device__ __forceinline__ void dequant_impl(const unsigned char* __restrict__ B, const T* __restrict__ scales,
                                             const unsigned char* __restrict__ zp, T* __restrict__ W, int N, int K,
                                             int block_size, int k_blocks) {
  const long long total = (long long)N * K;
  const long long row_bytes = (long long)k_blocks * (block_size * BITS / 8);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int k = (int)(i / N), n = (int)(i % N);
    W[i] = from_f<T>(dequant<BITS>(B, scales, zp, n, k, block_size, k_blocks, row_bytes));
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

extern "C" __global__ void mnb4_dequant_f32(
    const unsigned char* __restrict__ B, const float* __restrict__ scales, const unsigned char* __restrict__ zp,
    float* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<4>(B, scales, zp, W, N, K, block_size, k_blocks);
}

extern "C" __global__ void mnb4_dequant_f16(
    const unsigned char* __restrict__ B, const f16_t* __restrict__ scales, const unsigned char* __restrict__ zp,
    f16_t* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<4>(B, scales, zp, W, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb4_gemv_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<4>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void mnb4_dequant_bf16(
    const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales, const unsigned char* __restrict__ zp,
    bf16_t* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<4>(B, scales, zp, W, N, K, block_size, k_blocks);
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

extern "C" __global__ void mnb8_dequant_f32(
    const unsigned char* __restrict__ B, const float* __restrict__ scales, const unsigned char* __restrict__ zp,
    float* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<8>(B, scales, zp, W, N, K, block_size, k_blocks);
}

extern "C" __global__ void mnb8_dequant_f16(
    const unsigned char* __restrict__ B, const f16_t* __restrict__ scales, const unsigned char* __restrict__ zp,
    f16_t* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<8>(B, scales, zp, W, N, K, block_size, k_blocks);
}

extern "C" __global__ void __launch_bounds__(128) mnb8_gemv_bf16(
    const bf16_t* __restrict__ A, const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales,
    const unsigned char* __restrict__ zp, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  gemv_impl<8>(A, B, scales, zp, bias, Y, M, N, K, block_size, k_blocks);
}

extern "C" __global__ void mnb8_dequant_bf16(
    const unsigned char* __restrict__ B, const bf16_t* __restrict__ scales, const unsigned char* __restrict__ zp,
    bf16_t* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  dequant_impl<8>(B, scales, zp, W, N, K, block_size, k_blocks);
}
