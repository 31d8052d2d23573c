"""Published models: real trained models as their authors ship them (`../shared/models/published`: a file-type
model, three OCR CNNs), ours against onnxruntime's CPU provider on the inputs their own packages feed them.

Per model: median run time of ours at 1 thread and at its default (all cores), onnxruntime at 1 thread and at
its default, interleaved in rounds in one process (`interleaved_times`, a 50 ms pause before each turn); session
initialization and the peak RSS of a fresh process that loads the model and runs it once, each runtime in its
own child process (`python benchmarks/_published_child.py RUNTIME MODEL`: the runtime's import and
its session construction, nothing of either imported before the clock); and the budget sweep: planned
for the simulated GPU at 25/50/100/400% of the model's weights, the weight bytes placed there, the plan, and
the device allocator's measured peak after a run, which must never exceed the plan or the budget (a FAIL line).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
from _models import shared_dir
from _published_child import MODELS, feeds_for
from _published_child import ort as _ort
from _published_child import ours as _ours
from _table import Section, Table, child_json, fmt_bytes, fmt_ratio, fmt_seconds, interleaved_times, median

SHARES = (0.25, 0.5, 1.0, 4.0)


def _child(runtime: str, path: str, rounds: int = 3) -> dict[str, Any]:
    """`_published_child` in a fresh process: nothing of either runtime imported before its clock. Python's bytecode
    caches on, as an installed package has them (PYTHONDONTWRITEBYTECODE dropped from the child's environment), one
    untimed process first to write them and warm the page cache; the round of median init of `rounds`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    script = str(pathlib.Path(__file__).with_name("_published_child.py"))
    child_json(script, [runtime, path], env=env)
    runs = [child_json(script, [runtime, path], env=env) for _ in range(rounds)]
    good = sorted((r for r in runs if "init_s" in r), key=lambda r: r["init_s"])
    return good[len(good) // 2] if good else runs[-1]


def _speed(path: str, file: str, repeats: int) -> dict[str, Any]:
    feeds = feeds_for(file)
    ours_1t, ours_all = _ours(path, file, intra_op_num_threads=1), _ours(path, file)
    ours_dyn = _ours(path, file, dynamic=True, intra_op_num_threads=1)
    ort_1t, ort_all = _ort(path, 1), _ort(path, None)
    got, ref = ours_all.run(None, feeds), ort_1t.run(None, feeds)
    rec: dict[str, Any] = {"max_abs_diff": max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                                               for a, b in zip(got, ref, strict=True) if np.asarray(a).size)}
    samples = interleaved_times({"ours_1t": lambda: ours_1t.run(None, feeds), "ort_1t": lambda: ort_1t.run(None, feeds),
                                 "ours_all": lambda: ours_all.run(None, feeds),
                                 "ort_all": lambda: ort_all.run(None, feeds),
                                 "ours_1t_dynamic": lambda: ours_dyn.run(None, feeds)}, repeats, pause=0.05)
    rec |= {k: median(v) for k, v in samples.items()}
    return rec


def _budget_rows(path: str, file: str, sec: Section) -> list[dict[str, Any]]:
    """The simulated GPU at shares of the weights: weight bytes placed, plan, measured peak after a run."""
    import ort_graph

    try:  # the weights as the runtime counts them (Constant nodes folded into initializers included)
        weights = _ours(path, file).plan.to_dict()["devices"]["cpu"]["weights"]
    except Exception:  # a model the CPU plan refuses: the file's initializers
        weights = sum(t.nbytes for t in ort_graph.load(path).graph.initializers.values())
    feeds, rows = feeds_for(file), []
    for share in SHARES:
        budget = max(4096, int(weights * share))
        row: dict[str, Any] = {"share": share, "budget": budget, "model_weights": weights}
        try:
            sess = _ours(path, file, ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"], budgets=f"gpu:{budget}")
            dev = sess.plan.to_dict()["devices"].get("simgpu", {})
            sess.run(None, feeds)
            used = sess.device_memory().get("simgpu", {})
            row |= {"weights": dev.get("weights", 0), "total": dev.get("total", 0), "peak": used.get("peak", 0)}
            if row["peak"] > min(row["total"] or 0, budget) and row["peak"] > 0:
                sec.failures.append(f"{file} at {share:.0%} of its weights: measured device peak {row['peak']} B "
                                    f"above the plan {row['total']} B or the budget {budget} B")
        except Exception as e:  # a refusal is a result: say which
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(row)
    return rows


def run(quick: bool = False) -> Section:
    sec = Section("published")
    root = shared_dir() / "published"
    present = {f: root / f for f in MODELS if (root / f).is_file()}
    if not present:
        sec.notes.append(f"no published models under {str(root)!r}: section skipped")
        return sec
    if quick:
        present = dict(list(present.items())[:2])
    speed = Table("published models, CPU: median run time, ours vs onnxruntime (same inputs, interleaved)",
                  ["model", "ours 1t", "ORT 1t", "ours/ORT 1t", "dyn/ORT 1t", "ours all", "ORT all", "ours/ORT all", "init ours",
                   "init ORT", "init ratio", "RSS ours", "RSS ORT", "max |diff|"])
    fit = Table("published models on the simulated GPU: budget as a share of the weights -> weights placed, plan, "
                "measured peak", ["model", "share", "budget", "weights on device", "plan total", "measured peak"])
    for file, path in present.items():
        rec: dict[str, Any] = {"model": file}
        try:
            rec |= _speed(str(path), file, 3 if quick else 10)
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            sec.notes.append(f"{file}: {rec['error']}")
        rec["child_ours"], rec["child_ort"] = _child("ours", str(path)), _child("ort", str(path))
        co, cr = rec["child_ours"], rec["child_ort"]
        if "error" not in rec:
            speed.add(file.removesuffix(".onnx"), fmt_seconds(rec["ours_1t"]), fmt_seconds(rec["ort_1t"]),
                      fmt_ratio(rec["ours_1t"] / rec["ort_1t"], 2), fmt_ratio(rec["ours_1t_dynamic"] / rec["ort_1t"], 2),
                      fmt_seconds(rec["ours_all"]),
                      fmt_seconds(rec["ort_all"]), fmt_ratio(rec["ours_all"] / rec["ort_all"], 2),
                      fmt_seconds(co.get("init_s")), fmt_seconds(cr.get("init_s")),
                      fmt_ratio(co["init_s"] / cr["init_s"], 2) if "init_s" in co and "init_s" in cr else "-",
                      fmt_bytes(co.get("peak_rss")), fmt_bytes(cr.get("peak_rss")), f"{rec['max_abs_diff']:.1e}")
        rec["budget"] = _budget_rows(str(path), file, sec)
        for row in rec["budget"]:
            fit.add(file.removesuffix(".onnx"), f"{row['share']:.0%}", fmt_bytes(row["budget"]),
                    fmt_bytes(row.get("weights")) if "error" not in row else row["error"][:60],
                    fmt_bytes(row.get("total")), fmt_bytes(row.get("peak")))
        sec.records.append(rec)
    speed.notes.append("ours planned for the fed shape (max_shapes); dyn: ours loaded as users load the file, its symbolic "
                       "dims left symbolic (no max_shapes: each run plans at the shapes it meets), 1 thread")
    speed.notes.append("all: each turn after a 50 ms pause; onnxruntime's workers spin through such a pause (a core busy "
                       "while idle), ours sleep 200 us after a run, so a run's first parallel kernels may go on one thread")
    speed.notes.append("1t: intra_op_num_threads=1; all: each runtime's default; init and RSS: a fresh child process "
                       "per runtime that imports the runtime, loads the model and runs it once (init: the import "
                       "plus the session construction; peak RSS of that process), with bytecode caches, after one untimed process "
                       "that writes them; the median of 3")
    imports = [f"{r['model'].removesuffix('.onnx')} {r['child_ours']['import_s']:.3f}/{r['child_ort']['import_s']:.3f}"
               for r in sec.records if "import_s" in r["child_ours"] and "import_s" in r["child_ort"]]
    if imports:
        speed.notes.append("of init, the import in seconds, ours/ORT (ours includes onnx's): " + ", ".join(imports))
    fit.notes.append("measured peak: the simulated device allocator's peak after one run; it never exceeds the plan "
                     "total or the budget (else a FAIL line)")
    sec.tables += [speed, fit]
    return sec
