"""`ortrun kernels`: every registered kernel, its EP, its Level-1 / Level-2 workspace support, and whether
it computes into the output block it is given or returns a fresh array the session copies in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ort_abi
from ort_cpu_ep import OpImpl, builtin_registry, c_kernels


def _level2(entry: ort_abi.KernelEntry) -> str:
    state = entry.create_func_state
    if isinstance(state, OpImpl):
        return "declares" if type(state).workspace_bytes is not OpImpl.workspace_bytes else "none needed"
    spec = state[1] if isinstance(state, tuple) and len(state) == 2 else None
    if spec is not None and hasattr(spec, "recipe"):
        return "declares" if spec.recipe != "none" else "none needed"
    if entry.declares_workspace is None:
        return "known at creation"
    return "declares" if entry.declares_workspace else "none"


def _output(entry: ort_abi.KernelEntry) -> str:
    """"in block": the kernel writes the planned block `KernelContext.output` hands it (C and CUDA kernels
    always do); "copied": a numpy kernel that returns a fresh array, copied into the block after it ran."""
    state = entry.create_func_state
    if isinstance(state, OpImpl):
        return "in block" if state.writes_output else "copied"
    return "in block"


def registries(kernel_libraries: Sequence[str] = ()) -> list[ort_abi.KernelRegistry]:
    regs = [builtin_registry("CPUExecutionProvider")]
    c_registry = c_kernels.c_registry()
    if c_registry is not None:  # ort-cpu-ep's own C kernels, consulted before its numpy ones
        regs.insert(0, c_registry)
    try:
        import ort_cuda_ep

        cuda = ort_abi.KernelRegistry()
        ort_cuda_ep.CudaExecutionProvider(profile="h100").register(cuda)
        regs.append(cuda)
    except ImportError:
        pass
    if kernel_libraries:
        plugins = ort_abi.KernelRegistry()
        for path in kernel_libraries:
            ort_abi.load_kernel_library(path, plugins)
        regs.insert(0, plugins)
    return regs


def kernel_output_shapes(plugins: ort_abi.KernelRegistry | None, model: Any) -> Any:
    """The `output_shapes` hook for `ort_graph.resolve_shapes`: output-shape callbacks registered with
    the loaded kernel libraries' kernels (then the in-tree CPU registry's), for ops ONNX does not know."""
    regs = ([plugins] if plugins is not None else []) + [builtin_registry("CPUExecutionProvider")]
    return ort_abi.output_shapes_hook(regs, model.opset_imports)


def kernel_rows(kernel_libraries: Sequence[str] = ()) -> list[dict[str, str]]:
    rows = []
    for reg in registries(kernel_libraries):
        for e in reg:
            d = e.kernel_def
            end = "" if d.since_version_end is None else str(d.since_version_end)
            rows.append({"ep": e.ep, "op": f"{d.domain}::{d.op_type}" if d.domain else d.op_type,
                         "opsets": f"{d.since_version_start}-{end}", "language": c_kernels.kernel_language(e),
                         "level1_estimate": "yes" if e.has_estimate else "no", "level2_declaration": _level2(e),
                         "output_shapes": "yes" if e.shape_func is not None else "no", "output": _output(e),
                         "library": e.library or ""})
    rows.sort(key=lambda r: (r["ep"], r["op"], r["opsets"]))
    return rows


def kernel_table(kernel_libraries: Sequence[str] = ()) -> str:
    rows = kernel_rows(kernel_libraries)
    head = (f"{'execution provider':<26} {'op':<44} {'opsets':<8} {'kind':<7} {'L1 estimate':<12} "
            f"{'L2 declaration':<18} {'output':<9} output shapes")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['ep']:<26} {r['op']:<44} {r['opsets']:<8} {r['language']:<7} {r['level1_estimate']:<12} "
                     f"{r['level2_declaration']:<18} {r['output']:<9} {r['output_shapes']}")
    eps: dict[str, int] = {}
    for r in rows:
        eps[r["ep"]] = eps.get(r["ep"], 0) + 1
    lines.append(f"{len(rows)} kernels: " + ", ".join(f"{n} on {ep}" for ep, n in sorted(eps.items())))
    copied = sum(r["output"] == "copied" for r in rows)
    lines.append(f"{copied} return a fresh array the session copies into the planned block (output: copied); "
                 "the others compute in the block")
    lines.append(c_kernels_line())
    return "\n".join(lines)


def c_kernels_line() -> str:
    """Whether ort-cpu-ep's C kernels are in use (kind C) or its numpy kernels stand in for them."""
    st = c_kernels.status()
    if st.loaded:
        return (f"ort-cpu-ep C kernels: loaded from {st.path} (threads: its pthread pool); "
                "the numpy kernel of the same op runs the nodes they do not take")
    return f"ort-cpu-ep C kernels: NOT in use ({st.reason}); the numpy kernels (kind numpy) run every op"
