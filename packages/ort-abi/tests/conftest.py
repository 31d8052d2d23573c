"""Fixtures: C libraries built with the system compiler into a temp dir, and ort_graph nodes."""

from __future__ import annotations

import pathlib
import subprocess

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto

import ort_abi
import ort_abi.testing as ort_abi_testing

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
EXAMPLE_DIR = REPO / "examples" / "c-kernel-library"
MISBEHAVING = HERE / "c" / "misbehaving.c"
F = TensorProto.FLOAT


def require_bridge() -> None:
    """ort_abi's compiled cffi bridge: skipped only where no C compiler could have built it (`ort_abi.testing`)."""
    try:
        ort_abi_testing.require_bridge()
    except ort_abi_testing.BridgeUnavailable as e:
        pytest.skip(str(e))


def compile_library(source: pathlib.Path, out: pathlib.Path, *defines: str) -> pathlib.Path:
    cc = ort_abi_testing.c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    cmd = [cc, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function", "-shared", "-fPIC",
           f"-I{ort_abi.get_include()}", *[f"-D{d}" for d in defines], str(source), "-o", str(out), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"compiling {source.name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out


@pytest.fixture(scope="session")
def c_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    require_bridge()
    return tmp_path_factory.mktemp("clibs")


@pytest.fixture(scope="session")
def example_lib(c_lib_dir: pathlib.Path) -> pathlib.Path:
    return compile_library(EXAMPLE_DIR / "example_kernels.c", c_lib_dir / "libexample_kernels.so")


@pytest.fixture
def example(example_lib: pathlib.Path):
    """`example(op, opset=17)`: a float kernel of the example C library (`Add`, `Relu`, ...), created for node `/t/op`."""
    reg = ort_abi.KernelRegistry()
    ort_abi.load_kernel_library(example_lib, reg)

    def make(op: str, opset: int = 17):
        return reg.find(op, "", opset, "CPUExecutionProvider", {"T": F}).create_kernel(
            ort_abi.KernelInfo(f"/t/{op}", op, output_types=(F,)))

    return make


@pytest.fixture(scope="session")
def misbehaving_lib(c_lib_dir: pathlib.Path) -> pathlib.Path:
    return compile_library(MISBEHAVING, c_lib_dir / "libmisbehaving.so")


@pytest.fixture(scope="session")
def custom_ops_c(c_lib_dir: pathlib.Path) -> pathlib.Path:
    """tests/integration/c/custom_ops.c: kernels with an ABI v3 output-shape callback."""
    return compile_library(REPO / "tests" / "integration" / "c" / "custom_ops.c", c_lib_dir / "libcustom_ops.so")


@pytest.fixture(scope="session")
def misbehaving_variant(c_lib_dir: pathlib.Path):
    def build(define: str) -> pathlib.Path:
        out = c_lib_dir / f"libmisbehaving_{define.lower()}.so"
        return out if out.exists() else compile_library(MISBEHAVING, out, define)

    return build


def _attr(name: str, value):
    kinds = {int: AttributeProto.INT, float: AttributeProto.FLOAT, str: AttributeProto.STRING,
             list: AttributeProto.INTS}
    from ort_graph import Attr

    return Attr(name, kinds[type(value)], value)


def make_node(op_type: str, inputs: list[tuple[str, tuple | None, int] | None], *, domain: str = "",
              attributes: dict | None = None, name: str | None = None, initializers: dict | None = None):
    """An ort_graph Node in a fresh Graph. inputs: (name, shape or None for unknown rank, elem type),
    or None for an omitted optional input."""
    from ort_graph import Graph, Tensor

    g = Graph()
    for tname, array in (initializers or {}).items():
        g.initializers[tname] = Tensor.from_numpy(tname, array)
    names = []
    for spec in inputs:
        if spec is None:
            names.append("")
            continue
        vname, shape, dtype = spec
        names.append(vname)
        if vname not in g.initializers:
            g.inputs.append(vname)
            v = g.value(vname)
            v.shape, v.dtype = shape, dtype
    node = g.add_node(op_type, names, ["y"], name=name or f"/test/{op_type}", domain=domain,
                      attributes={k: _attr(k, v) for k, v in (attributes or {}).items()})
    return node


@pytest.fixture
def fresh_statuses():
    """Asserts the test leaves no status and no handle alive."""
    before = ort_abi.live_status_count()
    yield
    assert ort_abi.live_status_count() == before
    assert ort_abi.live_handles() == {}


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture
def node_factory():
    return make_node


@pytest.fixture
def compile_c():
    return compile_library
