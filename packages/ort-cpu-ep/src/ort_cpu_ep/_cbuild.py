"""Build the C kernel library of ort-cpu-ep (`csrc/*.c`) into a plain shared object loaded through ort-abi.

Standard library only: setup.py runs it at install (building into the wheel), and developers build in place:

    python packages/ort-cpu-ep/src/ort_cpu_ep/_cbuild.py      # -> src/ort_cpu_ep/libort_cpu_ep_kernels.so

The library is a kernel library like any third party's: compiled against `ort_kernel_abi.h` (the repository's
`abi/include`, else the installed ort-abi's `get_include()`), loaded with `ort_abi.load_kernel_library`.

Flags: `-O3 -std=gnu11 -fPIC`, no `-march`: the hot functions carry `target_clones` for x86-64-v3 (AVX2, FMA)
and x86-64-v4 (AVX-512) on GCC >= 11, picked at load by the CPU, so the library runs on any CPU of the
architecture it was built for. `-fopenmp` when the compiler accepts it (threads from a persistent pool),
else pthreads. No compiler, or a failing one: no library; the provider then uses the numpy MatMulNBits, and
`ortrun kernels` says so.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

# shlex, subprocess, sysconfig and tempfile are imported where a build needs them: the provider imports this
# module for LIBRARY_NAME at every session import, which builds nothing

LIBRARY_NAME = "libort_cpu_ep_kernels.so"
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_PROJECT_DIR = _PACKAGE_DIR.parents[1]  # packages/ort-cpu-ep
CFLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall"]


class BuildFailed(Exception):
    """The C kernel library could not be built (no compiler, no header, a compile error)."""


def sources(project_dir: pathlib.Path = _PROJECT_DIR) -> list[pathlib.Path]:
    return sorted((project_dir / "csrc").glob("*.c"))


def include_dir(project_dir: pathlib.Path = _PROJECT_DIR) -> pathlib.Path:
    """The folder holding ort_kernel_abi.h: the repository's abi/include, else the installed ort-abi's."""
    repo = project_dir.parents[1] / "abi" / "include"
    if (repo / "ort_kernel_abi.h").is_file():
        return repo
    try:
        import ort_abi
    except ImportError as e:
        raise BuildFailed("ort_kernel_abi.h not found: neither the repository's abi/include nor an installed "
                          "ort-abi (pip install ./packages/ort-abi first)") from e
    return pathlib.Path(ort_abi.get_include())


def compiler() -> list[str]:
    """The C compiler: $CC, else the one Python was built with, else cc / gcc / clang on PATH."""
    import shlex
    import sysconfig

    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC")):
        if candidate:
            cmd = shlex.split(candidate)
            if cmd and shutil.which(cmd[0]):
                return cmd
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    raise BuildFailed("no C compiler found ($CC, Python's CC, cc, gcc, clang)")


def _accepts(cc: list[str], flag: str) -> bool:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "probe.c"
        src.write_text("#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n")
        r = subprocess.run([*cc, flag, str(src), "-o", str(pathlib.Path(tmp) / "probe")], capture_output=True)
        return r.returncode == 0


def build(dest_dir: pathlib.Path = _PACKAGE_DIR, project_dir: pathlib.Path = _PROJECT_DIR) -> tuple[pathlib.Path, str]:
    """Compile the library into dest_dir; returns (path, a line describing the build). Raises BuildFailed."""
    import shlex
    import subprocess

    cc = compiler()
    srcs = sources(project_dir)
    if not srcs:
        raise BuildFailed(f"no C sources under {project_dir / 'csrc'}")
    inc = include_dir(project_dir)
    openmp = _accepts(cc, "-fopenmp")
    flags = [*CFLAGS, "-fopenmp" if openmp else "-pthread"]
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / LIBRARY_NAME
    tmp_out = dest_dir / (LIBRARY_NAME + ".tmp")
    cmd = [*cc, *flags, f"-I{inc}", *map(str, srcs), "-o", str(tmp_out), "-lm"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildFailed(f"cannot run the C compiler {cc[0]!r}: {e}") from e
    if r.returncode != 0:
        tmp_out.unlink(missing_ok=True)
        raise BuildFailed(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stderr.strip()[-2000:]}")
    tmp_out.replace(out)  # atomic: a running process keeps the old file
    return out, f"built {out} with {cc[0]} ({'OpenMP' if openmp else 'pthreads'} threads)"


def build_or_explain(dest_dir: pathlib.Path = _PACKAGE_DIR, project_dir: pathlib.Path = _PROJECT_DIR) -> str:
    """build(), never raising: the line to print at install either way."""
    try:
        return "ort-cpu-ep: " + build(dest_dir, project_dir)[1]
    except BuildFailed as e:
        return (f"ort-cpu-ep: C kernels NOT built ({e}); the numpy kernels are used instead "
                "(`ortrun kernels` shows which)")


if __name__ == "__main__":
    line = build_or_explain()
    print(line)
    sys.exit(0 if "NOT built" not in line else 1)
