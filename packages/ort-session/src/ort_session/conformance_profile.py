"""Conformance profile per execution provider (003: "each EP's expected support/decline profile"): which
ONNX backend node test cases a provider claims whole, and for the others which ops it declines and why (a
reason category), computed from claims alone — no kernel runs, so it is fast.

    python -m ort_session.conformance_profile [--ep NAME ...] [--out DIR] [--check]

`--out DIR` writes `DIR/<EP>.json` (regenerate deliberately after a change in what a provider claims);
`--check` compares with the files there and fails on a lost claim or a new decline. The CUDA EP is
profiled through a device profile (`h100`): its claims do not depend on a driver.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

PROVIDERS = ("CPUExecutionProvider", "SimulatedGPUExecutionProvider", "CUDAExecutionProvider")
CLAIMED = "claimed"
CUDA_PROFILE = "h100"  # claims only: the CUDA EP plans for it without a device
_ASPECT = re.compile(r"^([A-Za-z]+): ")
_CATEGORIES = (  # first match wins: (category, pattern over the decline's `rejected`)
    ("device", re.compile(r"no CUDA driver|unavailable|could not start")),
    ("op", re.compile(r"^op\b|\bop '|no kernel|not implemented|unsupported op|^opset", re.I)),
    ("dtype", re.compile(r"dtype|element type|\btype\b|float16|bfloat16|string", re.I)),
    ("attribute", re.compile(r"attribute|mode|\baxis\b", re.I)),
    ("shape", re.compile(r"shape|rank|extent|dimension|size|static|broadcast", re.I)),
)


def reason_category(rejected: str) -> str:
    """A decline's reason as a stable category: the aspect a provider names first (`dtype: ...`, the CUDA
    EP's form), else op, dtype, attribute, shape, device or other from its words."""
    aspect = _ASPECT.match(rejected)
    if aspect:
        return aspect.group(1).lower()
    for name, pattern in _CATEGORIES:
        if pattern.search(rejected):
            return name
    return "other"


def case_claims(proto: onnx.ModelProto, provider: str) -> str | dict[str, str]:
    """'claimed' when the provider claims every node of the case's (fused) graph, else the declined ops with
    the reason category of each (`{'Conv': 'dtype', ...}`); a model the session cannot load or resolve is
    {'<model>': 'load'}."""
    import ort_graph

    from ._options import SessionOptions
    from ._session import make_provider

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ort_graph.from_proto(proto)
            ort_graph.constants_to_initializers(model.graph)
            ort_graph.resolve_shapes(model, {})
            ort_graph.apply_l1_fusions(model)
    except Exception:  # noqa: BLE001 - a case the session refuses before placement
        return {"<model>": "load"}
    options = SessionOptions(device_profile=CUDA_PROFILE if provider == "CUDAExecutionProvider" else None)
    ep = make_provider(provider, model.graph, model.opset_imports, options)
    declined: dict[str, str] = {}
    for node in model.graph.nodes:
        claim = ep.claim(node)
        if not getattr(claim, "supported", False):
            op = node.qualified_op if hasattr(node, "qualified_op") else node.op_type
            declined.setdefault(op, reason_category(getattr(claim, "rejected", str(claim))))
    return CLAIMED if not declined else dict(sorted(declined.items()))


def compute_profile(provider: str, pattern: str | None = None) -> dict[str, Any]:
    from ort_cpu_ep.conformance import node_cases

    return {c.name: case_claims(c.model, provider) for c in node_cases(pattern)}


def compare(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """What got worse: a case claimed before and declined now, an op declined now that was not before (or
    for another reason), a new case that is declined. Improvements are not errors (regenerate to keep them)."""
    problems = []
    for case, now in sorted(actual.items()):
        before = expected.get(case)
        if now == CLAIMED:
            continue
        if before is None:
            problems.append(f"{case}: a new case, declined {now!r}")
        elif before == CLAIMED:
            problems.append(f"{case}: was claimed, now declined {now!r} (a lost claim)")
        else:
            new = {op: why for op, why in now.items() if before.get(op) != why}
            if new:
                problems.append(f"{case}: new decline(s) {new!r} (was {before!r})")
    return problems


def profile_path(directory: str | pathlib.Path, provider: str) -> pathlib.Path:
    return pathlib.Path(directory) / f"{provider}.json"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ort_session.conformance_profile", description=__doc__.split("\n")[0])
    p.add_argument("--ep", action="append", choices=PROVIDERS, help="provider(s) to profile (default: all)")
    p.add_argument("--out", default="tests/integration/conformance_profiles", help="directory of <EP>.json files")
    p.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = p.parse_args(argv)
    failed = False
    for provider in args.ep or PROVIDERS:
        profile = compute_profile(provider)
        path = profile_path(args.out, provider)
        claimed = sum(v == CLAIMED for v in profile.values())
        if args.check:
            problems = compare(json.loads(path.read_text()), profile)
            failed |= bool(problems)
            print(f"{provider}: {claimed}/{len(profile)} claimed; {len(problems)} regression(s)")
            for line in problems:
                print("  " + line)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = (f"{json.dumps(case)}: {json.dumps(profile[case], sort_keys=True)}" for case in sorted(profile))
            path.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one case a line: reviewable diffs
            print(f"{provider}: {claimed}/{len(profile)} claimed -> {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
