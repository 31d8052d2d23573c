"""How many tokens a decoder can be run for, told before any kernel runs (`ortrun generate -n / -c`).

The model's positions are the rows of the table its positions index: the rotary `cos_cache` of
GroupQueryAttention / RotaryEmbedding (com.microsoft), or an initializer gathered along axis 0 by
`position_ids` or by a Range (the positions a torch export computes). A context the model cannot index is
refused with the numbers; where the model tells no positions, the inputs of the longest step (the KV cache
at the planned context) must fit this machine's memory and the devices' absolute budgets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import ort_graph

_COS_INPUT = {"GroupQueryAttention": 7, "RotaryEmbedding": 2}


def model_positions(graph: Any) -> int | None:
    """The number of positions the model's position tables hold (the smallest such table), or None."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    rows: list[int] = []
    for node in graph.nodes:
        table = None
        at = _COS_INPUT.get(node.op_type)
        if at is not None and node.domain == "com.microsoft" and len(node.inputs) > at:
            table = node.inputs[at]
        elif node.op_type == "Gather" and len(node.inputs) == 2 and node.attr("axis", 0) == 0:
            src = producer.get(node.inputs[1])
            if node.inputs[1] == "position_ids" or (src is not None and src.op_type == "Range"):
                table = node.inputs[0]
        init = graph.initializers.get(table) if table else None
        if init is not None and len(init.dims) >= 1 and int(init.dims[0]) > 0:
            rows.append(int(init.dims[0]))
    return min(rows) if rows else None


def check_ctx_size(graph: Any, ctx_size: int | None) -> int | None:
    """The model's positions; InvalidOptionError when `-c/--ctx-size` asks for more than they hold."""
    from ._errors import InvalidOptionError

    positions = model_positions(graph)
    if positions is not None and ctx_size and ctx_size > positions:
        raise InvalidOptionError(f"-c/--ctx-size {ctx_size} is more than the {positions} positions the model's "
                                 f"position table holds; give -c {positions} or less")
    return positions


def inputs_bytes(graph: Any, shapes: Mapping[str, list[int]]) -> int:
    """Bytes of one set of inputs of the given shapes (Python ints: no overflow however large)."""
    total = 0
    for name, shape in shapes.items():
        n = int(np.dtype(ort_graph.to_numpy_dtype(graph.values[name].dtype)).itemsize)
        for d in shape:
            n *= int(d)
        total += n
    return total


def memory_room(budget: str | None) -> int:
    """This machine's memory plus every device budget given in bytes (a share like cuda:90% adds nothing)."""
    from ort_partition import parse_budget

    from ._feeds import host_memory

    room = host_memory()
    if budget:
        room += sum(v for _, v in parse_budget(budget).limits if isinstance(v, int))
    return room
