"""MatMulNBits workspace: none on the GEMV path, the dequantized weights on the tiled path."""

from __future__ import annotations

import pytest

from ort_cuda_ep import GEMV_MAX_M, matmul_nbits_recipe, matmul_nbits_workspace_envelope


def test_gemv_path_at_small_m_has_no_workspace():
    for m in range(1, GEMV_MAX_M + 1):
        r = matmul_nbits_recipe(m, 4096, 4096, 4, 32)
        assert (r.path, r.workspace_bytes) == ("gemv", 0)


def test_tiled_path_holds_the_dequantized_weights():
    r = matmul_nbits_recipe(GEMV_MAX_M + 1, 1024, 512, 4, 32)
    assert (r.path, r.workspace_bytes) == ("tiled", 4 * 1024 * 512)


@pytest.mark.parametrize("m,n,k", [(0, 64, 64), (16, 0, 64), (0, 0, 0)])
def test_empty_output_needs_zero(m, n, k):
    r = matmul_nbits_recipe(m, n, k, 4, 32)
    assert (r.path, r.workspace_bytes) == ("empty", 0)


@pytest.mark.parametrize("args", [
    (16, 64, 64, 2, 32), (16, 64, 64, 4, 24), (16, 64, 64, 4, 8), (-1, 64, 64, 4, 32), (16, "N", 64, 4, 32),
    (16, 2**31 - 1, 2**31 - 1, 4, 32),  # 4*K*N overflows 63 bits
    (2**31 - 1, 2**31 - 1, 64, 4, 32),  # output elements overflow
])
def test_malformed_or_overflowing_is_unavailable(args):
    assert matmul_nbits_recipe(*args) is None


def test_envelope_over_m():
    assert matmul_nbits_workspace_envelope((1, GEMV_MAX_M), 256, 128) == 0
    assert matmul_nbits_workspace_envelope((1, GEMV_MAX_M + 1), 256, 128) == 4 * 256 * 128
    assert matmul_nbits_workspace_envelope((0, 0), 256, 128) == 0
    assert matmul_nbits_workspace_envelope((5, 1), 256, 128) is None


def test_float16_tiled_workspace_is_half():
    assert matmul_nbits_recipe(16, 1024, 512, 4, 32, itemsize=2).workspace_bytes == 2 * 1024 * 512
    assert matmul_nbits_recipe(16, 1024, 512, 4, 32, itemsize=8) is None


@pytest.mark.parametrize("m,path,ws", [(1, "gemv", 0), (8, "gemv", 0), (9, "tiled", 4 * 64 * 128)])
def test_eight_bit_weights_follow_the_same_paths(m, path, ws):
    r = matmul_nbits_recipe(m, 128, 64, 8, 32)
    assert (r.path, r.workspace_bytes) == (path, ws)  # dequantized B in A's type, whatever the bit width
