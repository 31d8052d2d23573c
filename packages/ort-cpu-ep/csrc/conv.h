/* float32 2-D Conv (NCHW) of the ort-cpu-ep C kernels: the geometry and math (conv_math.c, conv_depthwise.c) and
 * the ABI kernel (conv_kernel.c). A group's output rows are W_g (Mg x Cg*KH*KW) @ cols (Cg*KH*KW x OH*OW) through the MatMul
 * kernel's sgemm, cols built per chunk of output pixels (never the whole im2col matrix), or X itself for a 1x1
 * stride-1 unpadded convolution; one input channel per group (depthwise) is a direct loop over the zero-padded
 * input plane split by column phase (a column stride of s: s planes, so that each tap reads consecutive floats
 * for consecutive output columns), 4 rows x 32 output columns in registers across every tap. A constant W packed
 * at initialization takes the direct path instead (conv_direct.c): no im2col, NCHWc-style register tiles. */
#ifndef ORT_CPU_EP_CONV_H_
#define ORT_CPU_EP_CONV_H_

#include <stddef.h>
#include <stdint.h>

#define CONV_COLS_FLOATS (1 << 21) /* floats of one thread's im2col chunk at most (8 MiB: 512 pixels up to K = 4096) */
#define CONV_CHUNK 512             /* output pixels per im2col chunk: the weights are read once per chunk */
#define CONV_FEW_PIXELS 8          /* output pixels up to which a Conv is dot products, not the sgemm (conv_math.c) */

typedef float conv_v16 __attribute__((vector_size(64))); /* one zmm on AVX-512, two ymm on AVX2 */

/* the activations a Conv applies to its biased sum (FusedConv's `activation`) and the elementwise kernels run */
enum { CONV_ACT_NONE = 0, CONV_ACT_RELU, CONV_ACT_CLIP, CONV_ACT_HARD_SIGMOID, CONV_ACT_LEAKY_RELU,
       CONV_ACT_HARD_SWISH, CONV_ACT_SIGMOID };

typedef struct ConvAct {
  int kind;
  float a, b; /* Clip min / max; HardSigmoid alpha / beta; LeakyRelu alpha */
} ConvAct;

enum { CONV_AUTO_NOTSET = 0, CONV_AUTO_SAME_UPPER, CONV_AUTO_SAME_LOWER, CONV_AUTO_VALID };

/* the node's attributes as given (0 counts: absent) */
typedef struct ConvAttrs {
  int64_t group;
  int auto_pad;
  size_t n_kernel, n_strides, n_dil, n_pads;
  int64_t kernel[2], strides[2], dil[2], pads[4];
} ConvAttrs;

/* one problem, every extent known */
typedef struct ConvGeom {
  int64_t N, C, H, W, M, KH, KW, OH, OW, group, Cg, Mg;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
  int64_t K;     /* Cg * KH * KW: a group's GEMM depth */
  int64_t chunk; /* output pixels per im2col chunk (0: no im2col, B is X) */
  int depthwise; /* Cg == 1: the direct loop */
} ConvGeom;

/* the geometry of X (rank 4) convolved with W (rank 4) under `a`; 0 on success, else a message in `err` */
int conv_geometry(const ConvAttrs* a, const int64_t* x, const int64_t* w, ConvGeom* g, char* err, size_t err_len);
/* floats of work buffer one thread needs (im2col chunk + sgemm packing; depthwise: the padded plane), aligned to 16 */
size_t conv_thread_floats(const ConvGeom* g);
/* floats of a depthwise plane's padded, phase-split input (conv_depthwise.c) */
size_t conv_padded_floats(const ConvGeom* g);
/* n rounded up to a multiple of 16 */
size_t conv_round16(size_t n);
/* rows m of Y (rows of `ld` floats, columns [0, n)): y = act(y + bias[m] + z) (bias and z may be NULL; z is laid
 * out as y: FusedConv's Z, the residual a ConvAddActivationFusion folded in) */
void conv_bias_act(float* y, int64_t rows, int64_t n, int64_t ld, const float* bias, const float* z, const ConvAct* act);
/* one (image, group) pair's output rows [m0, m1) of the group (its channels) at pixels [n0, n1) by im2col + sgemm,
 * `work` of conv_thread_floats floats; [m0, m1) a block of at least CONV_MIN_SPLIT_ROWS rows, or all Mg */
void conv_gemm_chunk(const ConvGeom* g, const float* x, const float* w, const float* bias, const float* z, float* y,
                     int64_t image, int64_t group, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const ConvAct* act,
                     float* work);
#define CONV_MIN_SPLIT_ROWS 32 /* output channels below which a (pixel chunk) is not split across threads by rows */
/* each tap's offset in a depthwise plane's padded input (conv_depthwise_plane's `tap`: KH * KW values, the same for
 * every plane) */
void conv_depthwise_taps(const ConvGeom* g, int64_t* tap);
/* one (image, output channel) plane of a depthwise convolution, bias and activation applied; `pad` (the thread's
 * conv_thread_floats) takes the zero-padded input plane, split by column phase for a column stride */
void conv_depthwise_plane(const ConvGeom* g, const int64_t* tap, const float* x, const float* w, const float* bias,
                          const float* z, float* y, int64_t image, int64_t m, const ConvAct* act, float* pad);
/* The direct path (conv_direct.c), for weights packed at initialization (ABI v5 pre-packing): blocks of
 * CONV_DIRECT_BLOCK output channels, each tap's channels contiguous; the input read where it lies or from one
 * zero-padded copy of the image (Q, conv_direct_floats: 0 without pads); tiles of R pixels of one output row x 2
 * vectors of output channels. */
#define CONV_DIRECT_MAX_TAPS 1024 /* kernel taps (KH x KW) the direct path takes at most (its offsets on the stack) */
#define CONV_DIRECT_BLOCK 32      /* output channels of a packed weight block */
/* whether weights of shape [M, Cg, KH, KW] in `group` groups are packed for the direct path: not depthwise, 2 to
 * CONV_DIRECT_MAX_TAPS taps (a 1x1 stays on the sgemm), a sum of 8 or more products, a group's last block at most
 * a quarter zeros */
int conv_direct_packs(int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW);
/* floats of the packed weights */
size_t conv_direct_packed_floats(int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW);
/* w [M, Cg, KH, KW] into wp (conv_direct_packed_floats) */
void conv_direct_pack(const float* w, int64_t M, int64_t Cg, int64_t group, int64_t KH, int64_t KW, float* wp);
/* the geometry the direct path runs g as: g itself, or a convolution along H only (W = 1) as one along W (the same
 * memory), whose output rows are long enough for its tiles */
void conv_direct_geometry(const ConvGeom* g, ConvGeom* out);
/* floats of Q for one image: 0 without pads (the input is read in place) */
size_t conv_direct_floats(const ConvGeom* g);
/* Q's input channels [c0, c1) from one image's x */
void conv_direct_prepare(const ConvGeom* g, const float* x, float* q, int64_t c0, int64_t c1);
/* the work items of one image: (group, block, tile channels, output row) */
int64_t conv_direct_items(const ConvGeom* g);
/* items [i0, i1) of one image from q (Q, or the image's x without pads) and the packed weights: y (and z) at the
 * image's output, bias and activation applied */
void conv_direct_rows(const ConvGeom* g, const float* q, const float* wp, const float* bias, const float* z, float* y,
                      int64_t i0, int64_t i1, const ConvAct* act);
/* y[i] = act(x[i]) for i in [0, n) (the elementwise kernels: act.kind != NONE) */
void conv_act_apply(const float* x, float* y, int64_t n, const ConvAct* act);

#endif
