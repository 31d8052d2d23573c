"""QuickGelu's one-pass kernel (the CPU provider's SiLUFusion target): into its output block, chunk by chunk
through a declared workspace slot, correct for large |x|, when the output is written over the input, and
with overflow not reported."""

import numpy as np
import pytest

from ort_cpu_ep.ops import find
from ort_cpu_ep.ops._registry import _OUTPUT, _WORKSPACE, workspace_nbytes
from ort_cpu_ep.ops.contrib import QUICK_GELU_CHUNK


def silu_reference(x: np.ndarray, alpha: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return x64 / (1 + np.exp(-alpha * x64))


def run_into(kit, x, out, alpha, slots):
    """Compute through the session's hooks: the output provider hands `out`, the workspace provider
    records which slots were asked for."""
    def workspace(slot, nbytes):
        slots.append((slot, nbytes))
        return np.empty(nbytes, np.uint8)

    o, w = _OUTPUT.set(lambda i, shape, dt: out), _WORKSPACE.set(workspace)
    try:
        impl = find("QuickGelu", kit.MS, 1)
        node = kit.make_node("QuickGelu", 1, 1, kit.MS, alpha=alpha)
        with np.errstate(all="raise"):  # overflow in exp must be silenced by the kernel, not reported
            return impl.compute(node, [x])[0]
    finally:
        _OUTPUT.reset(o)
        _WORKSPACE.reset(w)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_one_pass_matches_the_reference_across_chunks_and_for_large_values(kit, rng, dt, alpha):
    x = (rng.standard_normal(2 * QUICK_GELU_CHUNK + 77) * 4).astype(dt)
    x[:6] = [-1000.0, -200.0, -89.0, 0.0, 200.0, 1000.0]
    out = np.full_like(x, np.nan)
    slots = []
    got = run_into(kit, x, out, alpha, slots)
    assert got is out  # computed into the block it was given
    assert slots == [(0, workspace_nbytes((QUICK_GELU_CHUNK,), dt))]
    rtol = 4e-6 if dt == np.float32 else 1e-12  # a few float32 ulps (exp and the divide round once each)
    np.testing.assert_allclose(got, silu_reference(x, alpha).astype(dt), rtol=rtol, atol=1e-30)
    assert got[0] == 0 and got[5] == 1000.0


def test_written_over_its_input_is_still_correct(kit, rng):
    x = (rng.standard_normal((3, QUICK_GELU_CHUNK + 5)) * 3).astype(np.float32)
    want = silu_reference(x, 1.0).astype(np.float32)
    got = run_into(kit, x, x, 1.0, [])  # the plan wrote the output over the input (QuickGelu may run in place)
    assert got is x
    np.testing.assert_allclose(got, want, rtol=1e-6)



@pytest.mark.parametrize("alpha", [1.0, 1.702])
@pytest.mark.parametrize("in_place", [False, True])
def test_float16_computes_in_float32_chunks_in_its_block(kit, rng, alpha, in_place):
    """float16: each chunk upcast and computed in float32 in the declared slot (two float32 chunks), rounded
    into the block: bit-identical to the generic path (x upcast whole, computed, cast back)."""
    from ort_cpu_ep.ops.contrib import _Elementwise

    x = (rng.standard_normal(QUICK_GELU_CHUNK + 123) * 6).astype(np.float16)
    x[:5] = [-60000.0, -12.0, 0.0, 12.0, 60000.0]
    node = kit.make_node("QuickGelu", 1, 1, kit.MS, alpha=alpha)
    want = _Elementwise.compute(find("QuickGelu", kit.MS, 1), node, [x])[0]
    out = x if in_place else np.full_like(x, np.nan)
    slots = []
    got = run_into(kit, x, out, alpha, slots)
    assert got is out and got.dtype == np.float16
    assert slots == [(0, workspace_nbytes((2 * QUICK_GELU_CHUNK,), np.float32))]
    np.testing.assert_array_equal(got, want)
