"""Kernel definitions: which op (type, domain, opset range), for which EP, with which element types."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ._errors import KernelDefError


def normalize_domain(domain: str) -> str:
    """'' and 'ai.onnx' are the same (default) domain."""
    return "" if domain in ("", "ai.onnx") else domain


@attrs.frozen
class KernelDef:
    """An immutable kernel definition. `since_version_end` None means every later opset."""

    op_type: str
    domain: str
    since_version_start: int
    since_version_end: int | None
    ep: str
    type_constraints: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def constraints(self) -> dict[str, tuple[int, ...]]:
        return dict(self.type_constraints)

    def covers(self, opset: int) -> bool:
        return self.since_version_start <= opset and (self.since_version_end is None or opset <= self.since_version_end)

    def matches(self, op_type: str, domain: str, opset: int, ep: str,
                dtypes: Mapping[str, int] | None = None) -> bool:
        """Same op, domain and EP, opset inside the range, and every given dtype binding allowed."""
        if (self.op_type, self.domain, self.ep) != (op_type, normalize_domain(domain), ep) or not self.covers(opset):
            return False
        cons = self.constraints
        return all(name not in cons or elem in cons[name] for name, elem in (dtypes or {}).items())

    def overlaps(self, other: KernelDef) -> bool:
        """True when both could be chosen for the same node (same key, opsets and types intersect)."""
        if (self.op_type, self.domain, self.ep) != (other.op_type, other.domain, other.ep):
            return False
        a_end = self.since_version_end if self.since_version_end is not None else 1 << 30
        b_end = other.since_version_end if other.since_version_end is not None else 1 << 30
        if self.since_version_start > b_end or other.since_version_start > a_end:
            return False
        mine, theirs = self.constraints, other.constraints
        return all(set(mine[n]) & set(theirs[n]) for n in mine.keys() & theirs.keys())

    def describe(self) -> str:
        end = "+" if self.since_version_end is None else f"-{self.since_version_end}"
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        cons = "".join(f" {n}={list(t)}" for n, t in self.type_constraints)
        return f"{op} opset {self.since_version_start}{end} on {self.ep}{cons}"


class KernelDefBuilder:
    """Fluent builder: `KernelDefBuilder().op_type('Relu').domain('').since_version(6).ep('CPU...')
    .type_constraint('T', [1]).build()`. The C API's KernelDefBuilder_* functions drive this class."""

    def __init__(self) -> None:
        self._op_type: str | None = None
        self._domain = ""
        self._start: int | None = None
        self._end: int | None = None
        self._ep: str | None = None
        self._constraints: dict[str, tuple[int, ...]] = {}

    def op_type(self, op_type: str) -> KernelDefBuilder:
        if not isinstance(op_type, str) or not op_type:
            raise KernelDefError(f"op_type must be a non-empty string, got {op_type!r}; e.g. 'Softmax'")
        self._op_type = op_type
        return self

    def domain(self, domain: str) -> KernelDefBuilder:
        if not isinstance(domain, str):
            raise KernelDefError(f"domain must be a string ('' for ONNX), got {domain!r}")
        self._domain = normalize_domain(domain)
        return self

    def since_version(self, start: int, end: int | None = None) -> KernelDefBuilder:
        if not isinstance(start, int) or start < 1:
            raise KernelDefError(f"since_version start must be an opset >= 1, got {start!r}")
        if end is not None and (not isinstance(end, int) or end < start):
            raise KernelDefError(f"since_version end must be None (open) or >= start {start}, got {end!r}")
        self._start, self._end = start, end
        return self

    def ep(self, name: str) -> KernelDefBuilder:
        if not isinstance(name, str) or not name:
            raise KernelDefError(f"ep must be a non-empty execution provider name, got {name!r}; "
                                 "e.g. 'CPUExecutionProvider'")
        self._ep = name
        return self

    def type_constraint(self, name: str, elem_types: Iterable[int]) -> KernelDefBuilder:
        types = tuple(int(t) for t in elem_types)
        if not name or not types or any(t <= 0 for t in types):
            raise KernelDefError(f"type constraint {name!r} needs a name and ONNX element types > 0, got "
                                 f"{list(types)!r}; e.g. type_constraint('T', [onnx.TensorProto.FLOAT])")
        if name in self._constraints:
            raise KernelDefError(f"type constraint {name!r} given twice; pass all its types in one call")
        self._constraints[name] = types
        return self

    def build(self) -> KernelDef:
        missing = [n for n, v in (("op_type", self._op_type), ("since_version", self._start), ("ep", self._ep))
                   if v is None]
        if missing:
            raise KernelDefError(f"kernel definition is missing {', '.join(missing)} "
                                 f"(op_type={self._op_type!r}, ep={self._ep!r}); set them before build()")
        return KernelDef(self._op_type, self._domain, self._start, self._end, self._ep,  # type: ignore[arg-type]
                         tuple(sorted(self._constraints.items())))
