"""MatMulNBits workspace recipe: neither path needs any.

GEMV (M <= ``GEMV_MAX_M``) reads the packed 4- or 8-bit weights directly, one warp per output
column. The tiled path (larger M) computes one 64x64 output tile per block and dequantizes each
16-deep slice of B into shared memory as its K loop reaches it, accumulating in registers over the
whole of K; every output element is written once by the block that owns it. No block shares state
with another and nothing is staged in global memory, so the workspace is 0 bytes on both paths
(the seeds' fpA_intB recipe, sized for CUTLASS's split-K semaphores or Hopper stream-K partials, is
an upper bound this never exceeds; see the README's derivation).

The recipe still validates the shapes: a malformed or overflowing node is unavailable (None), not 0.
"""

from __future__ import annotations

import attrs

from ._checked import dim, mul, span

__all__ = ["GEMV_MAX_M", "TILE_M", "TILE_N", "MatMulNBitsRecipe", "matmul_nbits_recipe",
           "matmul_nbits_workspace_envelope"]

GEMV_MAX_M = 8
TILE_M = TILE_N = 64  # output tile of one block on the tiled path (matmul_nbits.cu TM x TN)
SUPPORTED_BITS = (4, 8)


@attrs.define(frozen=True)
class MatMulNBitsRecipe:
    path: str  # "empty" | "gemv" | "tiled"
    workspace_bytes: int  # 0 on every path: the tiled kernel dequantizes per tile in shared memory


def _valid_attrs(n: int | None, k: int | None, bits: object, block_size: object) -> bool:
    if n is None or k is None or bits not in SUPPORTED_BITS:
        return False
    bs = dim(block_size)
    return bs is not None and bs >= 16 and bs & (bs - 1) == 0


def matmul_nbits_recipe(m: object, n: object, k: object, bits: object = 4, block_size: object = 32,
                        itemsize: object = 4) -> MatMulNBitsRecipe | None:
    """The path and workspace for ``[M, K] x dequant(B)[K, N]`` with A of ``itemsize`` bytes (4 or 2);
    None when malformed or overflowing."""
    mm, nn, kk = dim(m), dim(n), dim(k)
    if mm is None or itemsize not in (2, 4) or not _valid_attrs(nn, kk, bits, block_size):
        return None
    if mul(itemsize, mm, nn) is None or mul(itemsize, mm, kk) is None:  # bytes of Y and of A
        return None
    if mm == 0 or nn == 0:
        return MatMulNBitsRecipe("empty", 0)
    if mm <= GEMV_MAX_M or kk == 0:
        return MatMulNBitsRecipe("gemv", 0)
    return MatMulNBitsRecipe("tiled", 0)


def matmul_nbits_workspace_envelope(m: object, n: object, k: object, bits: object = 4, block_size: object = 32,
                                    itemsize: object = 4) -> int | None:
    """Largest workspace over M in a range (an int or inclusive ``(lo, hi)``); N and K are attributes.
    0 on every path, so the recipe at the top of the range (which also checks it for overflow) decides."""
    ms = span(m)
    if ms is None:
        return None
    top = matmul_nbits_recipe(ms[1], n, k, bits, block_size, itemsize)
    return None if top is None else top.workspace_bytes
