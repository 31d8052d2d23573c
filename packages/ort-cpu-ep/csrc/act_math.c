/* The piecewise-linear activations of the Conv C kernel's fused activation and of the elementwise Relu, Clip,
 * HardSigmoid, LeakyRelu and HardSwish kernels (act_unary.c), float32, each the numpy kernel's expression in the
 * same order of IEEE operations: Relu max(x, 0), Clip max then min, HardSigmoid clip(alpha x + beta, 0, 1),
 * LeakyRelu x >= 0 ? x : alpha x, HardSwish x * clip(x / 6 + 0.5, 0, 1); NaN propagates as in numpy's
 * maximum / minimum (equal values: the
 * second operand, so Relu(-0) is +0). No multiply-add contraction here (a fused alpha x + beta rounds once, numpy twice), so
 * the results are numpy's bits. Sigmoid is 1 / (1 + exp(-x)) as the numpy kernel's sigmoid_into, exp by vm_exp16
 * (within a few ulp of the C library's, so within a few ulp of numpy), 0 below x = -88 and 1 above 88; where the CPU
 * has AVX-512, vec_math_avx512.h's vx_sigmoid16 (the same math in intrinsics; 0 below about -104). */
#pragma GCC optimize("fp-contract=off")
#include <string.h>

#include "conv.h"
#include "cpu_kernels.h"
#include "vec_math.h" /* vm_exp16 */
#include "vec_math_avx512.h" /* vx_sigmoid16 */

/* numpy's maximum(v, lo) / minimum(v, hi): a NaN of either side is the result, and of equal values (0 and -0)
 * the second */
static inline float act_lo(float v, float lo) { return v > lo || v != v ? v : lo; }
static inline float act_hi(float v, float hi) { return v < hi || v != v ? v : hi; }

/* y = 1 / (1 + exp(-x)) for 16 floats (one zmm in the AVX-512 clone) */
static inline __attribute__((always_inline)) vm_v16 act_sigmoid16(vm_v16 v) {
  const vm_v16 one = vm_splat16(1.0f);
  return one / (one + vm_exp16(-v));
}

#ifdef VX_AVX512
VX_TARGET static void act_sigmoid_avx512(const float* x, float* y, int64_t n) { VX_MAP(vx_sigmoid16, x, y, n); }
#endif

CPU_KERNELS_CLONES
static void act_sigmoid(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef VX_AVX512
  if (vx_use_avx512()) {
    act_sigmoid_avx512(x, y, n);
    return;
  }
#endif
  for (; i + 16 <= n; i += 16) {
    vm_v16 v;
    memcpy(&v, x + i, sizeof v);
    v = act_sigmoid16(v);
    memcpy(y + i, &v, sizeof v);
  }
  if (i < n) { /* the tail through one padded vector */
    float tail[16] = {0};
    vm_v16 v;
    memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));
    memcpy(&v, tail, sizeof v);
    v = act_sigmoid16(v);
    memcpy(tail, &v, sizeof v);
    memcpy(y + i, tail, (size_t)(n - i) * sizeof(float));
  }
}

CPU_KERNELS_CLONES
void conv_act_apply(const float* x, float* y, int64_t n, const ConvAct* act) {
  const float a = act->a, b = act->b;
  int64_t i;
  switch (act->kind) {
    case CONV_ACT_RELU:
      for (i = 0; i < n; ++i) y[i] = act_lo(x[i], 0.0f);
      break;
    case CONV_ACT_CLIP:
      for (i = 0; i < n; ++i) y[i] = act_hi(act_lo(x[i], a), b);
      break;
    case CONV_ACT_HARD_SIGMOID:
      for (i = 0; i < n; ++i) y[i] = act_hi(act_lo(a * x[i] + b, 0.0f), 1.0f);
      break;
    case CONV_ACT_LEAKY_RELU:
      for (i = 0; i < n; ++i) y[i] = x[i] >= 0.0f ? x[i] : a * x[i];
      break;
    case CONV_ACT_HARD_SWISH:
      for (i = 0; i < n; ++i) y[i] = x[i] * act_hi(act_lo(x[i] / 6.0f + 0.5f, 0.0f), 1.0f);
      break;
    case CONV_ACT_SIGMOID:
      act_sigmoid(x, y, n);
      break;
    default:
      if (x != y)
        for (i = 0; i < n; ++i) y[i] = x[i];
      break;
  }
}
