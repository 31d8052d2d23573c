"""`ortrun plan --plot FILE.png|svg`: the placement per layer (bytes by kind, coloured by device) and each
device's memory over the execution steps (weights + live activations and workspace) against its budget.
matplotlib is an optional extra: `pip install 'ort-session[plot]'`."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from ._errors import SessionError

SUFFIXES = (".png", ".svg", ".pdf")


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise SessionError("--plot needs matplotlib, which is not installed: pip install 'ort-session[plot]' "
                           "(or pip install matplotlib)") from e
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def live_bytes_per_step(session: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """device -> (steps, planned bytes live at each step: activations and workspace blocks)."""
    gplan = session.memory.gplan
    steps_total = max((r.last for r in gplan.requests), default=0) + 1
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for device in sorted({r.device for r in gplan.requests}):
        delta = np.zeros(steps_total + 1, np.int64)
        for r in gplan.requests:
            if r.device == device:
                delta[r.first] += r.nbytes
                delta[r.last + 1] -= r.nbytes
        out[device] = (np.arange(steps_total), np.cumsum(delta[:-1]))
    return out


def plot_plan(session: Any, path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise SessionError(f"--plot {str(path)!r}: the file name must end in one of {', '.join(SUFFIXES)}, e.g. plan.png")
    plt = _matplotlib()
    plan = session.plan
    rows = plan.report.rows
    devices = plan.devices()
    eps = list(dict.fromkeys(r.ep for r in rows))
    colours = dict(zip(eps, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, 0.45 * len(rows) + 3) + 3.5, 8.5))
    largest = max([d["total"] for d in devices.values()] + [r.total_bytes for r in rows] + [1])
    unit, scale = ("GiB", float(1 << 30)) if largest >= 1 << 30 else ("MiB", float(1 << 20)) \
        if largest >= 1 << 20 else ("KiB", 1024.0)

    labels = [f"{r.group}" for r in rows]
    x = np.arange(len(rows))
    bottoms = np.zeros(len(rows))
    for kind, attr, hatch in (("weights", "weight_bytes", ""), ("activations", "activation_bytes", "//"),
                              ("workspace", "workspace_bytes", "..")):
        values = np.array([getattr(r, attr) for r in rows], float) / scale
        top.bar(x, values, bottom=bottoms, color=[colours[r.ep] for r in rows], hatch=hatch, edgecolor="white",
                label=kind)
        bottoms += values
    top.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
    top.set_ylabel(f"{unit} (per-node cost sums)")
    top.set_title(f"placement per layer ({plan.placement.mode})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[ep]) for ep in eps]
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch=h) for h in ("", "//", "..")]
    top.legend(handles, [*eps, "weights", "activations", "workspace"], fontsize=8, loc="upper left",
               bbox_to_anchor=(1.0, 1.0))

    live = live_bytes_per_step(session)
    for device, d in devices.items():
        steps, used = live.get(device, (np.arange(1), np.zeros(1, np.int64)))
        colour = colours.get(d["ep"], "grey")
        bottom.plot(steps, (used + d["weights"]) / scale, color=colour,
                    label=f"{device}: weights + live activations/workspace")
        bottom.axhline((d["weights"] + d["peak_activations"]) / scale, color=colour, linestyle=":",
                       label=f"{device}: planned total {d['total'] / scale:.1f} {unit}")
        if d["budget"] is not None:
            bottom.axhline(d["budget"] / scale, color=colour, linestyle="--", linewidth=2,
                           label=f"{device}: budget {d['budget'] / scale:.1f} {unit}")
    bottom.set_xlabel("execution step (node in execution order)")
    bottom.set_ylabel(unit)
    bottom.set_title("memory plan per device over execution steps")
    bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    bottom.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
