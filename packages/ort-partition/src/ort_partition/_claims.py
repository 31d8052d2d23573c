"""What an execution provider answers for a node: supported (with an optional workspace estimate)
or declined with a reason a user can act on. Duck-typed: anything with `.supported` and `.reason`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs


@runtime_checkable
class Claim(Protocol):
    supported: bool
    reason: str


@attrs.frozen
class Supported:
    """The provider takes the node; `workspace_estimate` is its Level-1 estimate if it has one."""

    workspace_estimate: int | None = None
    supported: bool = attrs.field(default=True, init=False)
    reason: str = attrs.field(default="", init=False)


@attrs.frozen
class Declined:
    """The provider does not take the node, and says exactly why and what to do about it."""

    ep: str
    node: str
    op: str
    domain: str = ""
    opset: int | None = None
    rejected: str = ""  # the dtype / shape / attribute that was rejected
    accepts: str = ""  # what the provider accepts instead
    remedy: str = ""
    supported: bool = attrs.field(default=False, init=False)

    @property
    def reason(self) -> str:
        op = f"{self.domain}::{self.op}" if self.domain not in ("", "ai.onnx") else self.op
        text = f"{self.ep} declines node {self.node!r} ({op}"
        text += f", opset {self.opset})" if self.opset is not None else ")"
        if self.rejected:
            text += f": rejected {self.rejected}"
        if self.accepts:
            text += f"; accepts {self.accepts}"
        if self.remedy:
            text += f"; remedy: {self.remedy}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d.pop("supported")
        d["reason"] = self.reason
        return d


@runtime_checkable
class ExecutionProviderSpec(Protocol):
    """An in-tree provider: it is asked node by node and the budget loop runs on its side."""

    name: str

    def claim(self, node: Any) -> Claim: ...


@runtime_checkable
class PluginProviderSpec(Protocol):
    """A plugin provider: it proposes what it supports for the whole graph, without budgets; the host
    then runs the budget loop over its proposals."""

    name: str

    def propose(self, nodes: Sequence[Any]) -> Iterable[tuple[Any, Claim]]: ...


@attrs.define
class OpSetProvider:
    """A simple provider that takes nodes by op type (and optionally element type).

    `ops` is a collection of op types (or `"domain::op"`); None means every op. `reject` may veto
    nodes: it returns None to accept or a `(rejected, accepts, remedy)` triple to decline.
    `estimates` maps op type -> workspace bytes (a Level-1 estimate carried on the claim).
    """

    name: str
    ops: Collection[str] | None = None
    device_type: str = "gpu"
    device_id: int = 0
    reject: Callable[[Any], tuple[str, str, str] | None] | None = None
    estimates: dict[str, int] = attrs.field(factory=dict)
    opsets: dict[str, int] = attrs.field(factory=dict)

    def claim(self, node: Any) -> Claim:
        qualified = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        opset = self.opsets.get(node.domain)
        if self.ops is not None and node.op_type not in self.ops and qualified not in self.ops:
            shown = ", ".join(sorted(self.ops)[:12]) + (" ..." if len(self.ops) > 12 else "")
            return Declined(ep=self.name, node=node.name, op=node.op_type, domain=node.domain, opset=opset,
                            rejected=f"op type {qualified!r}", accepts=f"op types {shown}",
                            remedy="leave the node on the fallback provider, or register a kernel for it")
        if self.reject is not None:
            veto = self.reject(node)
            if veto is not None:
                rejected, accepts, remedy = veto
                return Declined(ep=self.name, node=node.name, op=node.op_type, domain=node.domain, opset=opset,
                                rejected=rejected, accepts=accepts, remedy=remedy)
        return Supported(self.estimates.get(node.op_type))


@attrs.define
class PluginAdapter:
    """Presents any in-tree provider as a plugin: `propose` asks `claim` for every node up front."""

    inner: Any

    @property
    def name(self) -> str:
        return self.inner.name

    def __getattr__(self, item: str) -> Any:
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    def propose(self, nodes: Sequence[Any]) -> list[tuple[Any, Claim]]:
        return [(n, self.inner.claim(n)) for n in nodes]
