"""Builds the C kernel library (csrc/ -> ort_cpu_ep/libort_cpu_ep_kernels.so) at install; metadata lives in
pyproject.toml. A missing or failing compiler leaves the library out: install succeeds, the numpy kernels
are used, and the build says so."""

import importlib.util
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _cbuild():
    spec = importlib.util.spec_from_file_location("_ort_cpu_ep_cbuild", HERE / "src" / "ort_cpu_ep" / "_cbuild.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithCKernels(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            # an editable install imports from src/: build there (the wheel's build_lib is not on the path)
            editable = getattr(self, "editable_mode", False)
            dest = HERE / "src" / "ort_cpu_ep" if editable else pathlib.Path(self.build_lib) / "ort_cpu_ep"
            line = _cbuild().build_or_explain(dest, HERE)
            print(line, file=sys.stderr)  # pip shows it with -v; the line says whether C kernels are in the build


setup(cmdclass={"build_py": BuildPyWithCKernels})
