"""Kernel library files are checked before dlopen: a truncated or foreign file is a KernelLibraryError
naming the path and the problem, never a SIGBUS inside the dynamic loader."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from ort_abi import KernelLibraryError, KernelRegistry, load_kernel_library

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF checks run on Linux only")


def _ehdr(data: bytes) -> dict[str, int]:
    names = ("type", "machine", "version", "entry", "phoff", "shoff", "flags", "ehsize", "phentsize", "phnum",
             "shentsize", "shnum", "shstrndx")
    return dict(zip(names, struct.unpack_from("<HHIQQQIHHHHHH", data, 16)))


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _first_load_segment(data: bytes) -> int:
    h = _ehdr(data)
    for i in range(h["phnum"]):
        at = h["phoff"] + i * h["phentsize"]
        if struct.unpack_from("<I", data, at)[0] == 1:
            return at
    raise AssertionError("no PT_LOAD segment")


def test_truncated_libraries_raise_instead_of_killing_the_process(example_lib, tmp_path):
    """Each cut is loaded in a child process: on the unchecked loader these die with SIGBUS (-7)."""
    data = example_lib.read_bytes()
    cuts = sorted({10, 64, 200, 1000, len(data) // 4, len(data) // 2, len(data) - 4096, len(data) - 1})
    paths = []
    for cut in cuts:
        path = tmp_path / f"libcut{cut}.so"
        path.write_bytes(data[:cut])
        paths.append(str(path))
    script = (
        "import sys, ort_abi\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        ort_abi.load_kernel_library(p, ort_abi.KernelRegistry())\n"
        "        print('LOADED', p)\n"
        "    except ort_abi.KernelLibraryError as e:\n"
        "        print('REFUSED', e)\n")
    proc = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert len(lines) == len(paths) and all(line.startswith("REFUSED") for line in lines), proc.stdout
    for path, line in zip(paths, lines):
        assert repr(path) in line and ("truncated" in line or "not an ELF file" in line), line


@pytest.mark.parametrize(("patch", "fragment"), [
    (lambda d: _patched(d, 4, "B", 1), "32-bit ELF file"),
    (lambda d: _patched(d, 5, "B", 2), "byte order is big"),
    (lambda d: _patched(d, 16, "<H", 2), "not a shared object .*e_type=2"),
    (lambda d: _patched(d, 18, "<H", 0xB7 if struct.unpack_from("<H", d, 18)[0] != 0xB7 else 0x3E),
     "another processor"),
    (lambda d: _patched(d, 40, "<Q", len(d) - 10), "section header table .* ends past the end of the file"),
    (lambda d: _patched(d, 32, "<Q", len(d) - 10), "program header table .* ends past the end of the file"),
    (lambda d: _patched(d, _first_load_segment(d) + 32, "<Q", len(d) * 4), "PT_LOAD segment .* ends past the end"),
    (lambda d: b"this is not a shared library\n" * 10, r"not an ELF file \(first bytes b'this'"),
])
def test_foreign_or_corrupt_headers_are_named(example_lib, tmp_path, patch, fragment):
    path = tmp_path / "libbad.so"
    path.write_bytes(patch(example_lib.read_bytes()))
    with pytest.raises(KernelLibraryError, match=f"cannot load kernel library '{path}': .*{fragment}"):
        load_kernel_library(path, KernelRegistry())


def test_intact_library_loads_from_a_bytes_path(example_lib):
    lib = load_kernel_library(os.fsencode(example_lib), KernelRegistry())
    assert lib.entries and lib.path == example_lib


@pytest.mark.parametrize("path", [b"/tmp/kernels-\xff\xfe.so", "/tmp/kernels-\udcff.so", 42])
def test_path_that_is_not_utf8_text_is_a_typed_error(path):
    with pytest.raises(KernelLibraryError, match="not valid UTF-8|not a path"):
        load_kernel_library(path, KernelRegistry())


@pytest.mark.parametrize("name", ["a" * 300 + ".so", "/".join(["d" * 200] * 30) + "/lib.so"])
def test_a_path_the_os_cannot_look_up_is_a_kernel_library_error(tmp_path, name):
    with pytest.raises(KernelLibraryError, match=r"kernel library path .* cannot be looked up \(File name too long\)"):
        load_kernel_library(str(tmp_path / name), KernelRegistry())


def test_a_decline_may_name_an_empty_op_type():
    from ort_abi import Declined

    d = Declined("blank", "", "", 17, "op '' is no operator", "SomeEP", "its registered ops", "fix the model")
    assert d.op_type == "" and not d.supported
    with pytest.raises(TypeError, match="missing op_type"):
        Declined("blank", None, "", 17, "r", "SomeEP", "a", "b")
