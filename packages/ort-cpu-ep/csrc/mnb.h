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
  const int8_t* qa;     /* int8 path: M rows of qa_stride values, zero beyond K */
  int64_t qa_stride;    /* int8 path: k_blocks * block rounded up to MNB_QA_CHUNK */
  const float* qa_scale;/* int8 path: M x k_blocks */
  const int32_t* qa_sum;/* int8 path: M x k_blocks, the sum of each block's int8 values */
  const float* qa_sum_scaled; /* int8 path: M x k_blocks, qa_sum * qa_scale */
} MnbProblem;

/* the int8 A is laid out in chunks of MNB_QA_CHUNK values along K; in the "even/odd" layout (the AVX-512 VNNI
 * kernel's) each chunk holds its even-indexed values first, then its odd-indexed ones, which is the order the
 * low and high nibbles of 64 packed 4-bit weight bytes come in */
#define MNB_QA_CHUNK 128

static inline int mnb_zero_point(const MnbProblem* p, int64_t n, int64_t blk) {
  int64_t bit;
  if (p->zp_u8 == NULL) return 1 << (p->bits - 1);
  bit = blk * p->bits;
  return (p->zp_u8[n * p->zp_row_bytes + (bit >> 3)] >> (bit & 7)) & ((1 << p->bits) - 1);
}

/* the widest instruction set the kernels may use: 0 portable C, 1 AVX2 + FMA, 2 256-bit VNNI and the AVX-512F fp32
 * GEMMs (MatMulNBits and MatMul, sgemm_math.c), 3 (MNB_ISA_ALL, the default) the AVX-512 VNNI int8 kernel; whatever the cap, a path runs only where the CPU
 * has it. Tests lower it (ort_cpu_ep_set_isa_cap) to check every path on one machine. */
#define MNB_ISA_ALL 3
extern int g_isa_cap;

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

/* row stride of the quantized A: k_blocks * block rounded up to MNB_QA_CHUNK */
int64_t mnb_quantized_a_stride(int64_t K, int64_t block);
/* bytes of the quantized A of the int8 path (M x stride values, then per block: float scales, int32 sums and
 * float sums times scales) */
size_t mnb_quantized_a_bytes(int64_t M, int64_t K, int64_t block);
/* quantize A per block of `block` along K into p's qa buffers (p->qa_stride values a row): scale = max|a| / 127,
 * values rounded half to even; block sums, and sums times scales (plain order; mnb_avx512_quantize_a writes the
 * VNNI kernels' even/odd layout) */
void mnb_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa, float* qa_scale,
                    int32_t* qa_sum, float* qa_sum_scaled);

/* AVX-512 VNNI (AVX-512 F, BW, VL and VNNI, checked at run time; isa cap 3): the int8 path for 4-bit weights with
 * integer zero points, on the even/odd A layout; whole 64-byte weight chunks per dpbusd pair */
int mnb_avx512vnni_applies(const MnbProblem* p);
/* mnb_quantize_a into the even/odd layout, where mnb_avx512vnni_applies (the same values) */
void mnb_avx512_quantize_a(const float* a, int64_t M, int64_t K, int64_t block, int64_t stride, int8_t* qa,
                           float* qa_scale, int32_t* qa_sum, float* qa_sum_scaled);
/* the GEMM (mnb_vnni_gemm.c) of y columns [n0, n1) for more than MNB_GEMV_MAX_M rows where its zero-point panel
 * fits the thread buffer (64-byte aligned, MNB_THREAD_BYTES); 0: not taken (the caller's row-group kernel runs) */
int mnb_avx512vnni_gemm(const MnbProblem* p, int64_t n0, int64_t n1, void* buf);
/* y columns [n0, n1) for every row of A, with a thread buffer of MNB_THREAD_BYTES (64-byte aligned) */
void mnb_avx512vnni_columns(const MnbProblem* p, int64_t n0, int64_t n1, void* buf);
/* AVX-512 F, BW and VL (isa cap 3): the fp32 GEMV (M <= MNB_GEMV_MAX_M) for 4-bit weights, block_size a multiple
 * of 32, integer zero points; y columns [n0, n1) */
int mnb_avx512_f32_applies(const MnbProblem* p);
void mnb_avx512_columns_f32(const MnbProblem* p, int64_t n0, int64_t n1);
/* AVX-512 F, BW and VL (isa cap 3), 4-bit weights with integer zero points: the fp32 GEMM's panel (MNB_KC x
 * MNB_PANEL floats, k-major) of columns [nc, nc + width) and K values [kc0, kc0 + kc), scaled, zero beyond width;
 * rows up to kc rounded up to 16 are written */
int mnb_avx512_panel_applies(const MnbProblem* p);
void mnb_avx512_panel_f32(const MnbProblem* p, int64_t nc, int64_t width, int64_t kc0, int64_t kc, float* panel);
/* compute the output columns of panels [p0, p1) (MNB_PANEL columns each) with a thread buffer of
 * MNB_THREAD_BYTES */
void mnb_compute_panels(const MnbProblem* p, int64_t p0, int64_t p1, void* thread_buffer);

/* run fn(ctx, index, count) on `count` threads (the caller's is index 0) and wait for all */
typedef void (*MnbTask)(void* ctx, int index, int count);
void mnb_parallel(int count, MnbTask fn, void* ctx);
/* the intra-op threads for kernels running on the calling thread (see mnb_kernel.c) */
int mnb_threads(void);
/* mnb_threads(), fewer where n items would give a thread fewer than `min_per_thread`; at least 1 */
static inline int mnb_threads_for(int64_t n, int64_t min_per_thread) {
  int threads = mnb_threads();
  if ((int64_t)threads > n / min_per_thread) threads = (int)(n / min_per_thread);
  return threads < 1 ? 1 : threads;
}
/* a run with more than one thread begins (1) or ends (0): the pool's workers stay awake meanwhile (mnb_parallel.c) */
void mnb_pool_hold(int on);
int mnb_pool_holds(void); /* the holds now (tests) */

#endif
