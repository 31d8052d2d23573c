// Elementwise kernels (float32 and float16 storage, float32 math). Binary ops broadcast numpy-style
// over up to 6 dims: the host passes the output dims and each input's element strides (0 on a
// broadcast dim), leading dims padded with 1.
#include "common.cuh"

enum BinaryOp { ADD = 0, SUB = 1, MUL = 2, DIV = 3, POW = 4, MAX_ = 5, MIN_ = 6 };
enum UnaryOp { RELU = 0, SIGMOID = 1, TANH = 2, NEG = 3, EXP = 4, LOG = 5, SQRT = 6, ABS = 7,
               ERF = 8, RECIPROCAL = 9, GELU = 10, GELU_TANH = 11, IDENTITY = 12, SIN = 13, COS = 14 };

__device__ __forceinline__ float binary(int op, float a, float b) {
  switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return a / b;
    case POW: return (b == 2.f) ? a * a : powf(a, b);
    case MAX_: return fmaxf(a, b);
    default: return fminf(a, b);
  }
}

__device__ __forceinline__ float unary(int op, float v) {
  switch (op) {
    case RELU: return fmaxf(v, 0.f);
    case SIGMOID: return 1.f / (1.f + expf(-v));
    case TANH: return tanhf(v);
    case NEG: return -v;
    case EXP: return expf(v);
    case LOG: return logf(v);
    case SQRT: return sqrtf(v);
    case ABS: return fabsf(v);
    case ERF: return erff(v);
    case RECIPROCAL: return 1.f / v;
    case GELU: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case GELU_TANH: return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case SIN: return sinf(v);
    case COS: return cosf(v);
    default: return v;
  }
}

template <typename T>
__device__ __forceinline__ void binary_impl(
    const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, long long n, int op,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sa0, long long sa1, long long sa2, long long sa3, long long sa4, long long sa5,
    long long sb0, long long sb1, long long sb2, long long sb3, long long sb4, long long sb5) {
  const long long d[6] = {d0, d1, d2, d3, d4, d5};
  const long long sa[6] = {sa0, sa1, sa2, sa3, sa4, sa5};
  const long long sb[6] = {sb0, sb1, sb2, sb3, sb4, sb5};
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long ia, ib;
    offsets6(i, d, sa, sb, ia, ib);
    y[i] = from_f<T>(binary(op, to_f(a[ia]), to_f(b[ib])));
  }
}

template <typename T>
__device__ __forceinline__ void unary_impl(const T* __restrict__ x, T* __restrict__ y, long long n, int op) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = from_f<T>(unary(op, to_f(x[i])));
}

extern "C" __global__ void binary_f32(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, long long n, int op,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sa0, long long sa1, long long sa2, long long sa3, long long sa4, long long sa5,
    long long sb0, long long sb1, long long sb2, long long sb3, long long sb4, long long sb5) {
  binary_impl(a, b, y, n, op, d0, d1, d2, d3, d4, d5, sa0, sa1, sa2, sa3, sa4, sa5, sb0, sb1, sb2, sb3, sb4, sb5);
}

extern "C" __global__ void binary_f16(
    const f16_t* __restrict__ a, const f16_t* __restrict__ b, f16_t* __restrict__ y, long long n, int op,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sa0, long long sa1, long long sa2, long long sa3, long long sa4, long long sa5,
    long long sb0, long long sb1, long long sb2, long long sb3, long long sb4, long long sb5) {
  binary_impl(a, b, y, n, op, d0, d1, d2, d3, d4, d5, sa0, sa1, sa2, sa3, sa4, sa5, sb0, sb1, sb2, sb3, sb4, sb5);
}

extern "C" __global__ void unary_f32(const float* __restrict__ x, float* __restrict__ y, long long n, int op) {
  unary_impl(x, y, n, op);
}

extern "C" __global__ void unary_f16(const f16_t* __restrict__ x, f16_t* __restrict__ y, long long n, int op) {
  unary_impl(x, y, n, op);
}

extern "C" __global__ void binary_bf16(
    const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, bf16_t* __restrict__ y, long long n, int op,
    long long d0, long long d1, long long d2, long long d3, long long d4, long long d5,
    long long sa0, long long sa1, long long sa2, long long sa3, long long sa4, long long sa5,
    long long sb0, long long sb1, long long sb2, long long sb3, long long sb4, long long sb5) {
  binary_impl(a, b, y, n, op, d0, d1, d2, d3, d4, d5, sa0, sa1, sa2, sa3, sa4, sa5, sb0, sb1, sb2, sb3, sb4, sb5);
}

extern "C" __global__ void unary_bf16(const bf16_t* __restrict__ x, bf16_t* __restrict__ y, long long n, int op) {
  unary_impl(x, y, n, op);
}
