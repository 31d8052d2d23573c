/* float32 ONNX RNN, GRU and LSTM of the ort-cpu-ep C kernels: the math (rnn_math.c) and the ABI kernel
 * (rnn_kernel.c). Per direction, X @ W^T for every step is one sgemm call (W packed as a transposed B) into a
 * workspace block, the biases added row by row; each step's H_{t-1} @ R^T is a GEMV over R's rows as stored
 * (rnn_math.c's rnn_dots: sgemm streams only an untransposed B, and R is N x K). The gate
 * math runs row by row in place; a batch entry at t >= sequence_lens[b] keeps its state and writes zeros to Y.
 * Default activations only (f = Sigmoid, g = h = Tanh): the ABI has no string-list attribute getter, so the
 * kernel refuses an `activations` attribute and the numpy kernel runs such nodes (c_kernel_applies says so). */
#ifndef ORT_CPU_EP_RNN_H_
#define ORT_CPU_EP_RNN_H_

#include <stddef.h>
#include <stdint.h>

enum { RNN_KIND_RNN = 0, RNN_KIND_GRU, RNN_KIND_LSTM };
enum { RNN_FORWARD = 0, RNN_REVERSE, RNN_BIDIRECTIONAL };

/* the node's attributes */
typedef struct RnnAttrs {
  int kind, gates;    /* gates: 1 (RNN), 3 (GRU: z, r, h), 4 (LSTM: i, o, f, c) */
  int64_t hidden;     /* hidden_size (0: from R's shape) */
  int direction, layout;
  int lbr;            /* GRU linear_before_reset */
  int input_forget;   /* LSTM */
  int has_clip;
  float clip;
} RnnAttrs;

/* one problem's extents */
typedef struct RnnDims {
  int64_t seq, batch, input, hidden, dirs, gh; /* gh = gates x hidden */
} RnnDims;

/* the tensors of one call (NULL: an absent optional input or an output not requested) */
typedef struct RnnIo {
  const float *x, *w, *r, *b, *h0, *c0, *p;
  const int32_t* lens;
  float *y, *yh, *yc;
} RnnIo;

/* floats of workspace one call needs (every block aligned to SG_ALIGN_FLOATS, plus one alignment of slack) */
size_t rnn_work_floats(const RnnAttrs* a, const RnnDims* d);
/* direction `dir` of the call (reverse when the attribute says so or for the second of a bidirectional pair),
 * `work` of rnn_work_floats floats */
void rnn_direction(const RnnAttrs* a, const RnnDims* d, const RnnIo* io, int64_t dir, float* work);

#endif
