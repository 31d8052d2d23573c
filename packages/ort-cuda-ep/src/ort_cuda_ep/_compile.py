"""NVRTC compilation of the package's ``.cu`` sources, cached in memory and on disk.

The cache key is the SHA-256 of the source (with its included headers), the target arch, the
compile options and the NVRTC version. Each entry keeps the compile log. NVRTC needs no GPU:
``compile_kernel("attention", "sm_90")`` works on a machine without a driver.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import re
import threading

import attrs
import ml_dtypes
import numpy as np

from ._errors import KernelCompileError

__all__ = ["KernelSource", "KERNEL_SOURCES", "CompiledKernel", "KernelCache", "compile_kernel", "default_cache",
           "nvrtc_version", "kernel_dir"]

_KERNEL_DIR = pathlib.Path(__file__).parent / "kernels"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
DEFAULT_OPTIONS: tuple[str, ...] = ("std=c++17",)


def kernel_dir() -> pathlib.Path:
    return _KERNEL_DIR


@attrs.define(frozen=True)
class KernelSource:
    """One ``.cu`` file of the package and the ``extern "C"`` entry points it defines."""

    file: str
    entry_points: tuple[str, ...]

    def text(self) -> str:
        return (_KERNEL_DIR / self.file).read_text()

    def text_with_headers(self) -> str:
        """The source and every header it includes (what the cache key must cover)."""
        seen: list[str] = []
        parts = [self.text()]

        def visit(text: str) -> None:
            for name in _INCLUDE.findall(text):
                if name not in seen:
                    seen.append(name)
                    body = (_KERNEL_DIR / name).read_text()
                    parts.append(f"// --- {name}\n{body}")
                    visit(body)

        visit(parts[0])
        return "\n".join(parts)


FLOAT_SUFFIXES = ("f32", "f16", "bf16")  # float32, float16 and bfloat16 storage; float32 math
DTYPE_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}
_CAST = ("f32", "f16", "bf16", "i32", "i64")


def _typed(*names: str) -> tuple[str, ...]:
    """Each kernel's entry points, one per float storage type: name_f32, name_f16, name_bf16."""
    return tuple(f"{n}_{t}" for n in names for t in FLOAT_SUFFIXES)


_MOVEMENT_ENTRIES = (*(f"strided_copy_b{b}" for b in (1, 2, 4, 8)),
                     *(f"gather_b{b}_{i}" for b in (2, 4, 8) for i in ("i32", "i64")),
                     *(f"cast_{s}_{d}" for s in _CAST for d in _CAST if s != d))

KERNEL_SOURCES: dict[str, KernelSource] = {
    "matmul": KernelSource("matmul.cu", _typed("matmul")),
    "elementwise": KernelSource("elementwise.cu", _typed("binary", "unary")),
    "softmax": KernelSource("softmax.cu", _typed("softmax")),
    "rms_norm": KernelSource("rms_norm.cu", _typed("rms_norm", "skip_rms_norm")),
    "matmul_nbits": KernelSource("matmul_nbits.cu", _typed("mnb4_gemv", "mnb4_tiled", "mnb8_gemv", "mnb8_tiled")),
    "attention": KernelSource("attention.cu", _typed("attn_split", "attn_combine")),
    "movement": KernelSource("movement.cu", _MOVEMENT_ENTRIES),
    "where": KernelSource("where.cu", _typed("where", "isnan")),
    "reduce": KernelSource("reduce.cu", _typed("reduce_rows")),
    "gqa": KernelSource("gqa.cu", _typed("gqa_present", "gqa_attn", "gqa_combine")),
    "conv": KernelSource("conv.cu", _typed("conv2d")),
    "packed_attention": KernelSource("packed_attention.cu", _typed("packed_attn")),
}


@attrs.define(frozen=True)
class CompiledKernel:
    name: str
    arch: str
    options: tuple[str, ...]
    key: str
    cubin: bytes
    log: str
    from_cache: str  # "memory", "disk" or "" (compiled now)
    entry_points: tuple[str, ...]


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); raises KernelCompileError with the fix when libnvrtc is missing."""
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # DynamicLibNotFoundError and friends
        raise KernelCompileError(
            f"NVRTC is not available: {e!r}; install it with `pip install 'nvidia-cuda-nvrtc>=13,<14'` "
            "(a dependency of ort-cuda-ep) or put a CUDA toolkit's libnvrtc on the library path"
        ) from e
    if int(err) != 0:
        raise KernelCompileError(f"nvrtcVersion failed with {err!r}")
    return int(major), int(minor)


def _program_options(arch: str, name: str, options: tuple[str, ...]):
    from cuda.core import ProgramOptions

    kwargs: dict[str, object] = {"arch": arch, "name": name, "include_path": [str(_KERNEL_DIR)]}
    for opt in options:
        key, _, value = opt.partition("=")
        if key == "std":
            kwargs["std"] = value
        elif key == "use_fast_math":
            kwargs["use_fast_math"] = True
        elif key == "lineinfo":
            kwargs["lineinfo"] = True
        elif key == "maxrregcount":
            kwargs["max_register_count"] = int(value)
        elif key == "D":
            kwargs.setdefault("define_macro", []).append(tuple(value.split("=", 1)) if "=" in value else value)  # type: ignore[union-attr]
        else:
            raise KernelCompileError(
                f"unsupported compile option {opt!r}; use std=..., use_fast_math, lineinfo, maxrregcount=N or D=NAME[=VALUE]"
            )
    return ProgramOptions(**kwargs)


_ARCH = re.compile(r"^sm_\d{2,3}[a-z]?$")


class KernelCache:
    """Compiled cubins by key, in memory and (unless ``directory`` is None) on disk."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = pathlib.Path(directory) if directory is not None else None
        self._memory: dict[str, CompiledKernel] = {}
        self._lock = threading.Lock()
        self.compiles = 0  # NVRTC invocations made by this cache (tests read it)

    def key(self, name: str, arch: str, options: tuple[str, ...]) -> str:
        src = KERNEL_SOURCES[name].text_with_headers()
        major, minor = nvrtc_version()
        h = hashlib.sha256()
        for part in (src, arch, "\0".join(options), f"nvrtc-{major}.{minor}"):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def get(self, name: str, arch: str, options: tuple[str, ...] = DEFAULT_OPTIONS) -> CompiledKernel:
        if name not in KERNEL_SOURCES:
            raise KernelCompileError(f"unknown kernel source {name!r}; known: {', '.join(sorted(KERNEL_SOURCES))}")
        if not _ARCH.match(arch):
            raise KernelCompileError(f"malformed arch {arch!r}; expected e.g. 'sm_80' or 'sm_90'")
        options = tuple(options)
        key = self.key(name, arch, options)
        entry_points = KERNEL_SOURCES[name].entry_points
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                return attrs.evolve(hit, from_cache="memory")
            disk = self._load(key)
            if disk is not None:
                cubin, log = disk
                ck = CompiledKernel(name, arch, options, key, cubin, log, "disk", entry_points)
                self._memory[key] = ck
                return ck
            cubin, log = self._compile(name, arch, options)
            self.compiles += 1
            ck = CompiledKernel(name, arch, options, key, cubin, log, "", entry_points)
            self._memory[key] = ck
            self._store(key, cubin, log)
            return ck

    def _compile(self, name: str, arch: str, options: tuple[str, ...]) -> tuple[bytes, str]:
        from cuda.core import Program

        src = KERNEL_SOURCES[name]
        logs = io.StringIO()
        try:
            prog = Program(src.text(), "c++", _program_options(arch, src.file, options))
            try:
                obj = prog.compile("cubin", logs=logs)
            finally:
                prog.close()
        except KernelCompileError:
            raise
        except Exception as e:
            if "nvrtc" in repr(e).lower() and "not found" in repr(e).lower():
                nvrtc_version()  # raises the install hint
            log = logs.getvalue() or str(e)
            raise KernelCompileError(
                f"NVRTC failed to compile {src.file!r} for {arch!r} with options {options!r}; fix the source or the "
                f"options. Compile log:\n{log}",
                log,
            ) from e
        return bytes(obj.code), logs.getvalue()

    def _paths(self, key: str) -> tuple[pathlib.Path, pathlib.Path] | None:
        if self.directory is None:
            return None
        return self.directory / f"{key}.cubin", self.directory / f"{key}.log"

    def _load(self, key: str) -> tuple[bytes, str] | None:
        paths = self._paths(key)
        if paths is None or not paths[0].is_file():
            return None
        log = paths[1].read_text() if paths[1].is_file() else ""
        cubin = paths[0].read_bytes()
        if cubin[:4] != b"\x7fELF":  # truncated or foreign file: recompile rather than load it
            return None
        return cubin, log

    def _store(self, key: str, cubin: bytes, log: str) -> None:
        paths = self._paths(key)
        if paths is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
            tmp = paths[0].with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(cubin)
            tmp.replace(paths[0])
            paths[1].write_text(log)
        except OSError:
            pass  # a read-only cache directory only costs a recompile next time

    def logs(self) -> dict[str, str]:
        """Compile log of every kernel in memory, by ``name@arch``."""
        return {f"{k.name}@{k.arch}": k.log for k in self._memory.values()}


def _default_dir() -> pathlib.Path:
    env = os.environ.get("ORT_CUDA_EP_CACHE_DIR")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "ort-cuda-ep"


_DEFAULT: KernelCache | None = None


def default_cache() -> KernelCache:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = KernelCache(_default_dir())
    return _DEFAULT


def compile_kernel(name: str, arch: str, options: tuple[str, ...] = DEFAULT_OPTIONS) -> CompiledKernel:
    """Compile (or fetch from the cache) one kernel source for ``arch``."""
    return default_cache().get(name, arch, options)
