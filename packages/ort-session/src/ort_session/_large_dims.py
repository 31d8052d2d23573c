"""Refusals of a plan that large dimensions made (free_dimension_overrides / max_shapes of 2**31, 2**40, ...)
name those dimensions: placement's budget stop, a plan over budget, a size no plan can address and a host
allocation that failed say what was planned in bytes, and this adds where the sizes came from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import ort_memplan
import ort_partition

from ._errors import PlanOverBudgetError

LARGE_DIM = 1 << 20  # a dimension at least this large is named when a plan made from it is refused


def large_dims(overrides: Mapping[str, Any] | None, max_shapes: Any) -> list[str]:
    """`name=value` of the overrides and `input[axis]=value` of the max shapes at least LARGE_DIM."""
    found = [f"{name}={v}" for name, v in (overrides or {}).items() if isinstance(v, int) and v >= LARGE_DIM]
    if isinstance(max_shapes, Mapping):
        for name, shape in max_shapes.items():
            found += [f"{name}[{axis}]={d}" for axis, d in enumerate(shape or ())
                      if isinstance(d, int) and d >= LARGE_DIM]
    return found


@contextlib.contextmanager
def naming_large_dims(overrides: Mapping[str, Any] | None, max_shapes: Any) -> Iterator[None]:
    """Re-raise a refused plan (same error, same attributes) with the large dimensions it was planned for."""
    try:
        yield
    except (ort_partition.PartitionError, ort_memplan.MemPlanError, PlanOverBudgetError) as e:
        dims = large_dims(overrides, max_shapes)
        if dims and len(e.args) == 1 and isinstance(e.args[0], str):
            e.args = (f"{e.args[0]} (the planned shapes come from the large dimension(s) {', '.join(dims)}: "
                      "lower them to what runs will feed)",)
        raise


__all__ = ["LARGE_DIM", "large_dims", "naming_large_dims"]
