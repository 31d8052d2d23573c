// SimplifiedLayerNormalization (RMSNorm): y = x / sqrt(mean(x^2) + eps) * scale, over the
// flattened normalized dims (`cols`); optional inv_std_var output (one float per row).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) rms_norm_f32(
    const float* __restrict__ x, const float* __restrict__ scale, float* __restrict__ y,
    float* __restrict__ inv_std, long long rows, int cols, float eps) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    ss = block_sum(ss, scratch);
    const float r = rsqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * r * scale[c];
    if (inv_std && threadIdx.x == 0) inv_std[row] = r;
  }
}

// com.microsoft SkipSimplifiedLayerNormalization: s = x + skip (+ bias); y = rms_norm(s) * scale.
// Optional outputs: inv_std (one float per row) and s itself (input_skip_bias_sum, the residual).
extern "C" __global__ void __launch_bounds__(256) skip_rms_norm_f32(
    const float* __restrict__ x, const float* __restrict__ skip, const float* __restrict__ bias,
    const float* __restrict__ scale, float* __restrict__ y, float* __restrict__ inv_std,
    float* __restrict__ sum_out, long long rows, int cols, float eps) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      float s = x[base + c] + skip[base + c] + (bias ? bias[c] : 0.f);
      if (sum_out) sum_out[base + c] = s;
      ss += s * s;
    }
    ss = block_sum(ss, scratch);
    const float r = rsqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float s = x[base + c] + skip[base + c] + (bias ? bias[c] : 0.f);
      y[base + c] = s * r * scale[c];
    }
    if (inv_std && threadIdx.x == 0) inv_std[row] = r;
  }
}
