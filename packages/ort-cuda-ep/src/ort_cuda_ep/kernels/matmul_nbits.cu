// com.microsoft MatMulNBits, 4-bit block-quantized weights.
// B: uint8 [N, k_blocks, block_size/2], element k of row n in byte n*row_bytes + k/2
// (low nibble = even k). scales: float [N, k_blocks]. zero_points (optional): uint8
// [N, ceil(k_blocks/2)] packed the same way; default zero point 8.
// Small M: mnb4_gemv_f32 reads the packed weights directly (one warp per output column).
// Larger M: mnb4_dequant_f32 expands B into a float [K, N] workspace, then matmul_f32 runs.
#define GEMV_MAX_M 8

__device__ __forceinline__ float dequant4(const unsigned char* __restrict__ B, const float* __restrict__ scales,
                                          const unsigned char* __restrict__ zp, int n, int k, int block_size,
                                          int k_blocks, long long row_bytes) {
  const unsigned char byte = B[(long long)n * row_bytes + (k >> 1)];
  const int q = (k & 1) ? (byte >> 4) : (byte & 0xF);
  const int kb = k / block_size;
  int z = 8;
  if (zp) {
    const unsigned char zb = zp[(long long)n * ((k_blocks + 1) >> 1) + (kb >> 1)];
    z = (kb & 1) ? (zb >> 4) : (zb & 0xF);
  }
  return (float)(q - z) * scales[(long long)n * k_blocks + kb];
}

extern "C" __global__ void __launch_bounds__(128) mnb4_gemv_f32(
    const float* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ scales,
    const unsigned char* __restrict__ zp, const float* __restrict__ bias, float* __restrict__ Y,
    int M, int N, int K, int block_size, int k_blocks) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = blockIdx.x * (blockDim.x >> 5) + warp;
  if (n >= N) return;
  const long long row_bytes = (long long)k_blocks * (block_size >> 1);
  float acc[GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; ++m) acc[m] = 0.f;
  for (int k = lane; k < K; k += 32) {
    const float w = dequant4(B, scales, zp, n, k, block_size, k_blocks, row_bytes);
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; ++m)
      if (m < M) acc[m] = fmaf(A[(long long)m * K + k], w, acc[m]);
  }
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; ++m) {
    if (m >= M) break;
    float v = acc[m];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) Y[(long long)m * N + n] = v + (bias ? bias[n] : 0.f);
  }
}

extern "C" __global__ void mnb4_dequant_f32(
    const unsigned char* __restrict__ B, const float* __restrict__ scales, const unsigned char* __restrict__ zp,
    float* __restrict__ W, int N, int K, int block_size, int k_blocks) {
  const long long total = (long long)N * K;
  const long long row_bytes = (long long)k_blocks * (block_size >> 1);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int k = (int)(i / N), n = (int)(i % N);
    W[i] = dequant4(B, scales, zp, n, k, block_size, k_blocks, row_bytes);
  }
}
