"""cffi out-of-line API-mode build of `ort_abi._cffi_bridge` (run by setup.py's `cffi_modules`).

The cdef is the public header's marked section (see `_cdef.py`) plus private declarations that are
GENERATED from it: one `extern "Python"` host function per field of `struct OrtKernelApi`, and a C
table that points each field at its host function. Adding a function to the header therefore only
needs its Python implementation in one of the `_host_c*.py` modules.

The Compute-time reads, and a planned step's output and workspace requests, are answered in C
(`_fast_source.py` holds that C and says which); every case C does not serve goes to the Python host
function, which validates and reports it exactly as before. The table and the header are unchanged: a
library built against the header sees the same `OrtKernelApi`.
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
def _load_sibling(name: str):
    """A module next to this file, loaded by path: setup.py runs this file outside the package."""
    spec = importlib.util.spec_from_file_location(f"_ort_abi{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_FAST = _load_sibling("_fast_source")
HOST_PREFIX, FAST_PREFIX, FAST_FUNCTIONS = _FAST.HOST_PREFIX, _FAST.FAST_PREFIX, _FAST.FAST_FUNCTIONS
FAST_CDEF, FAST_SOURCE = _FAST.FAST_CDEF, _FAST.FAST_SOURCE + _load_sibling("_fast_control_source").CONTROL_SOURCE


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
    cdef_mod = _load_sibling("_cdef")
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
