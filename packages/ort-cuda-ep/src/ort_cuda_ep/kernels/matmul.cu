// Tiled GEMM for MatMul and Gemm: C[b] = alpha * op(A[b]) op(B[b]) + beta * bias (broadcast).
// 64x64 output tile per block, 16-deep K slices in shared memory (float), 256 threads, 4x4 outputs
// each, float accumulation for float32 and float16 storage. Transposes and broadcasts are element
// strides, so one kernel serves all.
#include "common.cuh"

#define BM 64
#define BN 64
#define BK 16

template <typename T>
__device__ __forceinline__ void matmul_impl(
    const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, const T* __restrict__ bias, int M, int N,
    int K, long long a_m, long long a_k, long long b_k, long long b_n, long long batch_a, long long batch_b,
    long long batch_c, long long bias_m, long long bias_n, long long batch_bias, float alpha, float beta) {
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN + 4];
  const long long bz = blockIdx.z;
  A += bz * batch_a;
  B += bz * batch_b;
  C += bz * batch_c;
  if (bias) bias += bz * batch_bias;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = threadIdx.x; i < BM * BK; i += 256) {
      const int r = i / BK, c = i % BK, gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? to_f(A[gr * a_m + gc * a_k]) : 0.f;
    }
    for (int i = threadIdx.x; i < BK * BN; i += 256) {
      const int r = i / BN, c = i % BN, gr = k0 + r, gc = col0 + c;
      Bs[r][c] = (gr < K && gc < N) ? to_f(B[gr * b_k + gc * b_n]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
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
      float v = alpha * acc[i][j];
      if (bias) v += beta * to_f(bias[r * bias_m + c * bias_n]);
      C[(long long)r * N + c] = from_f<T>(v);
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) matmul_f32(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, const float* __restrict__ bias, int M, int N, int K,
    long long a_m, long long a_k, long long b_k, long long b_n, long long batch_a, long long batch_b, long long batch_c,
    long long bias_m, long long bias_n, long long batch_bias, float alpha, float beta) {
  matmul_impl(A, B, C, bias, M, N, K, a_m, a_k, b_k, b_n, batch_a, batch_b, batch_c, bias_m, bias_n, batch_bias, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) matmul_f16(
    const f16_t* __restrict__ A, const f16_t* __restrict__ B, f16_t* __restrict__ C, const f16_t* __restrict__ bias, int M, int N, int K,
    long long a_m, long long a_k, long long b_k, long long b_n, long long batch_a, long long batch_b, long long batch_c,
    long long bias_m, long long bias_n, long long batch_bias, float alpha, float beta) {
  matmul_impl(A, B, C, bias, M, N, K, a_m, a_k, b_k, b_n, batch_a, batch_b, batch_c, bias_m, bias_n, batch_bias, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) matmul_bf16(
    const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, const bf16_t* __restrict__ bias, int M, int N, int K,
    long long a_m, long long a_k, long long b_k, long long b_n, long long batch_a, long long batch_b, long long batch_c,
    long long bias_m, long long bias_n, long long batch_bias, float alpha, float beta) {
  matmul_impl(A, B, C, bias, M, N, K, a_m, a_k, b_k, b_n, batch_a, batch_b, batch_c, bias_m, bias_n, batch_bias, alpha, beta);
}
