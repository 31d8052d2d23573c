// Reductions over the trailing (contiguous) axes: one block per output row (grid-strided over rows),
// float32 accumulation; y[row] = scale * sum(x[row, :]) (scale 1/cols for ReduceMean, 1 for ReduceSum).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void reduce_rows_impl(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols,
                                                 float scale) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    float s = 0.f;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += to_f(xr[c]);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) y[row] = from_f<T>(s * scale);
  }
}

extern "C" __global__ void __launch_bounds__(256) reduce_rows_f32(const float* __restrict__ x, float* __restrict__ y,
                                                               long long rows, long long cols, float scale) {
  reduce_rows_impl(x, y, rows, cols, scale);
}

extern "C" __global__ void __launch_bounds__(256) reduce_rows_f16(const f16_t* __restrict__ x, f16_t* __restrict__ y,
                                                               long long rows, long long cols, float scale) {
  reduce_rows_impl(x, y, rows, cols, scale);
}

extern "C" __global__ void __launch_bounds__(256) reduce_rows_bf16(const bf16_t* __restrict__ x, bf16_t* __restrict__ y,
                                                               long long rows, long long cols, float scale) {
  reduce_rows_impl(x, y, rows, cols, scale);
}
