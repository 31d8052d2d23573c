"""MatMulNBits workspace: none on either path (the tiled kernel dequantizes B per tile in shared
memory), checked against the seeds' fpA_intB recipe as an upper bound, with its example pinned."""

from __future__ import annotations

import pytest

from ort_cuda_ep import GEMV_MAX_M, get_profile, matmul_nbits_recipe, matmul_nbits_workspace_envelope

# The seeds' fpA_intB (CUTLASS weight-only GEMM) workspace recipe, transcribed as the reference our
# recipe is compared with: sm90 reserves stream-K partials for (2*(2*SMs) + SMs) tiles of 128x256
# floats; other archs one int per (16x64 tile, split) for up to 7 split-K slices; empty output: 0.
SEED_SPLIT_K_LIMIT, SEED_MIN_M_TILE, SEED_MIN_N_TILE = 7, 16, 64
SEED_MAX_M_TILE_SM90, SEED_MAX_N_TILE_SM90 = 128, 256


def seeds_fpa_intb_workspace(m: int, n: int, sm: int, sm_count: int) -> int:
    if m == 0 or n == 0:
        return 0
    if sm == 90:
        return (2 * (2 * sm_count) + sm_count) * SEED_MAX_M_TILE_SM90 * SEED_MAX_N_TILE_SM90 * 4
    return -(-m // SEED_MIN_M_TILE) * -(-n // SEED_MIN_N_TILE) * SEED_SPLIT_K_LIMIT * 4


def test_seeds_example_is_pinned():
    # the seeds' parity example: M=128, N=512, K=64 -> 1,792 bytes at Level 1, Level 2 and runtime
    assert seeds_fpa_intb_workspace(128, 512, 80, 108) == 1792
    assert seeds_fpa_intb_workspace(128, 512, 90, 132) == 660 * 128 * 256 * 4 == 86_507_520
    assert seeds_fpa_intb_workspace(0, 512, 90, 132) == 0
    # our recipe for the same node, and what it needed before per-tile dequantization (4*K*N float32)
    r = matmul_nbits_recipe(128, 512, 64, 4, 32)
    assert (r.path, r.workspace_bytes) == ("tiled", 0) and 4 * 64 * 512 == 131_072


@pytest.mark.parametrize("profile", ["a100", "h100", "l4", "rtx4090"])
@pytest.mark.parametrize("m,n,k", [(9, 64, 64), (128, 512, 64), (512, 11008, 4096), (4096, 4096, 4096), (0, 64, 64)])
def test_never_above_the_seeds_recipe(profile, m, n, k):
    p = get_profile(profile)
    for itemsize in (2, 4):
        ours = matmul_nbits_recipe(m, n, k, 4, 32, itemsize).workspace_bytes
        assert ours <= seeds_fpa_intb_workspace(m, n, p.compute_capability[0] * 10 + p.compute_capability[1],
                                                p.sm_count)


def test_gemv_path_at_small_m_has_no_workspace():
    for m in range(1, GEMV_MAX_M + 1):
        r = matmul_nbits_recipe(m, 4096, 4096, 4, 32)
        assert (r.path, r.workspace_bytes) == ("gemv", 0)


@pytest.mark.parametrize("itemsize", [2, 4])
def test_tiled_path_dequantizes_per_tile_without_workspace(itemsize):
    r = matmul_nbits_recipe(GEMV_MAX_M + 1, 1024, 512, 4, 32, itemsize)
    assert (r.path, r.workspace_bytes) == ("tiled", 0)
    # a 4096x11008 float16 weight: 2*K*N = 90,177,536 bytes of workspace before, none now
    r = matmul_nbits_recipe(16, 11008, 4096, 4, 32, 2)
    assert (r.path, r.workspace_bytes) == ("tiled", 0) and 2 * 4096 * 11008 == 90_177_536


@pytest.mark.parametrize("m,n,k", [(0, 64, 64), (16, 0, 64), (0, 0, 0)])
def test_empty_output_needs_zero(m, n, k):
    r = matmul_nbits_recipe(m, n, k, 4, 32)
    assert (r.path, r.workspace_bytes) == ("empty", 0)


@pytest.mark.parametrize("args", [
    (16, 64, 64, 2, 32), (16, 64, 64, 4, 24), (16, 64, 64, 4, 8), (-1, 64, 64, 4, 32), (16, "N", 64, 4, 32),
    (2**31 - 1, 2**31 - 1, 64, 4, 32),  # output elements overflow
    (2**31 - 1, 64, 2**31 - 1, 4, 32),  # A's bytes overflow
])
def test_malformed_or_overflowing_is_unavailable(args):
    assert matmul_nbits_recipe(*args) is None


def test_envelope_over_m():
    assert matmul_nbits_workspace_envelope((1, GEMV_MAX_M), 256, 128) == 0
    assert matmul_nbits_workspace_envelope((1, 4096), 256, 128) == 0
    assert matmul_nbits_workspace_envelope((0, 0), 256, 128) == 0
    assert matmul_nbits_workspace_envelope((5, 1), 256, 128) is None
    assert matmul_nbits_workspace_envelope((1, 2**31 - 1), 2**31 - 1, 128) is None  # overflow at the top


def test_unsupported_itemsize_is_unavailable():
    assert matmul_nbits_recipe(16, 1024, 512, 4, 32, itemsize=8) is None


@pytest.mark.parametrize("m,path", [(1, "gemv"), (8, "gemv"), (9, "tiled")])
def test_eight_bit_weights_follow_the_same_paths(m, path):
    r = matmul_nbits_recipe(m, 128, 64, 8, 32)
    assert (r.path, r.workspace_bytes) == (path, 0)
