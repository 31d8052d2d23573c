"""The CPU execution provider's op library (numpy kernels).

Op modules (`ops_*.py`, `contrib.py`, `ops_extra_*.py`) are imported when an op of theirs is first looked up:
`find(op, domain, opset)` (and the provider's registry) loads the modules that register that op
(`_op_index.MODULES`), then returns the OpImpl for a node; `all_ops()` and `load_all_ops()` load every module.
`run_graph` interprets whole graphs with these kernels.
"""

from ._errors import CpuOpError
from ._interp import current_opsets, opset_scope, run_graph, run_node
from ._registry import (
           LOAD_ERRORS,
           Decline,
           InputInfo,
           OpImpl,
           all_ops,
           find,
           load_all_ops,
           load_op,
           op_impls,
           register,
)

__all__ = ["LOAD_ERRORS", "CpuOpError", "Decline", "InputInfo", "OpImpl", "all_ops", "current_opsets", "find",
           "load_all_ops", "load_op", "op_impls", "opset_scope", "register", "run_graph", "run_node"]
