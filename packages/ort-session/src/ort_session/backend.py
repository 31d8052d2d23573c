"""`onnx.backend.base.Backend` over InferenceSession, as `onnxruntime.backend` provides.

    import ort_session.backend as backend
    rep = backend.prepare(model_proto)          # declines raise, carrying every reason
    outputs = rep.run([x])                      # positional inputs, in graph-input order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

import ort_graph

from ._session import InferenceSession


class SessionRep(BackendRep):
    """A prepared model; `run` takes inputs by position (graph-input order) or by name."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = self.session.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(names, inputs))
        outs = self.session.run(None, feeds)
        return tuple(outs)


class OrtSessionBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", **kwargs: Any) -> SessionRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"device {device!r} is not supported by ort_session.backend; use 'CPU'")
        if isinstance(model, onnx.ModelProto):
            model = ort_graph.from_proto(model)
        return SessionRep(InferenceSession(model, **kwargs))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[Any], device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        arrays = [np.asarray(x) for x in inputs]
        in_infos = [onnx.helper.make_tensor_value_info(name, ort_graph.from_numpy_dtype(a.dtype), list(a.shape))
                    for name, a in zip(node.input, arrays) if name]
        out_infos = [onnx.helper.make_empty_tensor_value_info(name) for name in node.output if name]
        graph = onnx.helper.make_graph([node], "run_node", in_infos, out_infos)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        domain_opsets = [onnx.helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            domain_opsets.append(onnx.helper.make_opsetid(node.domain, 1))
        model = onnx.helper.make_model(graph, opset_imports=domain_opsets)
        feeds = {name: a for name, a in zip(node.input, arrays) if name}
        return cls.prepare(model, device, **kwargs).run(feeds)


is_compatible = OrtSessionBackend.is_compatible
prepare = OrtSessionBackend.prepare
run_model = OrtSessionBackend.run_model
run_node = OrtSessionBackend.run_node
supports_device = OrtSessionBackend.supports_device
