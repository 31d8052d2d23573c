"""What `ortrun` tells about a session in one or two lines, its warnings as `ortrun: warning:` lines, and
`--version`."""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

PACKAGES = ("ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cpu-ep", "ort-cuda-ep", "ort-session", "ort-serve")
_KV = re.compile(r"present[._]")


def versions() -> list[tuple[str, str | None]]:
    """(package, version or None when not installed) for every ort-lowmem package."""
    from importlib import import_module, metadata

    out = []
    for name in PACKAGES:
        try:
            out.append((name, metadata.version(name)))
            continue
        except metadata.PackageNotFoundError:
            pass
        try:  # a source checkout on PYTHONPATH: the module's own version
            out.append((name, getattr(import_module(name.replace("-", "_")), "__version__", "unknown")))
        except ImportError:
            out.append((name, None))
    return out


def version_text() -> str:
    parts = [f"{n} {v}" if v else f"{n} (not installed)" for n, v in versions()]
    return f"ortrun (ort-session {dict(versions()).get('ort-session')}): " + ", ".join(parts)


@contextlib.contextmanager
def warnings_as_lines(stream: TextIO | None = None) -> Iterator[None]:
    """While the command runs, every warning is one `ortrun: warning: ...` line on stderr (each text once)."""
    seen: set[str] = set()

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        text = str(message)
        if text in seen:
            return
        seen.add(text)
        print(f"ortrun: warning: {text} [{category.__name__}]", file=stream or sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        old = warnings.showwarning
        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = old


def _fmt(n: int | None) -> str:
    from ort_partition import format_bytes

    return "unknown" if n is None else format_bytes(n)


def _kv_bytes(session: Any, ep: str) -> int:
    """Bytes of the KV cache the provider `ep` writes: the `present*` values its nodes produce (at the planned,
    largest, context)."""
    total = 0
    for name, value in session.model.graph.values.items():
        producer = value.producer
        if (_KV.search(name) and name.startswith("present") or "/present" in name) and producer is not None \
                and producer.ep == ep and value.nbytes is not None:
            total += value.nbytes
    return total


def load_summary(session: Any) -> list[str]:
    """"offloaded 4/8 layers to cuda:0: weights .., activations .., KV .. of budget ..; 55% of bytes on CPU",
    or, when no accelerator took a node, one line saying so and why (the first decline or budget stop)."""
    plan = session.plan
    devices = plan.devices()
    nodes = session.model.graph.nodes
    layer_eps: dict[int, set[str]] = {}
    for row in plan.report.rows:
        if row.layer is not None:
            layer_eps.setdefault(row.layer, set()).add(row.ep)
    total_bytes = sum(d["total"] for d in devices.values()) or 1
    cpu_bytes = sum(d["total"] for d in devices.values() if d["ep"] == "CPUExecutionProvider")
    lines = []
    accelerators = [p for p in plan.providers if p.name != "CPUExecutionProvider"]
    for p in accelerators:
        d = devices.get(p.device)
        took = sum(1 for n in nodes if n.ep == p.name and not n.op_type.startswith("Memcpy"))
        if not took or d is None:
            lines.append(f"{p.device} ({p.name}) took no node: {_why_nothing(session, p.name)}")
            continue
        on = sum(1 for eps in layer_eps.values() if p.name in eps and len(eps) == 1)
        real = sum(1 for n in nodes if not n.op_type.startswith("Memcpy"))
        layers = f"{on}/{len(layer_eps)} layers ({took}/{real} nodes)" if layer_eps else f"{took}/{real} nodes"
        budget = f" of budget {_fmt(d['budget'])}" if d["budget"] is not None else " (no budget)"
        kv = _kv_bytes(session, p.name)
        lines.append(f"offloaded {layers} to {p.device}: weights {_fmt(d['weights'])}, activations "
                     f"{_fmt(d['peak_activations'])}" + (f", KV {_fmt(kv)}" if kv else "")
                     + f", total {_fmt(d['total'])}{budget}; {cpu_bytes * 100 // total_bytes}% of bytes on CPU")
    return lines


def _why_nothing(session: Any, ep: str) -> str:
    result = session.placement.result
    for stop in result.stops.values():
        if stop.ep == ep:
            return stop.reason
    declines = [d for d in result.declines if getattr(d, "ep", None) == ep]
    if declines:
        d = declines[0]
        more = f" ({len(declines)} nodes declined; `ortrun plan` groups them by reason)" if len(declines) > 1 else ""
        return (getattr(d, "rejected", "") or d.reason) + (f"; remedy: {d.remedy}" if getattr(d, "remedy", "") else "") + more
    budget = result.budgets.get(ep)
    if budget is not None:
        return f"its budget {_fmt(budget)} holds no whole layer (or node) of this model; raise --budget"
    return "no node was assigned to it (check --layers / --gpu-layers)"
