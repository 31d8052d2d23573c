"""MatMulNBits workspace recipe: GEMV at small M needs none, the tiled path dequantizes B first.

The tiled path (M > ``GEMV_MAX_M``) expands the 4- or 8-bit weights into a ``[K, N]`` buffer of A's type
(float32: 4 bytes, float16: 2) in the workspace and runs the tiled GEMM on it; the GEMV path reads
the packed weights directly.
"""

from __future__ import annotations

import attrs

from ._checked import dim, mul, span

__all__ = ["GEMV_MAX_M", "MatMulNBitsRecipe", "matmul_nbits_recipe", "matmul_nbits_workspace_envelope"]

GEMV_MAX_M = 8
SUPPORTED_BITS = (4, 8)


@attrs.define(frozen=True)
class MatMulNBitsRecipe:
    path: str  # "empty" | "gemv" | "tiled"
    workspace_bytes: int  # dequantized B ([K, N] of A's type) on the tiled path, else 0


def _valid_attrs(n: int | None, k: int | None, bits: object, block_size: object) -> bool:
    if n is None or k is None or bits not in SUPPORTED_BITS:
        return False
    bs = dim(block_size)
    return bs is not None and bs >= 16 and bs & (bs - 1) == 0


def matmul_nbits_recipe(m: object, n: object, k: object, bits: object = 4, block_size: object = 32,
                        itemsize: object = 4) -> MatMulNBitsRecipe | None:
    """Exact workspace for ``[M, K] x dequant(B)[K, N]`` with A of ``itemsize`` bytes (4 or 2);
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
    ws = mul(itemsize, kk, nn)
    return None if ws is None else MatMulNBitsRecipe("tiled", ws)


def matmul_nbits_workspace_envelope(m: object, n: object, k: object, bits: object = 4, block_size: object = 32,
                                    itemsize: object = 4) -> int | None:
    """Largest workspace over M in a range (an int or inclusive ``(lo, hi)``); N and K are attributes."""
    ms = span(m)
    if ms is None:
        return None
    top = matmul_nbits_recipe(ms[1], n, k, bits, block_size, itemsize)
    if top is None:
        return None
    # the workspace does not grow with M once on the tiled path; below GEMV_MAX_M it is zero
    return top.workspace_bytes
