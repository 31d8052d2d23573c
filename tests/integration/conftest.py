"""Integration fixtures: the parity C library, built once per session with the system cc."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

import ort_abi
import ort_abi.testing as ort_abi_testing

HERE = pathlib.Path(__file__).resolve().parent
PARITY_C = HERE / "c" / "parity_kernels.c"


def require_bridge() -> None:
    """ort_abi's compiled cffi bridge: skipped only where no C compiler could have built it (`ort_abi.testing`)."""
    try:
        ort_abi_testing.require_bridge()
    except ort_abi_testing.BridgeUnavailable as e:
        pytest.skip(str(e))


def compile_library(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    cc = ort_abi_testing.c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", f"-I{ort_abi.get_include()}",
           str(source), "-o", str(out), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"compiling {source.name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out


@pytest.fixture(scope="session")
def parity_lib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    require_bridge()
    return compile_library(PARITY_C, tmp_path_factory.mktemp("clib") / "libparity_kernels.so")


@pytest.fixture(scope="session")
def old_abi_lib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Relu and Neg kernels of ABI version 1 that take scratch (`c/old_abi_relu.c`)."""
    require_bridge()
    return compile_library(HERE / "c" / "old_abi_relu.c", tmp_path_factory.mktemp("oldabi") / "libold_abi_relu.so")


@pytest.fixture(scope="session")
def custom_ops_lib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """c/custom_ops.c: custom-domain kernels with an output-shape callback (ABI v3), a type constraint
    and an estimate that needs the EP handle."""
    require_bridge()
    return compile_library(HERE / "c" / "custom_ops.c", tmp_path_factory.mktemp("clib") / "libcustom_ops.so")


@pytest.fixture(scope="session")
def scribble_lib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """c/scribble.c: com.example::Scribble (y = x + 1), armed through `scribble_arm(mode, offset, length)` to
    write outside its output, write through its const input, or return success without its output, once."""
    require_bridge()
    return compile_library(HERE / "c" / "scribble.c", tmp_path_factory.mktemp("scribble") / "libscribble.so")


_FUZZ_COUNTS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def fuzz_counts(request: pytest.FixtureRequest) -> dict:
    """Outcome counts of the model-file fuzzing tests, per target; printed in the terminal summary."""
    return request.config.stash.setdefault(_FUZZ_COUNTS, {})


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 - pytest's hook signature
    table = config.stash.get(_FUZZ_COUNTS, None)
    if not table:
        return
    terminalreporter.section("model fuzzing (tests/integration/test_model_fuzz.py)")
    for target, counts in table.items():
        cases = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        terminalreporter.write_line(f"{target}: {sum(counts.values())} cases: {cases}")


@pytest.fixture(scope="session")
def cpu_c_kernels() -> None:
    """ort-cpu-ep's C kernel library, built in place if missing: skipped only where no C compiler can build it (a
    build that fails, or a library that does not load, is an error)."""
    from ort_cpu_ep.testing import CLibraryUnavailable, require_c_library

    try:
        require_c_library()
    except CLibraryUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def misbehaving_lib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """ort-abi's rule-breaking test kernels (packages/ort-abi/tests/c/misbehaving.c), e.g. PrePackFails on the CPU EP."""
    require_bridge()
    source = HERE.parents[1] / "packages" / "ort-abi" / "tests" / "c" / "misbehaving.c"
    return compile_library(source, tmp_path_factory.mktemp("misbehaving") / "libmisbehaving.so")
