/* Vector math the elementwise C kernels share (act_kernel.c, softmax_kernel.c): 8-float GCC/clang vector
 * extensions, compiled into each caller's target_clones (CPU_KERNELS_CLONES), always inlined.
 *
 * vm_exp8: a branch-free Cephes-style exp, within a few ulp of the C library's for every float; above 88 it is
 * inf, below -88 zero (the C library gives denormals down to -103.9), NaN propagates. vm_exp8_upto88: the same
 * without the overflow check, for arguments known to be <= 88 (softmax's x - max). vm_exp16: the same on 16 floats. */
#ifndef ORT_CPU_EP_VEC_MATH_H_
#define ORT_CPU_EP_VEC_MATH_H_

#include <math.h>
#include <stdint.h>

#pragma GCC diagnostic ignored "-Wpsabi" /* vm_v8 values never cross a call: the helpers inline */

typedef float vm_v8 __attribute__((vector_size(32)));
typedef int32_t vm_i8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) vm_v8 vm_splat8(float v) {
  vm_v8 r = {v, v, v, v, v, v, v, v};
  return r;
}

/* the larger of a and b lane by lane (b where either is NaN) */
static inline __attribute__((always_inline)) vm_v8 vm_max8(vm_v8 a, vm_v8 b) {
  vm_i8 gt = a > b;
  return (vm_v8)(((vm_i8)a & gt) | ((vm_i8)b & ~gt));
}

/* exp(r) for |r| <= ln2 / 2 by Cephes' degree-6 polynomial, on any float vector type T with splat S: one copy
 * for the generic vectors here and a kernel's own instruction-set path (softmax_kernel.c's AVX-512) */
#define VM_LOG2E 1.44269504088896341f
#define VM_LN2_HI 0.693359375f    /* ln 2 = VM_LN2_HI - VM_LN2_LO, the first exact in few bits */
#define VM_LN2_LO -2.12194440e-4f
#define VM_EXP_POLY(r, S)                                                                                       \
  (((((((S(1.9875691500E-4f) * (r) + S(1.3981999507E-3f)) * (r) + S(8.3334519073E-3f)) * (r) +               \
       S(4.1665795894E-2f)) * (r) + S(1.6666665459E-1f)) * (r) + S(5.0000001201E-1f)) * (r) * (r) + (r)) +   \
   S(1.0f))

/* exp(x) for vectors x <= 88 (or NaN; larger x give garbage), below -88 zero: x = n ln2 + r, |r| <= ln2 / 2;
 * exp(r) by VM_EXP_POLY; 2^n from the exponent bits (n = -127 below -88: 0). Softmax's x - max <= 0 needs no
 * more; NAME (vm_exp8, vm_exp16) takes any float: above 88 inf, as expf overflows. One definition for each vector
 * width (VT floats, IT int32 lanes, SPLAT): 8 floats (vm_exp8*) and 16 (vm_exp16*: one zmm on AVX-512 clones). */
#define VM_DEFINE_EXP(NAME, VT, IT, SPLAT)                                                       \
  static inline __attribute__((always_inline)) VT NAME##_upto88(VT x) {                        \
    const VT lo = SPLAT(-88.0f), magic = SPLAT(12582912.0f); /* 1.5 * 2^23 */                  \
    IT below = x < lo, bits;                                                                    \
    VT n, r, p;                                                                                 \
    x = (VT)(((IT)lo & below) | ((IT)x & ~below));                                              \
    n = (x * SPLAT(VM_LOG2E) + magic) - magic; /* round to nearest */                           \
    r = x - n * SPLAT(VM_LN2_HI) - n * SPLAT(VM_LN2_LO);                                        \
    p = VM_EXP_POLY(r, SPLAT);                                                                  \
    bits = (__builtin_convertvector(n, IT) + 127) << 23;                                        \
    return p * (VT)bits;                                                                        \
  }                                                                                             \
  static inline __attribute__((always_inline)) VT NAME(VT x) {                                  \
    const VT hi = SPLAT(88.0f);                                                                 \
    IT above = x > hi;                                                                          \
    VT p = NAME##_upto88((VT)(((IT)hi & above) | ((IT)x & ~above)));                            \
    return (VT)(((IT)SPLAT(INFINITY) & above) | ((IT)p & ~above));                              \
  }

VM_DEFINE_EXP(vm_exp8, vm_v8, vm_i8, vm_splat8)

typedef float vm_v16 __attribute__((vector_size(64)));
typedef int32_t vm_i16 __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) vm_v16 vm_splat16(float v) {
  vm_v16 r = {v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
  return r;
}

VM_DEFINE_EXP(vm_exp16, vm_v16, vm_i16, vm_splat16)

#endif
