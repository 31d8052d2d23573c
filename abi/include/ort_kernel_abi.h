/*
 * ort_kernel_abi.h -- the C ABI between the ort runtime (the "host") and kernel libraries.
 *
 * This header is the single source of truth: the ort-abi Python package reads the section between
 * the ORT_KERNEL_ABI_CDEF markers into cffi, and ships a byte-identical copy that
 * `python -c "import ort_abi; print(ort_abi.get_include())"` points at.
 *
 * It mirrors ONNX Runtime's plugin kernel API (OrtKernelImpl, OrtKernelCreateFunc,
 * KernelRegistry_AddKernel) and adds two-level workspace estimation:
 *   Level 1: OrtKernelWorkspaceEstimateFunc, registered with KernelRegistry_AddKernelV2, called at
 *            partitioning time with a node (no kernel instance yet);
 *   Level 2: OrtKernelImpl::DeclareWorkspaceRequirements, called once after kernel creation with
 *            the resolved input shapes; the planner pre-allocates the declared slots and Compute()
 *            fetches them with KernelContext_GetPreallocatedWorkspace (NULL -> fall back to
 *            KernelContext_GetScratchBuffer).
 * and, since version 3, output shapes for ops ONNX does not know (custom domains):
 *   OrtKernelOutputShapeFunc, registered with KernelRegistry_AddKernelV3, called during shape
 *            resolution (before placement) with the input shapes/types; what it returns lets the
 *            nodes after the op resolve, so the session keeps its static memory plan.
 *
 * A kernel library is a shared object that exports two functions:
 *
 *     ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()   // exports OrtKernelLibraryAbiVersion()
 *     ORT_KERNEL_EXPORT OrtStatus* OrtRegisterKernels(const OrtKernelApi* api,
 *                                                     OrtKernelRegistry* registry);
 *
 * (the registration entry may have another name; pass it to load_kernel_library(entry_point=...)).
 *
 * Ownership rules:
 *   - Every OrtStatus* is created by the host (api->CreateStatus) and released exactly once:
 *     a status you return to the host is the host's to release; a status the host returns to you
 *     is yours to release (api->ReleaseStatus) or to return. NULL means success.
 *   - Strings, shapes and pointers the host hands out stay valid for the duration of the call that
 *     received them (the estimate call, the create call, the Compute call); copy what you keep.
 *   - An OrtKernelImpl you create belongs to the host after a successful create call; the host calls
 *     its Release exactly once.
 */
#ifndef ORT_KERNEL_ABI_H_
#define ORT_KERNEL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ORT_KERNEL_EXPORT __declspec(dllexport)
#else
#define ORT_KERNEL_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ORT_KERNEL_ABI_CDEF_BEGIN -- plain C declarations only: no #if/#include, integer #defines ok */

/* The ABI version this header describes. Version 2 added KernelRegistry_AddKernelV2,
 * OrtKernelImpl::DeclareWorkspaceRequirements and KernelContext_GetPreallocatedWorkspace; version 3
 * added KernelRegistry_AddKernelV3 (an output-shape callback); version 4 added Node_GetAttributeFloats and
 * KernelInfo_GetAttributeFloats (FLOATS attributes, e.g. FusedConv's activation_params); version 5 added
 * OrtKernelImpl::DeclarePrePackedBytes and PrePackWeightInto (planned constant-weight pre-packing). Libraries built
 * against 1..4 load unchanged; a library that calls a field added in version v needs a host with api->version >= v. */
#define ORT_KERNEL_ABI_VERSION 5
/* The oldest library / kernel version a host of this version still accepts. */
#define ORT_KERNEL_ABI_MIN_VERSION 1
/* The first version whose OrtKernelImpl has the DeclareWorkspaceRequirements field. */
#define ORT_KERNEL_ABI_VERSION_WORKSPACE 2
/* Capacity of the slot array the host passes to DeclareWorkspaceRequirements. */
#define ORT_WORKSPACE_MAX_SLOTS 8
/* The first version whose host table has KernelRegistry_AddKernelV3. */
#define ORT_KERNEL_ABI_VERSION_OUTPUT_SHAPES 3
/* The first version whose host table has Node_GetAttributeFloats and KernelInfo_GetAttributeFloats. */
#define ORT_KERNEL_ABI_VERSION_FLOAT_LISTS 4
/* The first version whose OrtKernelImpl has DeclarePrePackedBytes and PrePackWeightInto. */
#define ORT_KERNEL_ABI_VERSION_PREPACK 5
/* Alignment of the buffer the host hands PrePackWeightInto. */
#define ORT_PREPACK_ALIGNMENT 64
/* OrtKernelImpl::flags bit (version >= 5 kernels with the pre-packing entries): the kernel computes without an
 * input it packed (*is_packed = 1), as onnxruntime's kernels do once PrePack kept a weight. An initializer that
 * every one of its consumers packs with this flag, and that nothing else reads (not a graph input or output, no
 * other device, no subgraph), is then released by the host: not counted in the plan's weights, not held after
 * packing, and that input is NULL in Compute (read its shape from the packed copy). */
#define ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS 1u
/* The largest output rank an OrtKernelOutputShapeFunc can report. */
#define ORT_OUTPUT_SHAPE_MAX_RANK 16

typedef struct OrtStatus OrtStatus;                     /* opaque, created by the host */
typedef struct OrtNode OrtNode;                         /* opaque graph node (Level-1 estimate) */
typedef struct OrtEp OrtEp;                             /* opaque execution-provider handle */
typedef struct OrtValue OrtValue;                       /* opaque tensor (inputs and outputs) */
typedef struct OrtKernelInfo OrtKernelInfo;             /* opaque, valid during a create call */
typedef struct OrtKernelContext OrtKernelContext;       /* opaque, valid during a Compute call */
typedef struct OrtKernelDef OrtKernelDef;               /* opaque kernel definition */
typedef struct OrtKernelDefBuilder OrtKernelDefBuilder; /* opaque builder of an OrtKernelDef */
typedef struct OrtKernelRegistry OrtKernelRegistry;     /* opaque registry */
typedef struct OrtKernelApi OrtKernelApi;               /* the host API table (below) */
typedef struct OrtKernelApi OrtEpApi;                   /* the same table, under ONNX Runtime's name */
typedef struct OrtKernelImpl OrtKernelImpl;

typedef enum OrtErrorCode {
  ORT_OK = 0,
  ORT_FAIL = 1,
  ORT_INVALID_ARGUMENT = 2,
  ORT_NO_SUCHFILE = 3,
  ORT_NO_MODEL = 4,
  ORT_ENGINE_ERROR = 5,
  ORT_RUNTIME_EXCEPTION = 6,
  ORT_INVALID_PROTOBUF = 7,
  ORT_MODEL_LOADED = 8,
  ORT_NOT_IMPLEMENTED = 9,
  ORT_INVALID_GRAPH = 10,
  ORT_EP_FAIL = 11
} OrtErrorCode;

/* Tensor element types: the ONNX TensorProto.DataType numbers. Passed as int32_t. */
typedef enum OrtTensorElementType {
  ORT_TENSOR_ELEMENT_UNDEFINED = 0,
  ORT_TENSOR_ELEMENT_FLOAT = 1,
  ORT_TENSOR_ELEMENT_UINT8 = 2,
  ORT_TENSOR_ELEMENT_INT8 = 3,
  ORT_TENSOR_ELEMENT_UINT16 = 4,
  ORT_TENSOR_ELEMENT_INT16 = 5,
  ORT_TENSOR_ELEMENT_INT32 = 6,
  ORT_TENSOR_ELEMENT_INT64 = 7,
  ORT_TENSOR_ELEMENT_STRING = 8,
  ORT_TENSOR_ELEMENT_BOOL = 9,
  ORT_TENSOR_ELEMENT_FLOAT16 = 10,
  ORT_TENSOR_ELEMENT_DOUBLE = 11,
  ORT_TENSOR_ELEMENT_UINT32 = 12,
  ORT_TENSOR_ELEMENT_UINT64 = 13,
  ORT_TENSOR_ELEMENT_BFLOAT16 = 16
} OrtTensorElementType;

/* One positional input as DeclareWorkspaceRequirements sees it. Three states:
 *   MISSING   -- an omitted optional input (rank 0, dims NULL);
 *   SHAPED    -- present with a known rank; dims[i] == -1 for an unknown extent; rank 0 (scalar) and
 *                zero extents are preserved as they are;
 *   UNSHAPED  -- present, but not even the rank is known (rank 0, dims NULL). */
typedef enum OrtWorkspaceInputState {
  ORT_WORKSPACE_INPUT_MISSING = 0,
  ORT_WORKSPACE_INPUT_SHAPED = 1,
  ORT_WORKSPACE_INPUT_UNSHAPED = 2
} OrtWorkspaceInputState;

typedef struct OrtWorkspaceInputShape {
  int32_t state;      /* an OrtWorkspaceInputState */
  int32_t elem_type;  /* an OrtTensorElementType; 0 when unknown */
  size_t rank;
  const int64_t* dims;
} OrtWorkspaceInputShape;

/* One output as an OrtKernelOutputShapeFunc reports it. The host passes every entry with
 * state = ORT_WORKSPACE_INPUT_UNSHAPED, elem_type = 0, rank = 0 ("not known"); the callback fills the
 * outputs it knows: state = ORT_WORKSPACE_INPUT_SHAPED, elem_type, rank <= ORT_OUTPUT_SHAPE_MAX_RANK
 * and dims[0..rank) (-1 for an extent it cannot tell). An entry left UNSHAPED falls back to the
 * model's declared value_info. */
typedef struct OrtOutputShape {
  int32_t state;      /* an OrtWorkspaceInputState: SHAPED or UNSHAPED */
  int32_t elem_type;  /* an OrtTensorElementType; 0 keeps the host's (declared) type */
  size_t rank;
  int64_t dims[ORT_OUTPUT_SHAPE_MAX_RANK];
} OrtOutputShape;

/* One workspace buffer a kernel instance needs during Compute. slot_id is chosen by the kernel
 * author, unique within the kernel, in [0, ORT_WORKSPACE_MAX_SLOTS). */
typedef struct OrtWorkspaceSlot {
  int32_t slot_id;
  size_t size_bytes;
} OrtWorkspaceSlot;

/* A kernel instance. Fill ort_version_supported with ORT_KERNEL_ABI_VERSION and flags with 0 (or
 * ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS).
 * Compute and Release are required; the rest may be NULL. A kernel whose ort_version_supported is
 * below ORT_KERNEL_ABI_VERSION_WORKSPACE (its struct ends before DeclareWorkspaceRequirements), or
 * whose DeclareWorkspaceRequirements is NULL, is skipped during workspace planning and gets NULL from
 * KernelContext_GetPreallocatedWorkspace (so it falls back to KernelContext_GetScratchBuffer). */
struct OrtKernelImpl {
  uint32_t ort_version_supported;
  uint32_t flags;
  OrtStatus* (*Compute)(OrtKernelImpl* this_ptr, OrtKernelContext* context);
  void (*Release)(OrtKernelImpl* this_ptr);
  /* Kept for layout compatibility with ONNX Runtime's plugin API; this host never calls it (a kernel that allocates
   * its own packed copy cannot be planned): pre-pack with DeclarePrePackedBytes / PrePackWeightInto. Set NULL. */
  OrtStatus* (*PrePackWeight)(OrtKernelImpl* this_ptr, const OrtValue* tensor, int input_index,
                              int* is_packed);
  /* Since version 2. Write at most max_slots entries into slots and their count into *num_slots.
   * Called once per kernel instance, after creation, before any Compute. */
  OrtStatus* (*DeclareWorkspaceRequirements)(OrtKernelImpl* this_ptr,
                                             const OrtWorkspaceInputShape* input_shapes,
                                             size_t num_inputs, OrtWorkspaceSlot* slots,
                                             size_t max_slots, size_t* num_slots);
  /* Since version 5; both NULL, or both set. Planned pre-packing of constant weights, as onnxruntime's PrePack:
   * for each input that is a constant initializer, the host calls DeclarePrePackedBytes once, before
   * DeclareWorkspaceRequirements and the memory plan's budget check, with the same input shapes;
   * *packed_bytes = 0: that input is not packed. The declared bytes count as the node's weights on its device
   * (plan weight totals, budget checks). Then, before any Compute, PrePackWeightInto is called once for each input
   * with a nonzero declaration, with the initializer and a host-owned buffer of exactly packed_bytes (aligned to
   * ORT_PREPACK_ALIGNMENT) that stays valid until Release: write the packed form there and set *is_packed = 1 to
   * use it in Compute (0: not packed after all; the host may drop the buffer). The initializer stays a Compute
   * input either way, unless flags has ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS (then that input may be NULL once
   * packed). DeclarePrePackedBytes is asked before DeclareWorkspaceRequirements, so that a kernel can leave out
   * the per-call packing workspace a packed input makes unnecessary. An error status fails initialization,
   * naming the node. */
  OrtStatus* (*DeclarePrePackedBytes)(OrtKernelImpl* this_ptr, const OrtWorkspaceInputShape* input_shapes,
                                      size_t num_inputs, int input_index, size_t* packed_bytes);
  OrtStatus* (*PrePackWeightInto)(OrtKernelImpl* this_ptr, const OrtValue* tensor, int input_index, void* packed,
                                  size_t packed_bytes, int* is_packed);
};

/* Creates a kernel instance for one node. state is the create_func_state given at registration. */
typedef OrtStatus* (*OrtKernelCreateFunc)(void* state, const OrtKernelInfo* info,
                                          OrtKernelImpl** kernel_out);

/* Level-1 workspace estimate for a node, without a kernel instance. Read the node through the
 * api's Node_* functions and device properties through its Ep_* functions. Return an error status
 * when no estimate can be made (e.g. a dynamic shape): the host then uses its heuristic. */
typedef OrtStatus* (*OrtKernelWorkspaceEstimateFunc)(const OrtEpApi* api, const OrtNode* node,
                                                     const OrtEp* ep,
                                                     size_t* estimated_workspace_bytes);

/* Output shapes of a node, like ONNX Runtime custom ops' InferOutputShapeFn. Called during shape
 * resolution, before placement, with the node's input shapes (the OrtWorkspaceInputShape states; -1
 * for an extent that is not static) and the node itself (read attributes with Node_GetAttribute*).
 * Fill output_shapes[0..num_outputs) (see OrtOutputShape). Return an error status when the inputs
 * are invalid for the op: the host reports it and uses the declared value_info instead. */
typedef OrtStatus* (*OrtKernelOutputShapeFunc)(const OrtKernelApi* api, const OrtNode* node,
                                               const OrtWorkspaceInputShape* input_shapes,
                                               size_t num_inputs, OrtOutputShape* output_shapes,
                                               size_t num_outputs);

/* The registration entry a kernel library exports (default name: OrtRegisterKernels). */
typedef OrtStatus* (*OrtRegisterKernelsFunc)(const OrtKernelApi* api, OrtKernelRegistry* registry);

/* The ABI version entry every kernel library exports (see ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION). */
typedef uint32_t (*OrtKernelLibraryAbiVersionFunc)(void);

/* The host API. New functions are only ever appended; check api->version before calling one that
 * is newer than the oldest host you support. */
struct OrtKernelApi {
  uint32_t version; /* the host's ORT_KERNEL_ABI_VERSION */

  /* ---- statuses ---- */
  OrtStatus* (*CreateStatus)(OrtErrorCode code, const char* msg);
  OrtErrorCode (*GetErrorCode)(const OrtStatus* status);
  const char* (*GetErrorMessage)(const OrtStatus* status);
  void (*ReleaseStatus)(OrtStatus* status);

  /* ---- kernel definitions and the registry ---- */
  OrtStatus* (*CreateKernelDefBuilder)(OrtKernelDefBuilder** builder_out);
  void (*ReleaseKernelDefBuilder)(OrtKernelDefBuilder* builder);
  OrtStatus* (*KernelDefBuilder_SetOperatorType)(OrtKernelDefBuilder* builder, const char* op_type);
  OrtStatus* (*KernelDefBuilder_SetDomain)(OrtKernelDefBuilder* builder, const char* domain);
  /* end == 0: open-ended (every later opset) */
  OrtStatus* (*KernelDefBuilder_SetSinceVersion)(OrtKernelDefBuilder* builder, int start, int end);
  OrtStatus* (*KernelDefBuilder_SetExecutionProvider)(OrtKernelDefBuilder* builder,
                                                      const char* ep_name);
  /* name: the op schema's type parameter (e.g. "T"). For an op without an ONNX schema (custom
   * domains): "T<k>" (e.g. "T0", "T1") binds input k; any other name binds every present input that
   * no "T<k>" binds. The host declines nodes whose inputs break a constraint (saying which) and
   * checks the inputs again at Compute: a kernel registered for FLOAT never receives DOUBLE. */
  OrtStatus* (*KernelDefBuilder_AddTypeConstraint)(OrtKernelDefBuilder* builder, const char* name,
                                                   const int32_t* elem_types, size_t count);
  OrtStatus* (*KernelDefBuilder_Build)(OrtKernelDefBuilder* builder, OrtKernelDef** def_out);
  void (*ReleaseKernelDef)(OrtKernelDef* def);
  OrtStatus* (*KernelRegistry_AddKernel)(OrtKernelRegistry* registry, const OrtKernelDef* def,
                                         OrtKernelCreateFunc create_func, void* create_func_state);
  /* estimate_func may be NULL */
  OrtStatus* (*KernelRegistry_AddKernelV2)(OrtKernelRegistry* registry, const OrtKernelDef* def,
                                           OrtKernelCreateFunc create_func, void* create_func_state,
                                           OrtKernelWorkspaceEstimateFunc estimate_func);

  /* ---- node queries (Level-1 estimate) ---- */
  OrtStatus* (*Node_GetName)(const OrtNode* node, const char** out);
  OrtStatus* (*Node_GetOperatorType)(const OrtNode* node, const char** out);
  OrtStatus* (*Node_GetDomain)(const OrtNode* node, const char** out);
  OrtStatus* (*Node_GetInputCount)(const OrtNode* node, size_t* out);
  OrtStatus* (*Node_GetOutputCount)(const OrtNode* node, size_t* out);
  /* *present = 0 for an omitted optional input */
  OrtStatus* (*Node_HasInput)(const OrtNode* node, size_t index, int* present);
  /* *shape = NULL (and *rank = 0) when the input is missing or any dimension is not static */
  OrtStatus* (*Node_GetInputShape)(const OrtNode* node, size_t index, const int64_t** shape,
                                   size_t* rank);
  OrtStatus* (*Node_GetInputElementType)(const OrtNode* node, size_t index, int32_t* out);
  OrtStatus* (*Node_HasAttribute)(const OrtNode* node, const char* name, int* out);
  /* An absent attribute: the pointer getters (Ints, String) return OK with *values / *out = NULL (and
   * *count = 0), so an optional attribute needs no HasAttribute call; the scalar getters (Int, Float)
   * return ORT_INVALID_ARGUMENT (ask Node_HasAttribute first). An attribute of another type is
   * ORT_INVALID_ARGUMENT for every getter. The KernelInfo_GetAttribute* getters behave the same. */
  OrtStatus* (*Node_GetAttributeInt)(const OrtNode* node, const char* name, int64_t* out);
  OrtStatus* (*Node_GetAttributeInts)(const OrtNode* node, const char* name, const int64_t** values,
                                      size_t* count);
  OrtStatus* (*Node_GetAttributeFloat)(const OrtNode* node, const char* name, float* out);
  OrtStatus* (*Node_GetAttributeString)(const OrtNode* node, const char* name, const char** out);

  /* ---- the execution provider (device properties for estimates) ---- */
  OrtStatus* (*Ep_GetName)(const OrtEp* ep, const char** out);
  OrtStatus* (*Ep_GetDeviceType)(const OrtEp* ep, const char** out);
  OrtStatus* (*Ep_GetDeviceId)(const OrtEp* ep, int32_t* out);
  /* integer device property, e.g. "multi_processor_count"; ORT_INVALID_ARGUMENT when unknown */
  OrtStatus* (*Ep_GetDeviceProperty)(const OrtEp* ep, const char* key, int64_t* out);

  /* ---- kernel info (during the create call) ---- */
  OrtStatus* (*KernelInfo_GetNodeName)(const OrtKernelInfo* info, const char** out);
  OrtStatus* (*KernelInfo_GetOperatorType)(const OrtKernelInfo* info, const char** out);
  OrtStatus* (*KernelInfo_GetInputCount)(const OrtKernelInfo* info, size_t* out);
  OrtStatus* (*KernelInfo_GetOutputCount)(const OrtKernelInfo* info, size_t* out);
  OrtStatus* (*KernelInfo_HasAttribute)(const OrtKernelInfo* info, const char* name, int* out);
  OrtStatus* (*KernelInfo_GetAttributeInt)(const OrtKernelInfo* info, const char* name,
                                           int64_t* out);
  OrtStatus* (*KernelInfo_GetAttributeInts)(const OrtKernelInfo* info, const char* name,
                                            const int64_t** values, size_t* count);
  OrtStatus* (*KernelInfo_GetAttributeFloat)(const OrtKernelInfo* info, const char* name,
                                             float* out);
  OrtStatus* (*KernelInfo_GetAttributeString)(const OrtKernelInfo* info, const char* name,
                                              const char** out);
  /* *out = NULL when the host has no EP identity for this kernel */
  OrtStatus* (*KernelInfo_GetEp)(const OrtKernelInfo* info, const OrtEp** out);

  /* ---- kernel context (during Compute) ---- */
  OrtStatus* (*KernelContext_GetInputCount)(const OrtKernelContext* context, size_t* out);
  OrtStatus* (*KernelContext_GetOutputCount)(const OrtKernelContext* context, size_t* out);
  /* *out = NULL for an omitted optional input */
  OrtStatus* (*KernelContext_GetInput)(const OrtKernelContext* context, size_t index,
                                       const OrtValue** out);
  /* allocates (or returns the planned) output tensor of this shape; its element type is the
   * node's declared output type */
  OrtStatus* (*KernelContext_GetOutput)(OrtKernelContext* context, size_t index,
                                        const int64_t* dims, size_t rank, OrtValue** out);
  /* (The host checks dims against the planned shape of the output where that is known, and returns
   * ORT_INVALID_ARGUMENT naming the node, the index and both shapes on a mismatch; a symbolic planned
   * extent accepts any value. The kernel's Compute fails even if it drops that status.) */
  /* host memory valid until Compute returns */
  OrtStatus* (*KernelContext_GetScratchBuffer)(OrtKernelContext* context, size_t nbytes,
                                               void** out);
  /* *out = NULL when nothing was planned for slot_id or requested_bytes exceeds the declared size */
  OrtStatus* (*KernelContext_GetPreallocatedWorkspace)(OrtKernelContext* context, int32_t slot_id,
                                                       size_t requested_bytes, void** out);
  OrtStatus* (*Value_GetTensorData)(const OrtValue* value, const void** out);
  /* outputs only: inputs are read-only */
  OrtStatus* (*Value_GetTensorMutableData)(OrtValue* value, void** out);
  OrtStatus* (*Value_GetElementType)(const OrtValue* value, int32_t* out);
  OrtStatus* (*Value_GetShape)(const OrtValue* value, const int64_t** dims, size_t* rank);
  OrtStatus* (*Value_GetElementCount)(const OrtValue* value, size_t* out);

  /* ---- since version 3 ---- */
  /* KernelRegistry_AddKernelV2 plus an output-shape callback (shape_func may be NULL) */
  OrtStatus* (*KernelRegistry_AddKernelV3)(OrtKernelRegistry* registry, const OrtKernelDef* def,
                                           OrtKernelCreateFunc create_func, void* create_func_state,
                                           OrtKernelWorkspaceEstimateFunc estimate_func,
                                           OrtKernelOutputShapeFunc shape_func);

  /* ---- since version 4 ---- */
  /* a FLOATS attribute, as the Ints getters: absent is OK with *values = NULL and *count = 0; the values stay
   * valid while the node (estimate) or the kernel info (create call) does */
  OrtStatus* (*Node_GetAttributeFloats)(const OrtNode* node, const char* name, const float** values,
                                        size_t* count);
  OrtStatus* (*KernelInfo_GetAttributeFloats)(const OrtKernelInfo* info, const char* name,
                                              const float** values, size_t* count);
};

/* ORT_KERNEL_ABI_CDEF_END */

/* Put this once in one source file of a kernel library: it exports the ABI version the library
 * was compiled against, which the host checks before calling the registration entry. */
#define ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION()                              \
  ORT_KERNEL_EXPORT uint32_t OrtKernelLibraryAbiVersion(void) {             \
    return ORT_KERNEL_ABI_VERSION;                                          \
  }

/* Return early with the status of a host call when it failed. */
#define ORT_KERNEL_RETURN_IF_ERROR(expr) \
  do {                                   \
    OrtStatus* ort_status_ = (expr);     \
    if (ort_status_ != NULL) {           \
      return ort_status_;                \
    }                                    \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* ORT_KERNEL_ABI_H_ */
