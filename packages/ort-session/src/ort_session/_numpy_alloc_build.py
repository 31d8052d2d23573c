"""Build `ort_session._numpy_alloc` (the counting numpy allocator, `_numpy_alloc.c`) into a CPython extension.

Standard library and numpy's headers only: setup.py runs it at install (building into the wheel), and
developers build in place:

    python packages/ort-session/src/ort_session/_numpy_alloc_build.py   # -> src/ort_session/_numpy_alloc*.so

No compiler, no Python or numpy headers, or a failing build: no extension. `measure_host_allocations` then
falls back to tracemalloc's numpy domain (`ort_session._traced`), and `last_run_stats.traced_by` says which
measure was used.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import sysconfig

MODULE = "_numpy_alloc"
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
CFLAGS = ["-O2", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall"]


class BuildFailed(Exception):
    """The extension could not be built (no compiler, no headers, a compile error)."""


def compiler() -> list[str]:
    """$CC, else the compiler Python was built with, else cc / gcc / clang on PATH."""
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC")):
        if candidate:
            cmd = shlex.split(candidate)
            if cmd and shutil.which(cmd[0]):
                return cmd
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    raise BuildFailed("no C compiler found ($CC, Python's CC, cc, gcc, clang)")


def target(dest_dir: pathlib.Path = _PACKAGE_DIR) -> pathlib.Path:
    return dest_dir / (MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def build(dest_dir: pathlib.Path = _PACKAGE_DIR) -> tuple[pathlib.Path, str]:
    """Compile the extension into dest_dir; returns (path, a line describing the build). Raises BuildFailed."""
    try:
        import numpy
    except ImportError as e:
        raise BuildFailed("numpy is not importable: its headers are needed") from e
    py_include = pathlib.Path(sysconfig.get_paths()["include"])
    if not (py_include / "Python.h").is_file():
        raise BuildFailed(f"Python.h not found in {str(py_include)!r} (install the Python development headers)")
    cc = compiler()
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = target(dest_dir)
    tmp_out = out.with_name(out.name + ".tmp")
    cmd = [*cc, *CFLAGS, f"-I{py_include}", f"-I{numpy.get_include()}", str(_PACKAGE_DIR / f"{MODULE}.c"),
           "-o", str(tmp_out)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildFailed(f"cannot run the C compiler {cc[0]!r}: {e}") from e
    if r.returncode != 0:
        tmp_out.unlink(missing_ok=True)
        raise BuildFailed(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stderr.strip()[-2000:]}")
    tmp_out.replace(out)  # atomic: a running process keeps the old file
    return out, f"built {out} with {cc[0]} against numpy {numpy.__version__}'s headers"


def build_or_explain(dest_dir: pathlib.Path = _PACKAGE_DIR) -> str:
    """build(), never raising: the line to print at install either way."""
    try:
        return "ort-session: " + build(dest_dir)[1]
    except BuildFailed as e:
        return (f"ort-session: counting numpy allocator NOT built ({e}); measure_host_allocations uses "
                "tracemalloc's numpy domain instead")


if __name__ == "__main__":
    line = build_or_explain()
    print(line)
    sys.exit(0 if "NOT built" not in line else 1)
