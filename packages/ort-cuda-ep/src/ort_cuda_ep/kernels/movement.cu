// Data movement: one strided copy over up to 6 dims serves Reshape/Squeeze/Unsqueeze/Flatten (a flat
// copy), Transpose (permuted source strides), Slice (offset source, strides times steps, negative
// allowed), Expand (stride 0 on broadcast dims) and Concat (one launch per input into an offset
// destination). The host passes the dims, both sides' element strides and pointers already offset.
// Element size is the only type parameter. Gather takes int32/int64 indices (negative ones count
// from the end; out-of-range ones write zeros). Casts convert between float32/float16/bfloat16/int32/int64.
#include "common.cuh"

typedef unsigned char b1_t;
typedef unsigned short b2_t;
typedef unsigned int b4_t;
typedef unsigned long long b8_t;

template <typename T>
__device__ __forceinline__ void strided_copy_impl(
    const T* __restrict__ x, T* __restrict__ y, long long n,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  const long long d[6] = {d0, d1, d2, d3, d4, d5};
  const long long sx[6] = {sx0, sx1, sx2, sx3, sx4, sx5};
  const long long sy[6] = {sy0, sy1, sy2, sy3, sy4, sy5};
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long ix, iy;
    offsets6(i, d, sx, sy, ix, iy);
    y[iy] = x[ix];
  }
}

extern "C" __global__ void __launch_bounds__(256) strided_copy_b1(
    const b1_t* __restrict__ x, b1_t* __restrict__ y, long long n,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  strided_copy_impl(x, y, n, d0, d1, d2, d3, d4, d5, sx0, sx1, sx2, sx3, sx4, sx5, sy0, sy1, sy2, sy3, sy4, sy5);
}

extern "C" __global__ void __launch_bounds__(256) strided_copy_b2(
    const b2_t* __restrict__ x, b2_t* __restrict__ y, long long n,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  strided_copy_impl(x, y, n, d0, d1, d2, d3, d4, d5, sx0, sx1, sx2, sx3, sx4, sx5, sy0, sy1, sy2, sy3, sy4, sy5);
}

extern "C" __global__ void __launch_bounds__(256) strided_copy_b4(
    const b4_t* __restrict__ x, b4_t* __restrict__ y, long long n,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  strided_copy_impl(x, y, n, d0, d1, d2, d3, d4, d5, sx0, sx1, sx2, sx3, sx4, sx5, sy0, sy1, sy2, sy3, sy4, sy5);
}

extern "C" __global__ void __launch_bounds__(256) strided_copy_b8(
    const b8_t* __restrict__ x, b8_t* __restrict__ y, long long n,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  strided_copy_impl(x, y, n, d0, d1, d2, d3, d4, d5, sx0, sx1, sx2, sx3, sx4, sx5, sy0, sy1, sy2, sy3, sy4, sy5);
}

// y[o, j, k] = x[o, idx[j], k] over [outer, n_idx, inner]; axis_dim is x's extent on the gathered axis.
template <typename T, typename I>
__device__ __forceinline__ void gather_impl(const T* __restrict__ x, const I* __restrict__ idx, T* __restrict__ y,
                                            long long outer, long long n_idx, long long axis_dim, long long inner) {
  const long long n = outer * n_idx * inner;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long k = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);
    long long at = (long long)idx[j];
    if (at < 0) at += axis_dim;
    y[i] = (at >= 0 && at < axis_dim) ? x[(o * axis_dim + at) * inner + k] : (T)0;
  }
}

extern "C" __global__ void __launch_bounds__(256) gather_b2_i32(
    const b2_t* __restrict__ x, const int* __restrict__ idx, b2_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

extern "C" __global__ void __launch_bounds__(256) gather_b2_i64(
    const b2_t* __restrict__ x, const long long* __restrict__ idx, b2_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

extern "C" __global__ void __launch_bounds__(256) gather_b4_i32(
    const b4_t* __restrict__ x, const int* __restrict__ idx, b4_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

extern "C" __global__ void __launch_bounds__(256) gather_b4_i64(
    const b4_t* __restrict__ x, const long long* __restrict__ idx, b4_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

extern "C" __global__ void __launch_bounds__(256) gather_b8_i32(
    const b8_t* __restrict__ x, const int* __restrict__ idx, b8_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

extern "C" __global__ void __launch_bounds__(256) gather_b8_i64(
    const b8_t* __restrict__ x, const long long* __restrict__ idx, b8_t* __restrict__ y, long long outer,
    long long n_idx, long long axis_dim, long long inner) {
  gather_impl(x, idx, y, outer, n_idx, axis_dim, inner);
}

// Casts: through float for float16, a C conversion otherwise (float -> int truncates toward zero).
template <typename D, typename S> __device__ __forceinline__ D convert(S v) { return (D)v; }
template <> __device__ __forceinline__ f16_t convert<f16_t, float>(float v) { return from_f<f16_t>(v); }
template <> __device__ __forceinline__ float convert<float, f16_t>(f16_t v) { return to_f(v); }
template <> __device__ __forceinline__ f16_t convert<f16_t, int>(int v) { return from_f<f16_t>((float)v); }
template <> __device__ __forceinline__ f16_t convert<f16_t, long long>(long long v) { return from_f<f16_t>((float)v); }
template <> __device__ __forceinline__ int convert<int, f16_t>(f16_t v) { return (int)to_f(v); }
template <> __device__ __forceinline__ long long convert<long long, f16_t>(f16_t v) { return (long long)to_f(v); }
template <> __device__ __forceinline__ bf16_t convert<bf16_t, float>(float v) { return from_f<bf16_t>(v); }
template <> __device__ __forceinline__ bf16_t convert<bf16_t, f16_t>(f16_t v) { return from_f<bf16_t>(to_f(v)); }
template <> __device__ __forceinline__ bf16_t convert<bf16_t, int>(int v) { return from_f<bf16_t>((float)v); }
template <> __device__ __forceinline__ bf16_t convert<bf16_t, long long>(long long v) { return from_f<bf16_t>((float)v); }
template <> __device__ __forceinline__ float convert<float, bf16_t>(bf16_t v) { return to_f(v); }
template <> __device__ __forceinline__ f16_t convert<f16_t, bf16_t>(bf16_t v) { return from_f<f16_t>(to_f(v)); }
template <> __device__ __forceinline__ int convert<int, bf16_t>(bf16_t v) { return (int)to_f(v); }
template <> __device__ __forceinline__ long long convert<long long, bf16_t>(bf16_t v) { return (long long)to_f(v); }

template <typename S, typename D>
__device__ __forceinline__ void cast_impl(const S* __restrict__ x, D* __restrict__ y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = convert<D, S>(x[i]);
}

extern "C" __global__ void __launch_bounds__(256) cast_f32_f16(const float* __restrict__ x, f16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f32_bf16(const float* __restrict__ x, bf16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f32_i32(const float* __restrict__ x, int* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f32_i64(const float* __restrict__ x, long long* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f16_f32(const f16_t* __restrict__ x, float* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f16_bf16(const f16_t* __restrict__ x, bf16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f16_i32(const f16_t* __restrict__ x, int* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_f16_i64(const f16_t* __restrict__ x, long long* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_bf16_f32(const bf16_t* __restrict__ x, float* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_bf16_f16(const bf16_t* __restrict__ x, f16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_bf16_i32(const bf16_t* __restrict__ x, int* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_bf16_i64(const bf16_t* __restrict__ x, long long* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i32_f32(const int* __restrict__ x, float* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i32_f16(const int* __restrict__ x, f16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i32_bf16(const int* __restrict__ x, bf16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i32_i64(const int* __restrict__ x, long long* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i64_f32(const long long* __restrict__ x, float* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i64_f16(const long long* __restrict__ x, f16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i64_bf16(const long long* __restrict__ x, bf16_t* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) cast_i64_i32(const long long* __restrict__ x, int* __restrict__ y,
                                                            long long n) {
  cast_impl(x, y, n);
}
