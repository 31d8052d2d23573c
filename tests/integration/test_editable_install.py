"""An editable install (`pip install -e`, `nox -s install -- -e`) builds the C kernels too: in a fresh virtual
environment, from a copy of the packages, a 4-bit MatMulNBits decode step runs on the C kernel."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ["ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cpu-ep", "ort-session"]

SNIPPET = r'''
import warnings
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import ort_cpu_ep
from ort_cpu_ep.ops.ops_extra_quant import dequantize_weight
from ort_session import InferenceSession

assert "/src/ort_cpu_ep/" in ort_cpu_ep.__file__, ort_cpu_ep.__file__  # the editable copy
rng = np.random.default_rng(0)
K, N, bs = 256, 64, 32
b = rng.integers(0, 256, (N, K // bs, bs // 2), dtype=np.uint8)
s = (rng.random((N, K // bs)) * 0.1).astype(np.float32)
node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=K, N=N, bits=4,
                        block_size=bs, accuracy_level=0)
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 1, K])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, N])],
                      [numpy_helper.from_array(b, "B"), numpy_helper.from_array(s.reshape(-1), "S")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
with warnings.catch_warnings():
    warnings.simplefilter("error", ort_cpu_ep.CKernelsUnavailableWarning)
    sess = InferenceSession(m.SerializeToString(), {"session.pre_allocate_execution_buffers": "1"})
st = ort_cpu_ep.c_kernels.status()
assert st.loaded, st
a = rng.standard_normal((1, 1, K)).astype(np.float32)
y = sess.run(None, {"A": a})[0]
want = a.reshape(1, K) @ dequantize_weight(b, s, None, K=K, N=N, bits=4, block_size=bs).T
np.testing.assert_allclose(y.reshape(1, N), want, rtol=1e-4, atol=1e-4)
assert sess.last_run_stats.c_steps == 1, sess.last_run_stats
print("C kernels in use:", st.path)
'''


@pytest.mark.slow
def test_editable_install_builds_and_uses_the_c_kernels(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (the README's set-up installs it: pip install nox uv)")
    for tool in ("cc", "gcc", "clang"):
        if shutil.which(tool):
            break
    else:
        pytest.skip("no C compiler here: an install of any kind has no C kernels")
    src = tmp_path / "checkout"
    shutil.copytree(ROOT / "abi", src / "abi")
    ignore = shutil.ignore_patterns("*.so", "build", "__pycache__", "*.egg-info", "tests")
    for name in PACKAGES:
        shutil.copytree(ROOT / "packages" / name, src / "packages" / name, ignore=ignore)
    venv = tmp_path / "venv"
    # nothing of the environment running the tests may steer uv into it (nox sets UV_* and VIRTUAL_ENV): the
    # fresh venv is named explicitly, and its interpreter is the base one, not this venv's
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CONDA_PREFIX") and not k.startswith("UV_")}
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([uv, "venv", "-q", "--python", base, str(venv)], check=True, env=env, timeout=300)
    py = venv / "bin" / "python"
    prefix = subprocess.run([str(py), "-c", "import sys; print(sys.prefix)"], env=env, capture_output=True,
                            text=True, timeout=60).stdout.strip()
    assert pathlib.Path(prefix).resolve() == venv.resolve(), prefix  # isolated before anything is installed
    args = [a for name in PACKAGES for a in ("-e", str(src / "packages" / name))]
    r = subprocess.run([uv, "pip", "install", "-q", "--python", str(py), *args], env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (src / "packages" / "ort-cpu-ep" / "src" / "ort_cpu_ep" / "libort_cpu_ep_kernels.so").is_file()
    run = subprocess.run([str(py), "-c", SNIPPET], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "C kernels in use" in run.stdout
