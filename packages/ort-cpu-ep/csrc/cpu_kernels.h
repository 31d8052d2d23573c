/* The ort-cpu-ep C kernels beside MatMulNBits: (Skip)SimplifiedLayerNormalization (norm_kernel.c),
 * GroupQueryAttention (gqa_kernel.c), QuickGelu (act_kernel.c: the SiLU of the MLPs), float32 MatMul and
 * FusedMatMul (sgemm_kernel.c, the math in sgemm_math.c) and float32 Softmax over the last axis (softmax_kernel.c); vec_math.h holds the
 * vector exp the elementwise ones share. Each file registers its kernels through the same
 * KernelRegistry_AddKernelV2 as mnb_kernel.c; OrtRegisterKernels (mnb_kernel.c) calls
 * ort_cpu_ep_register_more after its own. */
#ifndef ORT_CPU_EP_CPU_KERNELS_H_
#define ORT_CPU_EP_CPU_KERNELS_H_

#include "ort_kernel_abi.h"

#define CPU_KERNELS_EP "CPUExecutionProvider"

/* hot loops: one clone per x86-64 level, picked at load by the CPU (as mnb_math.c does) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__linux__)
#define CPU_KERNELS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_KERNELS_CLONES
#endif

OrtStatus* ort_cpu_ep_register_norm(const OrtKernelApi* api, OrtKernelRegistry* registry);
OrtStatus* ort_cpu_ep_register_gqa(const OrtKernelApi* api, OrtKernelRegistry* registry);
OrtStatus* ort_cpu_ep_register_activation(const OrtKernelApi* api, OrtKernelRegistry* registry);
OrtStatus* ort_cpu_ep_register_matmul(const OrtKernelApi* api, OrtKernelRegistry* registry);
OrtStatus* ort_cpu_ep_register_softmax(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 Add, Sub, Mul, Div (numpy broadcasting) and Neg, int64/int32 Add, Sub, Mul (arith_kernel.c); int64/int32
 * ReduceSum (arith_reduce.c) */
OrtStatus* ort_cpu_ep_register_arithmetic(const OrtKernelApi* api, OrtKernelRegistry* registry);
OrtStatus* ort_cpu_ep_register_reduce(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* Reshape, Identity, Flatten, (Un)Squeeze, Transpose, Concat, Slice, Gather, Shape, integer Cast (move_*.c, see move.h) */
OrtStatus* ort_cpu_ep_register_movement(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 2-D Conv (conv_kernel.c, conv_math.c; see conv.h) */
OrtStatus* ort_cpu_ep_register_conv(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 Relu, Clip, HardSigmoid, LeakyRelu, HardSwish (act_unary.c, act_math.c) */
OrtStatus* ort_cpu_ep_register_unary(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 MaxPool, AveragePool (2-D), GlobalAveragePool, GlobalMaxPool (pool_kernel.c) */
OrtStatus* ort_cpu_ep_register_pool(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 nearest Resize of H and W (resize_kernel.c) */
OrtStatus* ort_cpu_ep_register_resize(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 LayerNormalization and inference BatchNormalization (affine_norm_kernel.c) */
OrtStatus* ort_cpu_ep_register_affine_norm(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 Sqrt, Reciprocal, Abs, Exp, Tanh (math_unary.c) */
OrtStatus* ort_cpu_ep_register_math_unary(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* Cast between float, double, int8, uint8, int32, int64 and bool (cast_kernel.c) */
OrtStatus* ort_cpu_ep_register_cast(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 ReduceSum, ReduceMean, ReduceMax, ReduceMin over one run of axes (reduce_kernel.c) */
OrtStatus* ort_cpu_ep_register_float_reduce(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* Expand, Equal / Less / Greater / LessOrEqual / GreaterOrEqual, two-input Max / Min with broadcasting (bcast_kernel.c) */
OrtStatus* ort_cpu_ep_register_broadcast(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 Gemm with transA 0 (gemm_kernel.c, the MatMul kernel's sgemm) */
OrtStatus* ort_cpu_ep_register_gemm(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 2-D ConvTranspose (convtranspose_kernel.c: sgemm + col2im) */
OrtStatus* ort_cpu_ep_register_convtranspose(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* float32 RNN, GRU, LSTM with the default activations (rnn_kernel.c, rnn_math.c; see rnn.h) */
OrtStatus* ort_cpu_ep_register_rnn(const OrtKernelApi* api, OrtKernelRegistry* registry);
/* all of the above, in order (the one call the library's entry point makes) */
OrtStatus* ort_cpu_ep_register_more(const OrtKernelApi* api, OrtKernelRegistry* registry);

/* a kernel definition: op, domain, since-version, EP, then `count` type constraints named T<k> binding
 * input k to one element type each (types[k]; 0: unconstrained) */
OrtStatus* cpu_kernels_add(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, const char* domain,
                           int since, const int32_t* types, int count, OrtKernelCreateFunc create,
                           OrtKernelWorkspaceEstimateFunc estimate);
typedef OrtStatus* (*CpuKernelCompute)(OrtKernelImpl* this_ptr, OrtKernelContext* context);
typedef OrtStatus* (*CpuKernelDeclare)(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* input_shapes,
                                       size_t num_inputs, OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots);
/* a zeroed kernel object of `size` bytes whose first member is its OrtKernelImpl: ABI version, Compute and
 * DeclareWorkspaceRequirements set, Release frees it. NULL when out of memory (the caller says which op). */
void* cpu_kernels_new(size_t size, CpuKernelCompute compute, CpuKernelDeclare declare);

/* the Level-2 declaration and the Level-1 estimate of a kernel that needs no workspace (its state fits in
 * registers, or bytes move straight from input to output): no slots, 0 bytes */
OrtStatus* cpu_kernels_declare_none(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                                    OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots);
OrtStatus* cpu_kernels_estimate_none(const OrtEpApi* api, const OrtNode* node, const OrtEp* ep, size_t* out);

/* [*begin, *end): share `index` of `count` of n elements, in whole blocks of `align` elements; the shares cover
 * [0, n) (the last ones may be short or empty) */
static inline void cpu_kernels_share(int64_t n, int index, int count, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t per = ((n + align - 1) / align + count - 1) / count * align, b = per * index;
  *begin = b < n ? b : n;
  *end = b + per < n ? b + per : n;
}

/* one work buffer of `thread_bytes` per thread from workspace slot `slot` (`declared` bytes planned for it): lowers
 * *threads to what the declaration holds, then takes the preallocated slot, else (nothing declared: shapes unknown
 * at planning) the host's scratch buffer; *buffers = the threads' buffers back to back */
OrtStatus* cpu_kernels_thread_buffers(const OrtKernelApi* api, OrtKernelContext* ctx, int32_t slot, size_t declared,
                                      size_t thread_bytes, int* threads, void** buffers);

/* whether inputs [0, count) of a Level-2 declaration are all present with rank `rank` and known extents */
int cpu_kernels_known_dims(const OrtWorkspaceInputShape* shapes, size_t num_inputs, size_t count, size_t rank);
/* the declaration of one workspace slot `slot` of `bytes` (0: none declared); an error naming `op` when no slot is
 * offered */
OrtStatus* cpu_kernels_declare_slot(const OrtKernelApi* api, const char* op, int32_t slot, size_t bytes,
                                    OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots);

/* the workspace bytes of an op over inputs x and w (both rank 4) under its attributes `attrs`; nonzero: the shapes
 * do not fit the attributes, the reason in err */
typedef int (*CpuXwBytes)(const void* attrs, const int64_t* x, const int64_t* w, size_t* bytes, char* err,
                          size_t err_len);
/* Level-1 estimate of such an op: *out = its bytes when the node's inputs 0 and 1 have rank 4 and known extents and
 * fit, else 0 */
OrtStatus* cpu_kernels_estimate_xw(const OrtEpApi* api, const OrtNode* node, const void* attrs, CpuXwBytes bytes,
                                   size_t* out);
/* Level-2 declaration of its one slot `slot`: *declared = the bytes declared (0: shapes unknown at planning); an
 * error naming `op` when the shapes do not fit */
OrtStatus* cpu_kernels_declare_xw(const OrtKernelApi* api, const char* op, int32_t slot, const void* attrs,
                                  CpuXwBytes bytes, const OrtWorkspaceInputShape* shapes, size_t num_inputs,
                                  OrtWorkspaceSlot* slots, size_t max_slots, size_t* num_slots, size_t* declared);

/* integer attribute `name` of a kernel's node: *out = its value, or `dflt` when the node has none; *has (may be
 * NULL) says which */
OrtStatus* cpu_kernels_attr_int(const OrtKernelApi* api, const OrtKernelInfo* info, const char* name, int64_t dflt,
                                int64_t* out, int* has);

/* an ONNX-domain op from `since` on: its schema's type constraint `constraint` (e.g. "T") bound to `type` */
OrtStatus* cpu_kernels_add_onnx(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                const char* constraint, int32_t type, OrtKernelCreateFunc create,
                                OrtKernelWorkspaceEstimateFunc estimate);

/* the same, the constraint bound to each of types[0..count) */
OrtStatus* cpu_kernels_add_onnx_types(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                      const char* constraint, const int32_t* types, int count,
                                      OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate);

/* cpu_kernels_add_onnx for opsets [since, end] only (an op whose semantics changed at end + 1) */
OrtStatus* cpu_kernels_add_onnx_until(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op, int since,
                                      int end, const char* constraint, int32_t type, OrtKernelCreateFunc create,
                                      OrtKernelWorkspaceEstimateFunc estimate);
OrtStatus* cpu_kernels_add_onnx_types_until(const OrtKernelApi* api, OrtKernelRegistry* registry, const char* op,
                                            int since, int end, const char* constraint, const int32_t* types, int count,
                                            OrtKernelCreateFunc create, OrtKernelWorkspaceEstimateFunc estimate);

#endif
