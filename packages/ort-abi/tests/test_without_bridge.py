"""The pure-Python parts work when the compiled bridge is missing; C features say so clearly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "ort_abi._cffi_bridge":
                raise ImportError("simulated: extension not built")

    sys.meta_path.insert(0, Block())
    import numpy as np
    import ort_abi

    assert not ort_abi.c_available()
    reg = ort_abi.KernelRegistry()
    d = ort_abi.KernelDefBuilder().op_type("Relu").since_version(6).ep("CPUExecutionProvider").build()

    class Relu:
        def __init__(self, state, info):
            pass

        def compute(self, ctx):
            x = ctx.input(0)
            np.maximum(x, 0, out=ctx.output(0, x.shape))

    entry = reg.add_kernel_v2(d, Relu, None, lambda api, node, ep: 0)
    k = entry.create_kernel(ort_abi.KernelInfo("n", "Relu"))
    ctx = ort_abi.KernelContext([np.array([-1.0, 2.0], np.float32)])
    k.compute(ctx)
    assert ctx.outputs[0].tolist() == [0.0, 2.0]
    a = ort_abi.NullDeviceAllocator()
    a.free(a.alloc(4))
    try:
        ort_abi.load_kernel_library(__file__, reg)
    except ort_abi.CFeaturesUnavailableError as e:
        assert "_cffi_bridge" in str(e) and "reinstall" in str(e), e
        print("OK")
""")


def test_pure_python_parts_import_and_work_without_the_bridge(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK"
