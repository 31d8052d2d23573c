// SimplifiedLayerNormalization (RMSNorm): y = x / sqrt(mean(x^2) + eps) * scale over the flattened
// normalized dims (`cols`); optional inv_std_var output (one float per row, float32 always).
// com.microsoft SkipSimplifiedLayerNormalization: s = x + skip (+ bias), then the same on s;
// optional outputs inv_std (float) and s itself (input_skip_bias_sum, the residual).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void rms_norm_impl(const T* __restrict__ x, const T* __restrict__ scale, T* __restrict__ y,
                                              float* __restrict__ inv_std, long long rows, int cols, float eps) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = to_f(xr[c]);
      ss += v * v;
    }
    ss = block_sum(ss, scratch);
    const float r = rsqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = from_f<T>(to_f(xr[c]) * r * to_f(scale[c]));
    if (inv_std && threadIdx.x == 0) inv_std[row] = r;
  }
}

template <typename T>
__device__ __forceinline__ void skip_rms_norm_impl(
    const T* __restrict__ x, const T* __restrict__ skip, const T* __restrict__ bias, const T* __restrict__ scale,
    T* __restrict__ y, float* __restrict__ inv_std, T* __restrict__ sum_out, long long rows, int cols, float eps) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      // the sum is rounded to T first, as a stored residual would be
      const float s = to_f(from_f<T>(to_f(x[base + c]) + to_f(skip[base + c]) + (bias ? to_f(bias[c]) : 0.f)));
      if (sum_out) sum_out[base + c] = from_f<T>(s);
      ss += s * s;
    }
    ss = block_sum(ss, scratch);
    const float r = rsqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float s = to_f(from_f<T>(to_f(x[base + c]) + to_f(skip[base + c]) + (bias ? to_f(bias[c]) : 0.f)));
      y[base + c] = from_f<T>(s * r * to_f(scale[c]));
    }
    if (inv_std && threadIdx.x == 0) inv_std[row] = r;
  }
}

extern "C" __global__ void __launch_bounds__(256) rms_norm_f32(
    const float* __restrict__ x, const float* __restrict__ scale, float* __restrict__ y,
    float* __restrict__ inv_std, long long rows, int cols, float eps) {
  rms_norm_impl(x, scale, y, inv_std, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256) rms_norm_f16(
    const f16_t* __restrict__ x, const f16_t* __restrict__ scale, f16_t* __restrict__ y,
    float* __restrict__ inv_std, long long rows, int cols, float eps) {
  rms_norm_impl(x, scale, y, inv_std, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256) skip_rms_norm_f32(
    const float* __restrict__ x, const float* __restrict__ skip, const float* __restrict__ bias,
    const float* __restrict__ scale, float* __restrict__ y, float* __restrict__ inv_std,
    float* __restrict__ sum_out, long long rows, int cols, float eps) {
  skip_rms_norm_impl(x, skip, bias, scale, y, inv_std, sum_out, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256) skip_rms_norm_f16(
    const f16_t* __restrict__ x, const f16_t* __restrict__ skip, const f16_t* __restrict__ bias,
    const f16_t* __restrict__ scale, f16_t* __restrict__ y, float* __restrict__ inv_std,
    f16_t* __restrict__ sum_out, long long rows, int cols, float eps) {
  skip_rms_norm_impl(x, skip, bias, scale, y, inv_std, sum_out, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256) rms_norm_bf16(
    const bf16_t* __restrict__ x, const bf16_t* __restrict__ scale, bf16_t* __restrict__ y,
    float* __restrict__ inv_std, long long rows, int cols, float eps) {
  rms_norm_impl(x, scale, y, inv_std, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256) skip_rms_norm_bf16(
    const bf16_t* __restrict__ x, const bf16_t* __restrict__ skip, const bf16_t* __restrict__ bias,
    const bf16_t* __restrict__ scale, bf16_t* __restrict__ y, float* __restrict__ inv_std,
    bf16_t* __restrict__ sum_out, long long rows, int cols, float eps) {
  skip_rms_norm_impl(x, skip, bias, scale, y, inv_std, sum_out, rows, cols, eps);
}
