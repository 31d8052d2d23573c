// Where (a bool condition selects x or y, numpy broadcasting over up to 6 dims: the host passes the output
// dims and each input's element strides, 0 on a broadcast dim) and IsNaN (a bool per element).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void where_impl(
    const unsigned char* __restrict__ c, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
    long long n, const long long* d, const long long* sc, const long long* sx, const long long* sy) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long ic, ix, iy, unused;
    offsets6(i, d, sc, sx, ic, ix);
    offsets6(i, d, sy, sy, iy, unused);
    out[i] = c[ic] ? x[ix] : y[iy];
  }
}

template <typename T>
__device__ __forceinline__ void isnan_impl(const T* __restrict__ x, unsigned char* __restrict__ y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = isnan(to_f(x[i])) ? 1 : 0;
}

extern "C" __global__ void __launch_bounds__(256) where_f32(
    const unsigned char* __restrict__ c, const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
    long long n, long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sc0, long long sc1, long long sc2, long long sc3, long long sc4, long long sc5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  const long long d[6] = {d0, d1, d2, d3, d4, d5};
  const long long sc[6] = {sc0, sc1, sc2, sc3, sc4, sc5};
  const long long sx[6] = {sx0, sx1, sx2, sx3, sx4, sx5};
  const long long sy[6] = {sy0, sy1, sy2, sy3, sy4, sy5};
  where_impl(c, x, y, out, n, d, sc, sx, sy);
}

extern "C" __global__ void __launch_bounds__(256) where_f16(
    const unsigned char* __restrict__ c, const f16_t* __restrict__ x, const f16_t* __restrict__ y, f16_t* __restrict__ out,
    long long n, long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sc0, long long sc1, long long sc2, long long sc3, long long sc4, long long sc5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  const long long d[6] = {d0, d1, d2, d3, d4, d5};
  const long long sc[6] = {sc0, sc1, sc2, sc3, sc4, sc5};
  const long long sx[6] = {sx0, sx1, sx2, sx3, sx4, sx5};
  const long long sy[6] = {sy0, sy1, sy2, sy3, sy4, sy5};
  where_impl(c, x, y, out, n, d, sc, sx, sy);
}

extern "C" __global__ void __launch_bounds__(256) where_bf16(
    const unsigned char* __restrict__ c, const bf16_t* __restrict__ x, const bf16_t* __restrict__ y, bf16_t* __restrict__ out,
    long long n, long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sc0, long long sc1, long long sc2, long long sc3, long long sc4, long long sc5,
    long long sx0, long long sx1, long long sx2, long long sx3, long long sx4, long long sx5,
    long long sy0, long long sy1, long long sy2, long long sy3, long long sy4, long long sy5) {
  const long long d[6] = {d0, d1, d2, d3, d4, d5};
  const long long sc[6] = {sc0, sc1, sc2, sc3, sc4, sc5};
  const long long sx[6] = {sx0, sx1, sx2, sx3, sx4, sx5};
  const long long sy[6] = {sy0, sy1, sy2, sy3, sy4, sy5};
  where_impl(c, x, y, out, n, d, sc, sx, sy);
}

extern "C" __global__ void __launch_bounds__(256) isnan_f32(const float* __restrict__ x, unsigned char* __restrict__ y,
                                                         long long n) {
  isnan_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) isnan_f16(const f16_t* __restrict__ x, unsigned char* __restrict__ y,
                                                         long long n) {
  isnan_impl(x, y, n);
}

extern "C" __global__ void __launch_bounds__(256) isnan_bf16(const bf16_t* __restrict__ x, unsigned char* __restrict__ y,
                                                         long long n) {
  isnan_impl(x, y, n);
}
