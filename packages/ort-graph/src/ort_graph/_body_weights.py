"""The weights a node's subgraphs hold: their initializers and Constant tensors, nested bodies included.

They belong to the node's cost like the initializers it reads: charged to its device by the accountant,
uploaded with it when it runs on a device, and fed to the bodies as they run. Each weight has a key unique
in the model (`<node>/<attribute>/<name>`, nested keys extended likewise) and `ident`, the identity of the
tensor object that holds it (the interpreter finds a body's initializer or Constant by it).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from onnx import numpy_helper

from ._dtypes import tensor_nbytes
from ._tensor import Tensor


@attrs.frozen
class BodyWeight:
    key: str
    nbytes: int
    source: Any = attrs.field(repr=False, eq=False)  # a Tensor (initializer) or a TensorProto (Constant value)

    @property
    def ident(self) -> int:
        return id(self.source)

    def numpy(self) -> np.ndarray:
        src = self.source
        return src.numpy() if isinstance(src, Tensor) else numpy_helper.to_array(src)


def body_weights(node: Any) -> list[BodyWeight]:
    """Every weight held inside `node`'s subgraphs (each once), in a fixed order; [] for a node without."""
    if not node.attributes:
        return []
    out: list[BodyWeight] = []
    _collect(node, node.name, out)
    return out


def _collect(node: Any, scope: str, out: list[BodyWeight]) -> None:
    for attr_name, a in node.attributes.items():
        graphs = a.value if isinstance(a.value, list) else [a.value]
        for k, g in enumerate(graphs):
            if not hasattr(g, "initializers") or not hasattr(g, "nodes"):
                continue
            prefix = f"{scope}/{attr_name}{f'[{k}]' if isinstance(a.value, list) else ''}"
            out.extend(BodyWeight(f"{prefix}/{name}", t.nbytes, t) for name, t in g.initializers.items())
            for inner in g.nodes:
                value = inner.attr("value") if inner.op_type == "Constant" else None
                if value is not None and hasattr(value, "dims"):
                    out.append(BodyWeight(f"{prefix}/{inner.name}", tensor_nbytes(value.data_type, tuple(value.dims)) or 0,
                                          value))
                if inner.attributes:
                    _collect(inner, f"{prefix}/{inner.name}", out)


def body_weight_bytes(node: Any) -> int:
    return sum(w.nbytes for w in body_weights(node))
