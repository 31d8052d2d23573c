"""Builds the counting numpy allocator (src/ort_session/_numpy_alloc.c -> ort_session/_numpy_alloc*.so) at
install; metadata lives in pyproject.toml. A missing compiler or headers leave it out: install succeeds,
`measure_host_allocations` uses tracemalloc's numpy domain instead, and the build says so."""

import importlib.util
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _builder():
    path = HERE / "src" / "ort_session" / "_numpy_alloc_build.py"
    spec = importlib.util.spec_from_file_location("_ort_session_numpy_alloc_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithAllocator(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            # an editable install imports from src/: build there (the wheel's build_lib is not on the path)
            editable = getattr(self, "editable_mode", False)
            dest = HERE / "src" / "ort_session" if editable else pathlib.Path(self.build_lib) / "ort_session"
            line = _builder().build_or_explain(dest)
            print(line, file=sys.stderr)  # pip shows it with -v


setup(cmdclass={"build_py": BuildPyWithAllocator})
