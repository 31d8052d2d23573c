"""`nox -s bench` (or `python benchmarks/run.py [--quick] [--only SECTION ...]`): measure the project
against its peers in one run, print one table per section and write bench-results/latest.json.

Benchmarks print numbers; they never assert speed. The one guarantee checked is budget fidelity
(bytes placed on a budgeted device never exceed the budget): a violation prints a FAIL line and
the exit status is 1, as it is when a section crashes.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
import traceback
import warnings
from typing import Any

import attrs
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_budget  # noqa: E402
import bench_llm  # noqa: E402
import bench_memory  # noqa: E402
import bench_published  # noqa: E402
import bench_runtime  # noqa: E402
import bench_scaling  # noqa: E402
import bench_serving  # noqa: E402
import bench_streaming  # noqa: E402
import bench_thin  # noqa: E402
from _table import Section  # noqa: E402

SECTIONS = {"memory": bench_memory.run, "budget": bench_budget.run, "scaling": bench_scaling.run,
            "runtime": bench_runtime.run, "streaming": bench_streaming.run, "llm": bench_llm.run,
            "thin": bench_thin.run, "published": bench_published.run, "serving": bench_serving.run}
PACKAGES = ("ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cuda-ep", "ort-session", "ort-serve", "onnx", "onnxruntime",
            "numpy")


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas_name = f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy without mode="dicts"
        blas_name = "unknown"
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"host": platform.node(), "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "blas": blas_name, "versions": versions, "commit": commit}


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)


def run_section(name: str, quick: bool) -> tuple[Section, dict[str, Any]]:
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sec = SECTIONS[name](quick=quick)
            error = None
        except Exception as e:  # report and carry on with the other sections
            sec = Section(name)
            error = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    sec.seconds = time.perf_counter() - t0
    kinds = sorted({w.category.__name__ for w in caught})
    return sec, {"error": error, "warnings": len(caught), "warning_kinds": kinds}


def print_section(sec: Section, extra: dict[str, Any]) -> None:
    bar = "=" * 100
    print(f"\n{bar}\n{sec.name.upper()}  ({sec.seconds:.1f} s)\n{bar}")
    for table in sec.tables:
        print(table.render())
        print()
    for note in sec.notes:
        print(f"note: {note}")
    if extra["warnings"]:
        print(f"note: {extra['warnings']} warning(s) during this section ({', '.join(extra['warning_kinds'])})")
    if extra["error"]:
        print(f"ERROR: section {sec.name!r} crashed: {extra['error']}")
    for failure in sec.failures:
        print(f"\n!!!!!!!! FAIL: {failure} !!!!!!!!\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a ~1 minute smoke version (fewer, smaller cases)")
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    ap.add_argument("--out", type=pathlib.Path, default=HERE.parent / "bench-results" / "latest.json",
                    help="results JSON (default: bench-results/latest.json)")
    args = ap.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    info = machine()
    print(f"bench {'(quick) ' if args.quick else ''}{started:%Y-%m-%d %H:%M} UTC on {info['host']}: {info['cpu']}, "
          f"{info['cores']} cores, Python {info['python']}, numpy BLAS {info['blas']}, "
          f"onnxruntime {info['versions']['onnxruntime']}, commit {info['commit']}")
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    failed = False
    from ort_session import _progress

    progress = _progress.Progress()  # stderr: redrawn on a terminal, whole lines in logs
    names = args.only or list(SECTIONS)
    for i, name in enumerate(names, 1):
        with progress.phase(f"bench section {i}/{len(names)}: {name}"):
            sec, extra = run_section(name, args.quick)
        print_section(sec, extra)
        failed = failed or bool(sec.failures) or extra["error"] is not None
        results[name] = {"seconds": sec.seconds, "tables": [attrs.asdict(t) for t in sec.tables],
                         "records": sec.records, "notes": sec.notes, "failures": sec.failures, **extra}
    total = time.perf_counter() - t0
    fails = [f for r in results.values() for f in r["failures"]]
    print(f"\ntotal: {total:.1f} s ({total / 60:.1f} min) for {', '.join(results)}"
          f"{'' if args.quick else ' (the full run should stay under 15 min on 2 cores)'}")
    print(f"budget guarantee: {'FAIL (' + str(len(fails)) + ')' if fails else 'never exceeded'}"
          if "budget" in results else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": started.isoformat(timespec="seconds"), "quick": args.quick, "total_seconds": total,
           "machine": info, "sections": results}
    args.out.write_text(json.dumps(doc, indent=1, default=_jsonable))
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
