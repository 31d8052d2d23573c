/* exp, tanh and sigmoid on 16 floats with AVX-512F intrinsics, for the elementwise kernels' AVX-512 loops (Exp and
 * Tanh in math_unary.c, Sigmoid in act_math.c, QuickGelu / SiLU in act_kernel.c). The math is vec_math.h's (x = n ln2
 * + r, Cephes' degree-6 polynomial for exp(r)), in half the instructions of its generic-vector form: multiply-adds
 * (each rounds once: within a few ulp as before, not the same bits), n rounded by vrndscaleps and 2^n applied by
 * vscalefps, which itself gives inf past float32's range (x above ~88.72) and the denormals below -87.3 (0 under
 * flush-to-zero, and below ~-103.97). x is clamped to [-104, 104] first so that n stays finite; max(lo, x) and
 * min(hi, x) keep a NaN x (vmaxps / vminps return their second operand when either is NaN).
 *
 * Measured on a Zen 4 core: 16k vectors of exp 115 -> 55 us (onnxruntime's whole Exp run: 54 us).
 *
 * vx_use_avx512(): the CPU has AVX-512F and the instruction-set cap (g_isa_cap, mnb.h) allows level 2, as the
 * other AVX-512 paths decide; callers without it keep their generic loops. */
#ifndef ORT_CPU_EP_VEC_MATH_AVX512_H_
#define ORT_CPU_EP_VEC_MATH_AVX512_H_

#include "mnb.h" /* g_isa_cap */
#include "vec_math.h" /* VM_LOG2E, VM_LN2_HI, VM_LN2_LO */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VX_AVX512 1
#define VX_TARGET __attribute__((target("avx512f,fma")))
#define VX_INLINE static inline __attribute__((always_inline)) VX_TARGET

static inline int vx_use_avx512(void) {
  static int cpu = -1;
  if (cpu < 0) {
    __builtin_cpu_init();
    cpu = !!__builtin_cpu_supports("avx512f");
  }
  return cpu && g_isa_cap >= 2;
}

VX_INLINE __m512 vx_splat(float v) { return _mm512_set1_ps(v); }

VX_INLINE __m512 vx_exp16(__m512 x) {
  __m512 n, r, p;
  x = _mm512_min_ps(vx_splat(104.0f), _mm512_max_ps(vx_splat(-104.0f), x));
  n = _mm512_roundscale_ps(_mm512_mul_ps(x, vx_splat(VM_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_fnmadd_ps(n, vx_splat(VM_LN2_HI), x);
  r = _mm512_fnmadd_ps(n, vx_splat(VM_LN2_LO), r);
  p = _mm512_fmadd_ps(vx_splat(1.9875691500E-4f), r, vx_splat(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, vx_splat(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, vx_splat(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, vx_splat(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, vx_splat(5.0000001201E-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), vx_splat(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* tanh as math_unary.c's generic one: below |x| = 0.625 x + x^3 P(x^2), else 1 - 2 / (exp(2|x|) + 1) with x's sign
 * (exactly odd); a NaN fails the compare, takes the second branch and stays NaN */
VX_INLINE __m512 vx_tanh16(__m512 x) {
  const __m512i sign_bit = _mm512_set1_epi32((int)0x80000000u);
  const __m512i bits = _mm512_castps_si512(x);
  const __m512 z = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, bits)), s = _mm512_mul_ps(x, x);
  __m512 small = _mm512_fmadd_ps(vx_splat(-5.70498872745E-3f), s, vx_splat(2.06390887954E-2f)), large;
  small = _mm512_fmadd_ps(small, s, vx_splat(-5.37397155531E-2f));
  small = _mm512_fmadd_ps(small, s, vx_splat(1.33314422036E-1f));
  small = _mm512_fmadd_ps(small, s, vx_splat(-3.33332819422E-1f));
  small = _mm512_fmadd_ps(_mm512_mul_ps(small, s), x, x);
  large = _mm512_sub_ps(vx_splat(1.0f), _mm512_div_ps(vx_splat(2.0f), _mm512_add_ps(vx_exp16(_mm512_add_ps(z, z)),
                                                                                    vx_splat(1.0f))));
  large = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(large), _mm512_and_si512(bits, sign_bit)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, vx_splat(0.625f), _CMP_LT_OQ), large, small);
}

/* x / (1 + exp(-a x)): Sigmoid (the numerator 1, a = 1) and QuickGelu / SiLU (the numerator x) */
VX_INLINE __m512 vx_sigmoid16(__m512 x) {
  return _mm512_div_ps(vx_splat(1.0f), _mm512_add_ps(vx_splat(1.0f), vx_exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

VX_INLINE __m512 vx_quick_gelu16(__m512 x, __m512 minus_alpha) {
  return _mm512_div_ps(x, _mm512_add_ps(vx_splat(1.0f), vx_exp16(_mm512_mul_ps(x, minus_alpha))));
}

/* y[i] = F(x[i], ...) for i in [0, n), the tail through a masked load and store; F one of the functions above, the
 * optional arguments its further ones */
#define VX_MAP(F, x, y, n, ...)                                                           \
  do {                                                                                    \
    int64_t vx_i_ = 0;                                                                    \
    for (; vx_i_ + 16 <= (n); vx_i_ += 16)                                                \
      _mm512_storeu_ps((y) + vx_i_, F(_mm512_loadu_ps((x) + vx_i_), ##__VA_ARGS__));         \
    if (vx_i_ < (n)) {                                                                    \
      const __mmask16 vx_m_ = (__mmask16)((1u << ((n) - vx_i_)) - 1u);                    \
      _mm512_mask_storeu_ps((y) + vx_i_, vx_m_, F(_mm512_maskz_loadu_ps(vx_m_, (x) + vx_i_), ##__VA_ARGS__)); \
    }                                                                                     \
  } while (0)
#endif

#endif
