// 2-D convolution (1-D as 2-D with H = 1) as an implicit GEMM: no im2col buffer, no workspace.
// Per group g: C[m, c] = sum_k A[m, k] * Bw[k, c] (+ bias[g*OCg + c]) where
//   m = (n, oh, ow) over the output pixels (rows m0 .. m0 + rows - 1 of this launch),
//   k = (ic, kh, kw) over ICg * KH * KW, A[m, k] = X[n, g*ICg + ic, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]
//   (0 outside the image: the padding), Bw[k, c] = W[g*OCg + c, ic, kh, kw] (W is [OC, ICg, KH, KW]).
// Grid (ceil(OCg/64), ceil(rows/64), groups), 256 threads: 64x64 output tiles, 16-deep K slices staged
// in shared memory as float (the A tile gathered from X on the fly), 4x4 outputs per thread,
// float32 accumulation whatever the storage type; Y is [N, OC, OH, OW].
#include "common.cuh"

#define CBM 64
#define CBN 64
#define CBK 16

template <typename T>
__device__ __forceinline__ void conv_impl(
    const T* __restrict__ X, const T* __restrict__ W, const T* __restrict__ bias, T* __restrict__ Y, int C, int H,
    int Wd, int OC, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int groups,
    long long m0, int rows) {
  __shared__ float As[CBK][CBM + 4];
  __shared__ float Bs[CBK][CBN + 4];
  const int g = blockIdx.z;
  const int ICg = C / groups, OCg = OC / groups;
  const int K = ICg * KH * KW;
  const long long ohw = (long long)OH * OW;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int row0 = blockIdx.y * CBM, col0 = blockIdx.x * CBN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += CBK) {
    for (int i = threadIdx.x; i < CBM * CBK; i += 256) {
      const int r = i / CBK, c = i % CBK, gr = row0 + r, gk = k0 + c;
      float a = 0.f;
      if (gr < rows && gk < K) {
        const long long m = m0 + gr;
        const long long n = m / ohw;
        const long long rem = m % ohw;  // OH*OW may pass 2**31
        const int oh = (int)(rem / OW), ow = (int)(rem % OW);
        const int ic = gk / (KH * KW), kr = gk % (KH * KW), kh = kr / KW, kw = kr % KW;
        const int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < Wd)
          a = to_f(X[((n * C + (long long)g * ICg + ic) * H + ih) * Wd + iw]);
      }
      As[c][r] = a;
    }
    for (int i = threadIdx.x; i < CBK * CBN; i += 256) {
      const int r = i / CBN, c = i % CBN, gk = k0 + r, gc = col0 + c;
      Bs[r][c] = (gk < K && gc < OCg) ? to_f(W[((long long)g * OCg + gc) * K + gk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < CBK; ++kk) {
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
    if (r >= rows) continue;
    const long long m = m0 + r;
    const long long n = m / ohw, pix = m % ohw;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx + 16 * j;
      if (c >= OCg) continue;
      const long long oc = (long long)g * OCg + c;
      float v = acc[i][j];
      if (bias) v += to_f(bias[oc]);
      Y[(n * OC + oc) * ohw + pix] = from_f<T>(v);
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) conv2d_f32(
    const float* __restrict__ X, const float* __restrict__ W, const float* __restrict__ bias, float* __restrict__ Y, int C, int H,
    int Wd, int OC, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int groups,
    long long m0, int rows) {
  conv_impl(X, W, bias, Y, C, H, Wd, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups, m0, rows);
}

extern "C" __global__ void __launch_bounds__(256) conv2d_f16(
    const f16_t* __restrict__ X, const f16_t* __restrict__ W, const f16_t* __restrict__ bias, f16_t* __restrict__ Y, int C, int H,
    int Wd, int OC, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int groups,
    long long m0, int rows) {
  conv_impl(X, W, bias, Y, C, H, Wd, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups, m0, rows);
}

extern "C" __global__ void __launch_bounds__(256) conv2d_bf16(
    const bf16_t* __restrict__ X, const bf16_t* __restrict__ W, const bf16_t* __restrict__ bias, bf16_t* __restrict__ Y, int C, int H,
    int Wd, int OC, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int groups,
    long long m0, int rows) {
  conv_impl(X, W, bias, Y, C, H, Wd, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups, m0, rows);
}
