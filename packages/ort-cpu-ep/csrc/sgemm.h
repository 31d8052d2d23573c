/* float32 GEMM of the MatMul C kernel: the blocked math (sgemm_math.c) and its kernel (sgemm_kernel.c). */
#ifndef ORT_CPU_EP_SGEMM_H_
#define ORT_CPU_EP_SGEMM_H_

#include <stddef.h>
#include <stdint.h>

#define SG_KC 256         /* K block: a B micro-panel (SG_KC x 64 floats, 64 KiB) stays near L1 */
#define SG_NC 512         /* columns of B packed per block (SG_KC x SG_NC floats, 512 KiB: L2) */
#define SG_SKINNY_ROWS 6     /* rows up to which B is streamed once (decode) instead of packed */
#define SG_SKINNY_FLOATS 4096 /* floats of C a streamed run keeps in L1 (16 KiB) */
#define SG_ALIGN_FLOATS 16 /* work buffers start on a 64-byte line */

typedef struct SgProblem {
  const float* a; /* M x K, rows lda apart */
  const float* b; /* K x N, rows ldb apart */
  float* c;       /* M x N, rows ldc apart */
  int64_t M, N, K, lda, ldb, ldc;
  int b_trans; /* B stored as N x K, rows ldb apart */
  float alpha; /* C = alpha (A @ B) */
  const float* bp; /* NULL, or B prepacked whole at sgemm_panel_width() (sgemm_pack_b): read in place */
} SgProblem;

/* the micro-kernel's tile width on this CPU: B is packed in panels this wide */
int64_t sgemm_panel_width(void);
/* floats of packing buffer one thread needs for an M x K by K x N problem: 0 for a few rows, else one B block
 * (K and N may be bounds: each is capped by its block size, SG_KC, SG_NC) */
size_t sgemm_thread_floats(int64_t M, int64_t K, int64_t N, int b_trans);
/* whether this problem streams B (a few rows, plain or transposed B) instead of packing it (never from panels
 * alone: b NULL, bp set) */
int sgemm_streams(const SgProblem* p);
/* C[:, n0:n1] = A @ B[:, n0:n1] on the calling thread, with `work` of sgemm_thread_floats(M) floats */
void sgemm_columns(const SgProblem* p, int64_t n0, int64_t n1, float* work);
/* writes B's rows [k0, k0 + kc), columns [n0, n0 + cols) as the micro-kernel's panels of nr columns:
 * bp[q * kc * nr + k * nr + j] = B[k0 + k, n0 + q * nr + j], zeros past cols */
typedef void (*SgPackFn)(void* ctx, int64_t k0, int64_t kc, int64_t n0, int64_t cols, int64_t nr, float* bp);
/* sgemm_columns with B's blocks written by `pack` (a Conv's im2col) instead of read from p->b: never streamed,
 * K > 0; `work` of sgemm_thread_floats(SG_SKINNY_ROWS + 1, K, N, 0) floats */
void sgemm_columns_packed(const SgProblem* p, int64_t n0, int64_t n1, SgPackFn pack, void* ctx, float* work);

/* floats of all of a K x N B packed in panels of nr columns: K blocks of SG_KC rows, each the N columns padded to
 * a multiple of nr (bp[k0 * Npad + q * kc * nr + k * nr + j] = B[k0 + k, q * nr + j], zeros past N) */
size_t sgemm_packed_floats(int64_t K, int64_t N, int64_t nr);
/* writes that layout of B (K x N, or N x K with b_trans; rows ldb apart) to bp */
void sgemm_pack_b(const float* b, int64_t K, int64_t N, int64_t ldb, int b_trans, int64_t nr, float* bp);

#endif
