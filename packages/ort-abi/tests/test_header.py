"""The header is the single source of truth: cdef extraction, packaged copy, constants."""

from __future__ import annotations

import pathlib
import re

import cffi
import pytest

import ort_abi
from ort_abi import _cdef

REPO_HEADER = pathlib.Path(__file__).resolve().parents[3] / "abi" / "include" / "ort_kernel_abi.h"
PACKAGED = pathlib.Path(ort_abi.get_include()) / ort_abi.HEADER_NAME


def test_packaged_header_is_identical_to_canonical():
    assert PACKAGED.is_file(), "ort_abi.get_include() must contain ort_kernel_abi.h"
    if not REPO_HEADER.is_file():
        pytest.skip("not running from the repository checkout")
    assert PACKAGED.read_bytes() == REPO_HEADER.read_bytes(), (
        "packages/ort-abi/src/ort_abi/include/ort_kernel_abi.h differs from abi/include/ort_kernel_abi.h; "
        "reinstall ort-abi (the build copies it) or copy it")


def test_extracted_cdef_parses_with_cffi():
    text = _cdef.read_cdef(PACKAGED)
    ffi = cffi.FFI()
    ffi.cdef(text)
    assert ffi.sizeof("OrtWorkspaceSlot") >= 12
    assert ffi.typeof("OrtEpApi") is ffi.typeof("OrtKernelApi")
    assert "#include" not in text


def _header_define(name: str) -> int:
    m = re.search(rf"#define {name} (\d+)", PACKAGED.read_text())
    assert m, name
    return int(m.group(1))


@pytest.mark.parametrize(("macro", "value"), [
    ("ORT_KERNEL_ABI_VERSION", ort_abi.ABI_VERSION),
    ("ORT_KERNEL_ABI_MIN_VERSION", ort_abi.ABI_MIN_VERSION),
    ("ORT_KERNEL_ABI_VERSION_WORKSPACE", ort_abi.ABI_VERSION_WORKSPACE),
    ("ORT_WORKSPACE_MAX_SLOTS", ort_abi.MAX_SLOTS),
    ("ORT_KERNEL_ABI_VERSION_OUTPUT_SHAPES", ort_abi.ABI_VERSION_OUTPUT_SHAPES),
    ("ORT_KERNEL_ABI_VERSION_FLOAT_LISTS", ort_abi.ABI_VERSION_FLOAT_LISTS),
    ("ORT_OUTPUT_SHAPE_MAX_RANK", ort_abi.MAX_OUTPUT_RANK),
    ("ORT_KERNEL_ABI_VERSION_PREPACK", ort_abi.ABI_VERSION_PREPACK),
    ("ORT_PREPACK_ALIGNMENT", ort_abi.ABI_PREPACK_ALIGNMENT),
    ("ORT_KERNEL_ABI_VERSION", ort_abi.HOST_API.version),
])
def test_python_constants_match_header(macro, value):
    assert _header_define(macro) == value


def test_python_enums_match_header():
    ffi = cffi.FFI()
    ffi.cdef(_cdef.read_cdef(PACKAGED))
    lib = ffi.dlopen(None)
    for code in ort_abi.ErrorCode:
        assert getattr(lib, f"ORT_{code.name}") == code.value
    for state in ort_abi.InputState:
        assert getattr(lib, f"ORT_WORKSPACE_INPUT_{state.name}") == state.value


def test_every_host_function_has_a_python_implementation():
    from ort_abi import _host_c, _host_c_context, _host_c_query

    names = [name for name, _, _ in _cdef.api_functions(_cdef.read_cdef(PACKAGED))]
    assert len(names) == len(set(names)) > 40
    modules = (_host_c, _host_c_context, _host_c_query)
    missing = [n for n in names if not any(callable(getattr(m, n, None)) for m in modules)]
    assert missing == []


GOOD = """
#include <stdint.h>
/* ORT_KERNEL_ABI_CDEF_BEGIN */
#define A_VERSION 3
typedef struct S { int x; } S;
struct Api { uint32_t version; int (*Do)(const char* a,
                                        int b); void (*Free)(void* p); };
/* ORT_KERNEL_ABI_CDEF_END */
#define FN(x) (x)
"""


def test_extract_keeps_only_the_marked_section():
    text = _cdef.extract_cdef(GOOD)
    assert "#define A_VERSION 3" in text and "#include" not in text and "FN(x)" not in text
    assert _cdef.api_functions(text, "Api") == [("Do", "int", "const char* a, int b"), ("Free", "void", "void* p")]


@pytest.mark.parametrize(("text", "fragment"), [
    ("int x;", "exactly one"),
    (GOOD.replace("ORT_KERNEL_ABI_CDEF_END", "ORT_KERNEL_ABI_CDEF_BEGIN"), "exactly one"),
    ("/* ORT_KERNEL_ABI_CDEF_END */\nint x;\n/* ORT_KERNEL_ABI_CDEF_BEGIN */", "comes before"),
    (GOOD.replace("#define A_VERSION 3", "#ifdef X"), "#ifdef X"),
    (GOOD.replace("#define A_VERSION 3", "#define M(a) a"), "#define M(a) a"),
    ("/* ORT_KERNEL_ABI_CDEF_BEGIN */\n\n/* ORT_KERNEL_ABI_CDEF_END */", "empty"),
])
def test_extract_rejects_malformed_headers(text, fragment):
    with pytest.raises(_cdef.CdefError, match=re.escape(fragment)):
        _cdef.extract_cdef(text)


def test_api_functions_needs_the_struct():
    with pytest.raises(_cdef.CdefError, match="NoSuch"):
        _cdef.api_functions("struct Api { int (*f)(void); };", "NoSuch")
