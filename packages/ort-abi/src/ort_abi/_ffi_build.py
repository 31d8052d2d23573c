"""cffi out-of-line API-mode build of `ort_abi._cffi_bridge` (run by setup.py's `cffi_modules`).

The cdef is the public header's marked section (see `_cdef.py`) plus private declarations that are
GENERATED from it: one `extern "Python"` host function per field of `struct OrtKernelApi`, and a C
table that points each field at its host function. Adding a function to the header therefore only
needs its Python implementation in one of the `_host_c*.py` modules.

The Compute-time reads (input/output counts, inputs, and a tensor's data, shape, element type and
count) are answered in C from a context the host fills once per Compute call (`_fast_context.py`),
without entering Python; every case that C does not serve (a handle outside the pool, an index out of
range, an input that is not a C-contiguous host array, writing to an input) goes to the Python host
function, which validates and reports it exactly as before. The table and the header are unchanged:
a library built against the header sees the same `OrtKernelApi`.
"""

from __future__ import annotations

import filecmp
import importlib.util
import pathlib
import shutil
import sys

import cffi

HERE = pathlib.Path(__file__).resolve().parent
PACKAGED_INCLUDE = HERE / "include"
# <repo>/abi/include/ort_kernel_abi.h when building in-tree (packages/ort-abi/src/ort_abi -> <repo>)
REPO_HEADER = (HERE.parents[3] if len(HERE.parents) > 3 else HERE) / "abi" / "include" / "ort_kernel_abi.h"
HOST_PREFIX = "_ort_host_"
FAST_PREFIX = "ort_abi_fast_"
# OrtKernelApi fields answered in C for contexts of the pool (the rest of their cases fall back to Python)
FAST_FUNCTIONS = ("KernelContext_GetInputCount", "KernelContext_GetOutputCount", "KernelContext_GetInput",
                  "Value_GetTensorData", "Value_GetTensorMutableData", "Value_GetElementType", "Value_GetShape",
                  "Value_GetElementCount")
FAST_INPUTS, FAST_OUTPUTS, FAST_RANK, FAST_POOL = 16, 8, 16, 64
# one context of the pool: a header, then inputs [0, FAST_INPUTS) and outputs [FAST_INPUTS, + FAST_OUTPUTS)
FAST_CDEF = f"""
typedef struct {{
  int32_t state;      /* 0: ask Python, 1: a host tensor described here, 2: omitted (NULL) */
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
  ort_abi_fast_value values[{FAST_INPUTS + FAST_OUTPUTS}];
}} ort_abi_fast_context;
ort_abi_fast_context* ort_abi_fast_slot(int index);
int ort_abi_fast_pool_size(void);
int ort_abi_fast_inputs(void);
"""
FAST_SOURCE = f"""
#include <stddef.h>
#define FAST_INPUTS {FAST_INPUTS}
#define FAST_POOL {FAST_POOL}
static ort_abi_fast_context fast_pool[FAST_POOL];

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


def _load_cdef_module():
    spec = importlib.util.spec_from_file_location("_ort_abi_cdef", HERE / "_cdef.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sync_header() -> pathlib.Path:
    """Copy the canonical header into the package when building in-tree; return the packaged copy."""
    packaged = PACKAGED_INCLUDE / "ort_kernel_abi.h"
    if REPO_HEADER.is_file() and (not packaged.is_file() or not filecmp.cmp(REPO_HEADER, packaged, shallow=False)):
        PACKAGED_INCLUDE.mkdir(exist_ok=True)
        shutil.copyfile(REPO_HEADER, packaged)
    if not packaged.is_file():
        raise FileNotFoundError(f"{packaged} is missing and no canonical header at {REPO_HEADER}; "
                                "build from the repository checkout or an sdist that contains it")
    return packaged


def host_function_decls(cdef_mod, public_cdef: str) -> list[tuple[str, str]]:
    """(field name, C declaration of its host function) for every function field of OrtKernelApi."""
    return [(name, f"{ret} {HOST_PREFIX}{name}({params})")
            for name, ret, params in cdef_mod.api_functions(public_cdef)]


def make_ffibuilder() -> cffi.FFI:
    cdef_mod = _load_cdef_module()
    header = sync_header()
    public = cdef_mod.read_cdef(header)
    decls = host_function_decls(cdef_mod, public)
    missing = set(FAST_FUNCTIONS) - {name for name, _ in decls}
    if missing:
        raise ValueError(f"FAST_FUNCTIONS {sorted(missing)!r} are not fields of OrtKernelApi in {header}")
    private = "\n".join(f'extern "Python" {decl};' for _, decl in decls) + """
const OrtKernelApi* ort_abi_host_api(void);
""" + FAST_CDEF + """
void* ort_abi_dlopen(const char* path, char* err, size_t errlen);
void* ort_abi_dlsym(void* handle, const char* name, char* err, size_t errlen);
"""
    table = ",\n".join(f"  .{name} = {FAST_PREFIX if name in FAST_FUNCTIONS else HOST_PREFIX}{name}"
                        for name, _ in decls)
    forward = "\n".join(f"static {decl};" for _, decl in decls)
    source = f"""
#include <stdio.h>
#include <dlfcn.h>
#include "ort_kernel_abi.h"

{forward}
{FAST_CDEF.split("ort_abi_fast_context* ort_abi_fast_slot")[0]}
{FAST_SOURCE}

static const OrtKernelApi ort_abi_host_api_table = {{
  .version = ORT_KERNEL_ABI_VERSION,
{table}
}};

const OrtKernelApi* ort_abi_host_api(void) {{ return &ort_abi_host_api_table; }}

void* ort_abi_dlopen(const char* path, char* err, size_t errlen) {{
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {{
    const char* e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "dlopen failed");
  }}
  return handle;
}}

void* ort_abi_dlsym(void* handle, const char* name, char* err, size_t errlen) {{
  dlerror();
  void* sym = dlsym(handle, name);
  if (sym == NULL) {{
    const char* e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "symbol is NULL");
  }}
  return sym;
}}
"""
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(public + private)
    ffibuilder.set_source(
        "ort_abi._cffi_bridge",
        source,
        include_dirs=[str(PACKAGED_INCLUDE)],
        libraries=["dl"] if sys.platform.startswith("linux") else [],
        # a failed compile must not fail the install: the pure-Python parts still work and C features
        # raise CFeaturesUnavailableError saying how to fix it
        optional=True,
    )
    return ffibuilder


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
