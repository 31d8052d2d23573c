"""The CPU execution provider's op library (numpy kernels).

Importing this package registers every in-tree op module (`ops_*.py`, `contrib.py`); `find(op, domain,
opset)` then returns the OpImpl for a node. `run_graph` interprets whole graphs with these kernels.
"""

import importlib
import pkgutil
import warnings

from ._errors import CpuOpError
from ._registry import Decline, InputInfo, OpImpl, all_ops, find, register

# Modules of other op families (com.microsoft) that are loaded when importable; a failure to import
# one is recorded here and warned about rather than breaking the standard-domain op library.
LOAD_ERRORS: dict[str, str] = {}


def load_all_ops() -> None:
    """Import every op module of this package (idempotent); each registers its OpImpl classes."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("ops_") and not info.name.startswith("ops_extra_"):
            importlib.import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if (info.name.startswith("ops_extra_") or info.name == "contrib") and info.name not in LOAD_ERRORS:
            try:
                importlib.import_module(f"{__name__}.{info.name}")
            except Exception as e:  # noqa: BLE001 - keep the standard ops usable
                LOAD_ERRORS[info.name] = repr(e)
                warnings.warn(f"ort_cpu_ep.ops: op module {info.name!r} failed to import: {e!r}", stacklevel=2)


from ._interp import current_opsets, opset_scope, run_graph, run_node  # noqa: E402

load_all_ops()

__all__ = ["LOAD_ERRORS", "CpuOpError", "Decline", "InputInfo", "OpImpl", "all_ops", "current_opsets", "find",
           "load_all_ops", "opset_scope", "register", "run_graph", "run_node"]
