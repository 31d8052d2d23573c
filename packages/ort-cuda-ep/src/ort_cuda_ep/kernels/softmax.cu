// Softmax over the last axis: one block per row (grid-strided over rows), max-subtracted, float math.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void softmax_impl(const T* __restrict__ x, T* __restrict__ y, long long rows, int cols) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float m = -ORT_INF;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, to_f(xr[c]));
    m = block_max(m, scratch);
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(to_f(xr[c]) - m);
    s = block_sum(s, scratch);
    const float inv = 1.f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = from_f<T>(expf(to_f(xr[c]) - m) * inv);
  }
}

extern "C" __global__ void __launch_bounds__(256) softmax_f32(const float* __restrict__ x, float* __restrict__ y,
                                                              long long rows, int cols) {
  softmax_impl(x, y, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256) softmax_f16(const f16_t* __restrict__ x, f16_t* __restrict__ y,
                                                              long long rows, int cols) {
  softmax_impl(x, y, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256) softmax_bf16(const bf16_t* __restrict__ x, bf16_t* __restrict__ y,
                                                              long long rows, int cols) {
  softmax_impl(x, y, rows, cols);
}
