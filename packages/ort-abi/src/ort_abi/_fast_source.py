"""C source of the bridge's Compute-time fast paths (compiled into `ort_abi._cffi_bridge` by `_ffi_build.py`).

1. A pool of kernel contexts the host fills once per Compute call (`_fast_context.py`): the reads of a
   Compute (input/output counts, inputs, a tensor's data, shape, element type and count) are answered here.
2. Planned steps (`_fast_steps.py`): a run holding a pool context computes a node through
   `ort_abi_fast_step`, which fills the context from the run's value table (each value's description,
   written once by the step that produced it), binds every output to its planned block and each planned
   workspace slot to its block, calls the kernel's Compute, and publishes the outputs it produced back
   into the table. `KernelContext_GetOutput` answers a request for a bound output that matches the plan
   (rank, the static extents on runs with the planned input shapes, bytes within the block), and
   `KernelContext_GetPreallocatedWorkspace` a slot of the step's plan, without entering Python.
3. Control-flow steps (`_fast_control.py`, C in `_fast_control_source.py`): an If or Loop whose bodies are
   steps of the same table, computed by `ort_abi_fast_step_run` like any step.

Every case C does not serve (a handle outside the pool, an index out of range, a request that contradicts
the plan or outgrows its block, an unplanned output or slot, scratch) goes to the Python host function with
the same handle, which answers, validates and reports it exactly as for any other context. No pointer is
dereferenced unless it is exactly a live pool context or one of its described values.
"""

from __future__ import annotations

FAST_PREFIX = "ort_abi_fast_"
HOST_PREFIX = "_ort_host_"
# OrtKernelApi fields answered in C for contexts of the pool (the rest of their cases fall back to Python)
FAST_FUNCTIONS = ("KernelContext_GetInputCount", "KernelContext_GetOutputCount", "KernelContext_GetInput",
                  "KernelContext_GetOutput", "KernelContext_GetPreallocatedWorkspace",
                  "Value_GetTensorData", "Value_GetTensorMutableData", "Value_GetElementType", "Value_GetShape",
                  "Value_GetElementCount")
FAST_INPUTS, FAST_OUTPUTS, FAST_RANK, FAST_POOL, FAST_WORKSPACE, FAST_BUFFERS = 16, 8, 8, 64, 8, 4
# one context of the pool: a header, then inputs [0, FAST_INPUTS) and outputs [FAST_INPUTS, + FAST_OUTPUTS)
FAST_CDEF = f"""
typedef struct {{
  int32_t state;      /* 0: ask Python, 1: a host tensor described here, 2: omitted (NULL),
                         3: an output bound to its planned block, not requested yet */
  int32_t writable;
  int32_t elem_type;
  int32_t rank;
  int64_t count;
  void* data;
  int64_t dims[{FAST_RANK}];
}} ort_abi_fast_value;
typedef struct {{
  int64_t live;       /* 1 while the Compute call that filled it runs */
  int64_t input_count;
  int64_t output_count;
  void* run;          /* the ort_abi_fast_run holding this context, NULL for a single Compute call */
  ort_abi_fast_value values[{FAST_INPUTS + FAST_OUTPUTS}];
}} ort_abi_fast_context;
typedef struct {{
  int32_t value;      /* its entry in the run's value table, -1: none (an unnamed output) */
  int32_t buffer;     /* the run buffer of its planned block, -1: none (Python allocates it) */
  int32_t elem_type;  /* the element type a request gets: the node's declared output type */
  int32_t item_size;
  int64_t offset;
  int64_t capacity;   /* bytes of the planned block */
  int32_t rank;       /* the planned rank, -1: not planned (any rank) */
  int32_t reserved;
  int64_t dims[{FAST_RANK}];  /* planned extents checked on runs with the planned input shapes, -1: symbolic */
}} ort_abi_fast_output;
typedef struct {{
  int32_t slot_id;
  int32_t buffer;
  int64_t offset;
  int64_t size;
}} ort_abi_fast_workspace;
typedef struct {{
  int32_t kind;       /* 1: If (bodies: then, else), 2: Loop, 3: Scan (one body) */
  int32_t body_count;
  const void* bodies[2];  /* each body's first step (an ort_abi_fast_step* into the same table) */
  int32_t counts[2];      /* the steps of each body */
  int32_t* results[2];    /* each body's output entries: If: the node's outputs; Loop: cond, carried, scans;
                             Scan: states, scans */
  int32_t* params;        /* Loop / Scan: the body's input entries (Loop: iteration number, condition, carried;
                             Scan: states, scan slices), -1: unread */
  int32_t param_count;
  int32_t carried;        /* Loop / Scan: the carried values (Loop: inputs 2.., Scan: the states) */
  int32_t* reversed;      /* Scan: per scan input, then per scan output, 1: from the end */
  int32_t* item_sizes;    /* Scan: per scan input, its element's bytes */
  int32_t state_buffer;   /* Loop: 16 bytes of its workspace (the iteration number, then the condition) */
  int32_t reserved;
  int64_t state_offset;
}} ort_abi_fast_control;
typedef struct {{
  OrtKernelImpl* impl;  /* NULL: a control-flow step (`control`) */
  int32_t input_count;
  int32_t output_count;
  int32_t workspace_count;
  int32_t reserved;
  /* input_count / output_count / workspace_count entries each (at most FAST_INPUTS / FAST_OUTPUTS /
   * FAST_WORKSPACE), in arrays the step table owns: a step costs what its node has, not the capacities */
  int32_t* inputs;                     /* value table entries, -1: an omitted input */
  int32_t* input_types;                /* the element type each input must have (else Python runs the step) */
  ort_abi_fast_output* outputs;
  ort_abi_fast_workspace* workspace;
  const ort_abi_fast_control* control;  /* an If / Loop whose bodies are steps of the same table, else NULL */
}} ort_abi_fast_step;
typedef struct {{
  ort_abi_fast_context* context;       /* the pool context the run holds */
  ort_abi_fast_value* values;          /* the run's value table */
  char* bases[{FAST_BUFFERS}];         /* the run's buffers */
  int64_t exact;                       /* the run has the planned input shapes: static extents are checked */
  const ort_abi_fast_step* step;       /* the step computing, NULL between steps */
  int64_t planned_values;              /* outputs answered in C from their planned block */
  int64_t workspace_from_plan;         /* workspace slots answered in C */
  int64_t deferred;                    /* set by the host when a step's Python context was built */
  int64_t checked;                     /* the run's checks (a terminate flag) watch every iteration: control-flow
                                          steps are not started (the host runs them, checking between iterations) */
}} ort_abi_fast_run;
ort_abi_fast_context* ort_abi_fast_slot(int index);
int ort_abi_fast_pool_size(void);
int ort_abi_fast_inputs(void);
int ort_abi_fast_step_run(ort_abi_fast_run* run, const ort_abi_fast_step* step, OrtStatus** status);
int ort_abi_fast_steps_run(ort_abi_fast_run* run, const ort_abi_fast_step* first, int32_t count, int32_t* done,
                           OrtStatus** status);
"""
FAST_SOURCE = f"""
#include <stddef.h>
#include <string.h>
#define FAST_INPUTS {FAST_INPUTS}
#define FAST_OUTPUTS {FAST_OUTPUTS}
#define FAST_RANK {FAST_RANK}
#define FAST_POOL {FAST_POOL}
#define FAST_RELEASE_STATUS(s) {HOST_PREFIX}ReleaseStatus(s)
static ort_abi_fast_context fast_pool[FAST_POOL];
int ort_abi_fast_step_run(ort_abi_fast_run* run, const ort_abi_fast_step* step, OrtStatus** status);
static int fast_control_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status);

ort_abi_fast_context* ort_abi_fast_slot(int index) {{
  return (index >= 0 && index < FAST_POOL) ? &fast_pool[index] : NULL;
}}
int ort_abi_fast_pool_size(void) {{ return FAST_POOL; }}
int ort_abi_fast_inputs(void) {{ return FAST_INPUTS; }}

/* the live pool context at exactly this address, else NULL (any other pointer is never dereferenced) */
static ort_abi_fast_context* fast_context(const void* p) {{
  uintptr_t a = (uintptr_t)p, base = (uintptr_t)fast_pool;
  if (a < base || a >= base + sizeof(fast_pool) || (a - base) % sizeof(ort_abi_fast_context) != 0) return NULL;
  ort_abi_fast_context* c = (ort_abi_fast_context*)p;
  return c->live == 1 ? c : NULL;
}}

/* the described tensor at exactly this address inside a live pool context, else NULL */
static ort_abi_fast_value* fast_value(const void* p) {{
  uintptr_t a = (uintptr_t)p, base = (uintptr_t)fast_pool;
  if (a < base || a >= base + sizeof(fast_pool)) return NULL;
  size_t within = (a - base) % sizeof(ort_abi_fast_context);
  size_t first = offsetof(ort_abi_fast_context, values);
  if (within < first || (within - first) % sizeof(ort_abi_fast_value) != 0) return NULL;
  ort_abi_fast_context* c = (ort_abi_fast_context*)(a - within);
  ort_abi_fast_value* v = (ort_abi_fast_value*)p;
  return (c->live == 1 && v->state == 1) ? v : NULL;
}}

/* the step a live pool context computes for its run, else NULL */
static const ort_abi_fast_step* fast_current(ort_abi_fast_context* c, ort_abi_fast_run** run) {{
  ort_abi_fast_run* r = c != NULL ? (ort_abi_fast_run*)c->run : NULL;
  if (r == NULL || r->context != c || r->step == NULL) return NULL;
  *run = r;
  return r->step;
}}

/* whether a request (dims, rank) for planned output `o` is what the plan holds: the planned rank, the
 * static extents when the run has the planned input shapes, and no more bytes than its block */
static int fast_output_fits(const ort_abi_fast_run* run, const ort_abi_fast_output* o, const int64_t* dims,
                            size_t rank, int64_t* count) {{
  size_t i;
  int64_t n = 1;
  if (o->buffer < 0 || rank > FAST_RANK || (o->rank >= 0 && (size_t)o->rank != rank)) return 0;
  for (i = 0; i < rank; ++i) {{
    if (dims[i] < 0) return 0;
    if (run->exact && o->rank >= 0 && o->dims[i] >= 0 && o->dims[i] != dims[i]) return 0;
    if (dims[i] != 0 && n > (int64_t)(((uint64_t)1 << 62) / (uint64_t)dims[i])) return 0;
    n *= dims[i];
  }}
  if (n > o->capacity / (o->item_size > 0 ? o->item_size : 1)) return 0;
  *count = n;
  return 1;
}}

int ort_abi_fast_step_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {{
  /* 0: computed; 1: not started, an input is not described in the table with its planned type (the host
   * runs the step); 2: computed with an error status in *status; 3: computed with success, but a named
   * output was not answered here (Python answered it, or the kernel never asked: the host checks) */
  ort_abi_fast_context* c = run->context;
  int32_t i, unpublished = 0;
  *status = NULL;
  if (s->impl == NULL) return s->control != NULL && !run->checked ? fast_control_run(run, s, status) : 1;
  for (i = 0; i < s->input_count; ++i) {{
    ort_abi_fast_value* v = &c->values[i];
    int32_t id = s->inputs[i];
    if (id < 0) {{ v->state = 2; continue; }}
    if (run->values[id].state != 1 || run->values[id].elem_type != s->input_types[i]) {{
      for (; i >= 0; --i) c->values[i].state = 0;
      return 1;
    }}
    *v = run->values[id];
    v->writable = 0;
  }}
  for (i = 0; i < s->output_count; ++i) {{
    c->values[FAST_INPUTS + i].state = s->outputs[i].buffer >= 0 ? 3 : 0;
  }}
  c->input_count = s->input_count;
  c->output_count = s->output_count;
  c->run = run;
  run->step = s;
  c->live = 1;
  *status = s->impl->Compute(s->impl, (OrtKernelContext*)c);
  c->live = 0;
  run->step = NULL;
  for (i = 0; i < s->output_count; ++i) {{
    ort_abi_fast_value* v = &c->values[FAST_INPUTS + i];
    if (v->state == 1 && s->outputs[i].value >= 0) {{
      run->values[s->outputs[i].value] = *v;
      run->values[s->outputs[i].value].writable = 0;
    }} else if (s->outputs[i].value >= 0) {{
      unpublished = 1;
    }}
    v->state = 0;
  }}
  for (i = 0; i < s->input_count; ++i) c->values[i].state = 0;
  return *status != NULL ? 2 : unpublished ? 3 : 0;
}}

/* steps first[0..count) in order, in one call: stops after the first step that does not return 0 or whose
 * Python context the host built (run->deferred); *done: the steps before it, each computed and published
 * in C alone. Returns that step's code (0 when all `count` were done). */
int ort_abi_fast_steps_run(ort_abi_fast_run* run, const ort_abi_fast_step* first, int32_t count, int32_t* done,
                           OrtStatus** status) {{
  int32_t k;
  int rc = 0;
  *done = 0;
  *status = NULL;
  run->deferred = 0;
  for (k = 0; k < count; ++k) {{
    rc = ort_abi_fast_step_run(run, first + k, status);
    if (rc != 0 || run->deferred) return rc;
    *done = k + 1;
  }}
  return 0;
}}

static OrtStatus* {FAST_PREFIX}KernelContext_GetInputCount(const OrtKernelContext* context, size_t* out) {{
  ort_abi_fast_context* c = fast_context(context);
  if (c == NULL || out == NULL) return {HOST_PREFIX}KernelContext_GetInputCount(context, out);
  *out = (size_t)c->input_count;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}KernelContext_GetOutputCount(const OrtKernelContext* context, size_t* out) {{
  ort_abi_fast_context* c = fast_context(context);
  if (c == NULL || out == NULL) return {HOST_PREFIX}KernelContext_GetOutputCount(context, out);
  *out = (size_t)c->output_count;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}KernelContext_GetInput(const OrtKernelContext* context, size_t index,
                                                   const OrtValue** out) {{
  ort_abi_fast_context* c = fast_context(context);
  if (c != NULL && out != NULL && index < (size_t)c->input_count && index < FAST_INPUTS) {{
    ort_abi_fast_value* v = &c->values[index];
    if (v->state == 1) {{ *out = (const OrtValue*)v; return NULL; }}
    if (v->state == 2) {{ *out = NULL; return NULL; }}
  }}
  return {HOST_PREFIX}KernelContext_GetInput(context, index, out);
}}
static OrtStatus* {FAST_PREFIX}KernelContext_GetOutput(OrtKernelContext* context, size_t index, const int64_t* dims,
                                                    size_t rank, OrtValue** out) {{
  ort_abi_fast_context* c = fast_context(context);
  ort_abi_fast_run* run = NULL;
  const ort_abi_fast_step* s = fast_current(c, &run);
  if (s != NULL && out != NULL && index < (size_t)c->output_count && index < FAST_OUTPUTS
      && (rank == 0 || dims != NULL) && rank <= FAST_RANK) {{
    ort_abi_fast_value* v = &c->values[FAST_INPUTS + index];
    const ort_abi_fast_output* o = &s->outputs[index];
    int64_t count = 0;
    if (v->state == 3 && fast_output_fits(run, o, dims, rank, &count)) {{
      v->writable = 1;
      v->elem_type = o->elem_type;
      v->rank = (int32_t)rank;
      v->count = count;
      v->data = run->bases[o->buffer] + o->offset;
      if (rank) memcpy(v->dims, dims, rank * sizeof(int64_t));
      v->state = 1;
      run->planned_values += 1;
      *out = (OrtValue*)v;
      return NULL;
    }}
    if (v->state == 1 && v->writable && (size_t)v->rank == rank
        && (rank == 0 || memcmp(v->dims, dims, rank * sizeof(int64_t)) == 0)) {{
      *out = (OrtValue*)v;  /* the same request again: the same tensor */
      return NULL;
    }}
  }}
  return {HOST_PREFIX}KernelContext_GetOutput(context, index, dims, rank, out);
}}
static OrtStatus* {FAST_PREFIX}KernelContext_GetPreallocatedWorkspace(OrtKernelContext* context, int32_t slot_id,
                                                                   size_t requested, void** out) {{
  ort_abi_fast_context* c = fast_context(context);
  ort_abi_fast_run* run = NULL;
  const ort_abi_fast_step* s = fast_current(c, &run);
  int32_t i;
  if (s != NULL && out != NULL) {{
    for (i = 0; i < s->workspace_count; ++i) {{
      const ort_abi_fast_workspace* w = &s->workspace[i];
      if (w->slot_id == slot_id && requested <= (size_t)w->size) {{
        *out = run->bases[w->buffer] + w->offset;
        run->workspace_from_plan += 1;
        return NULL;
      }}
    }}
  }}
  return {HOST_PREFIX}KernelContext_GetPreallocatedWorkspace(context, slot_id, requested, out);
}}
static OrtStatus* {FAST_PREFIX}Value_GetTensorData(const OrtValue* value, const void** out) {{
  ort_abi_fast_value* v = fast_value(value);
  if (v == NULL || out == NULL) return {HOST_PREFIX}Value_GetTensorData(value, out);
  *out = v->data;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}Value_GetTensorMutableData(OrtValue* value, void** out) {{
  ort_abi_fast_value* v = fast_value(value);
  if (v == NULL || out == NULL || !v->writable) return {HOST_PREFIX}Value_GetTensorMutableData(value, out);
  *out = v->data;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}Value_GetElementType(const OrtValue* value, int32_t* out) {{
  ort_abi_fast_value* v = fast_value(value);
  if (v == NULL || out == NULL) return {HOST_PREFIX}Value_GetElementType(value, out);
  *out = v->elem_type;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}Value_GetShape(const OrtValue* value, const int64_t** dims, size_t* rank) {{
  ort_abi_fast_value* v = fast_value(value);
  if (v == NULL || dims == NULL || rank == NULL) return {HOST_PREFIX}Value_GetShape(value, dims, rank);
  *dims = v->dims;
  *rank = (size_t)v->rank;
  return NULL;
}}
static OrtStatus* {FAST_PREFIX}Value_GetElementCount(const OrtValue* value, size_t* out) {{
  ort_abi_fast_value* v = fast_value(value);
  if (v == NULL || out == NULL) return {HOST_PREFIX}Value_GetElementCount(value, out);
  *out = (size_t)v->count;
  return NULL;
}}
"""
