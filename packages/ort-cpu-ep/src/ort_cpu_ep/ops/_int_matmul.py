"""The integer matmul shared by the quantized matmul kernels (MatMulInteger, QLinearMatMul, QGemm,
MatMulIntegerToFloat, DynamicQuantizeMatMul): (A - a_zp) @ (B - b_zp) accumulated exactly in float64
(|sum| < 2^53 for any K here), in declared workspace, by bands of B's columns.

Slots: 0 A - a_zp (M, K) float64; 1 a band of B - b_zp (K, band) float64; 2 the band's accumulator
(M, band) float64; 3 a float32 band for the kernels that round through float32 (`stage=True`). A band holds
at most 16 MiB of B, so a large constant weight never costs its float64 copy. Each band is handed to
`finish(acc, j0, j1)`, which writes output columns j0:j1 into the output block.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._registry import OpImpl, workspace_nbytes

BAND_BYTES = 16 << 20
A_SLOT, B_SLOT, ACC_SLOT, STAGE_SLOT = 0, 1, 2, 3


def band_cols(k: int, n: int) -> int:
    return max(1, min(n, BAND_BYTES // (8 * max(k, 1))))


def int_matmul_slots(m: int, k: int, n: int, stage: bool = False) -> list[tuple[int, int]]:
    """The slots `int_matmul_into` uses for A (M, K) @ B (K, N)."""
    band = band_cols(k, n)
    slots = [(A_SLOT, workspace_nbytes((m, k), np.float64)), (B_SLOT, workspace_nbytes((k, band), np.float64)),
             (ACC_SLOT, workspace_nbytes((m, band), np.float64))]
    if stage:
        slots.append((STAGE_SLOT, workspace_nbytes((m, band), np.float32)))
    return slots


def rows(shape: tuple[int, ...] | None) -> int | None:
    """M of a (..., M, K) operand flattened to 2-D."""
    return None if shape is None or len(shape) < 1 else int(np.prod(shape[:-1], dtype=np.int64))


def column_param(p: np.ndarray | None, j0: int, j1: int) -> np.ndarray | np.generic:
    """A scalar or per-column parameter for columns j0:j1 (0 when absent)."""
    if p is None:
        return np.float64(0)
    p = np.asarray(p)
    return p.reshape(()) if p.size == 1 else p.reshape(-1)[j0:j1]


def int_matmul_into(impl: OpImpl, a2: np.ndarray, azp: np.ndarray | np.generic, b: np.ndarray, bzp: np.ndarray | None,
                    finish: Callable[[np.ndarray, int, int], None], *, a_ready: np.ndarray | None = None) -> None:
    """(a2 - azp) @ (b - bzp) for a2 (M, K), b (K, N), bzp scalar or per column; `a_ready`: A - a_zp already
    in slot 0 (DynamicQuantizeMatMul quantizes into it)."""
    m, k = a2.shape if a_ready is None else a_ready.shape
    n = b.shape[1]
    if a_ready is None:
        a_ready = impl.workspace(A_SLOT, (m, k), np.float64)
        np.subtract(a2, np.asarray(azp), out=a_ready, dtype=np.float64, casting="unsafe")
    band = band_cols(k, n)
    bws = impl.workspace(B_SLOT, (k, band), np.float64)
    aws = impl.workspace(ACC_SLOT, (m, band), np.float64)
    for j0 in range(0, n, band):
        j1 = min(n, j0 + band)
        bb, acc = bws[:, : j1 - j0], aws[:, : j1 - j0]
        np.subtract(b[:, j0:j1], column_param(bzp, j0, j1), out=bb, dtype=np.float64, casting="unsafe")
        np.matmul(a_ready, bb, out=acc)
        finish(acc, j0, j1)


__all__ = ["band_cols", "column_param", "int_matmul_into", "int_matmul_slots", "rows"]
