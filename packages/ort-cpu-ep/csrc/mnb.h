/* MatMulNBits (com.microsoft) on the CPU: the math (mnb_math.c), its threads (mnb_parallel.c) and the
 * ort-abi kernel around them (mnb_kernel.c). Y[M, N] = A[M, K] @ W^T (+ bias), where
 * W[n, k] = (q[n, k] - zp[n, k / block]) * scale[n, k / block] and q are bits-wide unsigned values packed
 * low bits first in B[N, k_blocks, block * bits / 8]. */
#ifndef ORT_CPU_EP_MNB_H_
#define ORT_CPU_EP_MNB_H_

#include <stddef.h>
#include <stdint.h>

#define MNB_PANEL 16       /* output columns (rows of B) one work item computes */
#define MNB_KC 256         /* K elements per dequantized float panel chunk (a multiple of every block size) */
#define MNB_MAX_BLOCK 256  /* largest block_size these kernels take */
#define MNB_GEMV_MAX_M 4   /* rows of A up to which the GEMV path (no panel) is used */
/* per-thread buffer: the float panel MNB_KC x MNB_PANEL, or the int16 weights MNB_PANEL x block, plus alignment */
#define MNB_THREAD_BYTES ((size_t)MNB_KC * MNB_PANEL * sizeof(float) + 64)

typedef struct MnbProblem {
  int64_t M, N, K, bits, block, k_blocks, blob, zp_row_bytes;
  const float* a;       /* M x K */
  float* y;             /* M x N */
  const uint8_t* b;     /* N x k_blocks x blob */
  const float* scales;  /* N x k_blocks */
  const uint8_t* zp_u8; /* N x zp_row_bytes, packed like B; NULL: absent (or float) */
  const float* zp_f;    /* N x k_blocks; NULL: absent (or packed) */
  const float* bias;    /* N, or NULL */
  int int8;             /* accuracy_level 4: int8 activations per block, int32 block dot products */
  const int8_t* qa;     /* int8 path: M x (k_blocks * block), zero beyond K */
  const float* qa_scale;/* int8 path: M x k_blocks */
  const int32_t* qa_sum;/* int8 path: M x k_blocks, the sum of each block's int8 values */
} MnbProblem;

static inline int mnb_zero_point(const MnbProblem* p, int64_t n, int64_t blk) {
  int64_t bit;
  if (p->zp_u8 == NULL) return 1 << (p->bits - 1);
  bit = blk * p->bits;
  return (p->zp_u8[n * p->zp_row_bytes + (bit >> 3)] >> (bit & 7)) & ((1 << p->bits) - 1);
}

/* AVX2 + FMA kernels for 4-bit weights (mnb_avx2.c), used when mnb_avx2_applies(p): an x86-64 CPU with
 * AVX2 and FMA (checked at run time), 4 bits, block_size a multiple of 32, integer zero points */
int mnb_avx2_applies(const MnbProblem* p);
/* fp32: y[m * N + n] for rows [0, M) and one column n, dequantizing block by block */
void mnb_avx2_column_f32(const MnbProblem* p, int64_t n);
/* fp32 micro-kernel: acc[4][MNB_PANEL] += a rows[4][kc] @ panel[kc][MNB_PANEL] */
void mnb_avx2_tile_f32(const float* const* rows, const float* panel, int64_t kc, float* acc);
/* AVX-512F (checked at run time, and the instruction-set cap at its widest): an 8-row fp32 micro-kernel,
 * acc[8][MNB_PANEL] += a rows[8][kc] @ panel[kc][MNB_PANEL], the A values broadcast from memory */
int mnb_avx512_applies(void);
void mnb_avx512_tile_f32(const float* const* rows, const float* panel, int64_t kc, float* acc);
/* int8: y[m * N + n] for rows [0, M) and one column n */
void mnb_avx2_column_i8(const MnbProblem* p, int64_t n);

/* bytes of the quantized A of the int8 path (values, then 16-byte aligned float scales and int32 block sums) */
size_t mnb_quantized_a_bytes(int64_t M, int64_t K, int64_t block);
/* quantize A per block of `block` along K: scale = max|a| / 127, values rounded half to even; `qa_sum` gets
 * each block's sum of values */
void mnb_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int8_t* qa, float* qa_scale,
                    int32_t* qa_sum);
/* compute the output columns of panels [p0, p1) (MNB_PANEL columns each) with a thread buffer of
 * MNB_THREAD_BYTES */
void mnb_compute_panels(const MnbProblem* p, int64_t p0, int64_t p1, void* thread_buffer);

/* run fn(ctx, index, count) on `count` threads (the caller's is index 0) and wait for all */
typedef void (*MnbTask)(void* ctx, int index, int count);
void mnb_parallel(int count, MnbTask fn, void* ctx);
/* the intra-op threads for kernels running on the calling thread (see mnb_kernel.c) */
int mnb_threads(void);

#endif
