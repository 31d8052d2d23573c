"""ONNX's C++ shape inference, kept from taking the process down on a hostile or odd model.

onnx 1.23's inference is not hardened against every value a model file may hold. Measured here: a Slice step of
2**31 or more (valid: onnxruntime runs it) segfaults or allocates until the OOM killer fires, and a dimension that
an earlier op inferred negative (a Conv whose kernel outgrows its input: onnx gives -3) fails a libstdc++
assertion in a later Slice and aborts. A crash in C++ is not an exception Python can catch, and a model file is
untrusted input, so:

- `bounded_steps` / `bound_slice_steps`: a Slice step beyond +-(2**31 - 1) is given to inference as that bound; on
  any dimension below 2**31 the output is the same (one element, or none); on a larger one the inferred size can
  exceed the run's (never fall short of it);
- `slice_unsafe`: the per-node pass does not hand onnx a Slice over a dimension of 2**31 or more;
- `isolated`: the whole-graph inference runs in a forked child (kept for the next model: `_inference_worker`)
  under an address-space limit. A child that dies (a segfault, an abort, an allocation past the limit that C++ did
  not survive) raises `InferenceCrashed` (a RuntimeError) and is replaced; one whose allocation failed cleanly
  answers MemoryError. Either way shape resolution falls back to its per-node pass, which gives onnx one node at
  a time with shapes this package checked (negative dimensions never reach it).
Without `os.fork` (not Linux or macOS) inference runs in the process as before.
"""

from __future__ import annotations

import logging
import marshal
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

from ._inference_worker import Worker, WorkerDied

__all__ = ["STEP_BOUND", "InferenceCrashed", "bound_slice_steps", "bounded_steps", "isolated", "slice_unsafe"]

_log = logging.getLogger("ort_graph.shapes")
STEP_BOUND = 2**31 - 1
_CHILD_EXTRA_BYTES = 4 << 30  # the child's address space: the parent's plus this


class InferenceCrashed(RuntimeError):
    """ONNX's shape inference died in its isolated child (killed by a signal): the model holds something its C++
    does not survive. Shape resolution falls back to its per-node pass."""


def bounded_steps(steps: np.ndarray) -> np.ndarray:
    """`steps` with every value clipped into +-STEP_BOUND (the same array when none is outside)."""
    if steps.dtype.kind != "i" or not steps.size or (int(steps.max()) <= STEP_BOUND and int(steps.min()) >= -STEP_BOUND):
        return steps
    return np.clip(steps, -STEP_BOUND, STEP_BOUND).astype(steps.dtype)


def bound_slice_steps(model: ModelProto) -> None:
    """In place: each Slice whose steps input is an initializer of its graph with a value beyond STEP_BOUND reads a
    bounded copy instead (a new initializer: the original may have other readers)."""
    for graph in _graphs(model.graph):
        inits = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.input) < 5:
                continue
            t = inits.get(node.input[4])
            if t is None:
                continue
            steps = numpy_helper.to_array(t)
            safe = bounded_steps(steps)
            if safe is not steps:
                name = f"{t.name}/bounded_for_inference"
                if name not in inits:
                    inits[name] = numpy_helper.from_array(safe, name)
                    graph.initializer.append(inits[name])
                node.input[4] = name


def slice_unsafe(op_type: str, domain: str, data_shape: tuple | None) -> bool:
    """A Slice onnx's per-node inference should not see: its data has a dimension of 2**31 or more."""
    return (op_type == "Slice" and domain in ("", "ai.onnx") and data_shape is not None
            and any(isinstance(d, int) and d > STEP_BOUND for d in data_shape))


def _graphs(g: onnx.GraphProto):
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graphs(sub)


# what the child may raise, by name, rebuilt in the parent as the same type
_ERRORS: dict[str, type[Exception]] = {
    "InferenceError": onnx.shape_inference.InferenceError, "ValidationError": onnx.checker.ValidationError,
    "RuntimeError": RuntimeError, "ValueError": ValueError, "MemoryError": MemoryError}


_worker: Worker | None = None  # the child inference runs in, kept for the next model (`_inference_worker`)
_worker_lock = threading.Lock()


def isolated(infer: Callable[[ModelProto], Any], proto: ModelProto) -> Any:
    """`infer(proto)` in a forked child (`_inference_worker.Worker`, kept while `infer` stays the same); its result
    (plain values: `marshal`) comes back through a pipe. Raises what the child raised (as the same onnx / builtin
    type) or InferenceCrashed when the child died (the next call forks a new one)."""
    global _worker
    if not hasattr(os, "fork"):
        return infer(proto)
    with _worker_lock:
        if _worker is not None and (_worker.owner != os.getpid() or _worker.infer is not infer):
            if _worker.owner == os.getpid():
                _worker.close()
            _worker = None  # another function, or a worker of the process this one was forked from
        if _worker is None:
            _worker = Worker(infer, _limit_address_space)
        try:
            reply = _worker.call(proto)
        except WorkerDied as e:
            _worker = None
            _log.warning("onnx shape inference died on this model (%s); shapes come from the per-node pass", e.how)
            raise InferenceCrashed(f"onnx shape inference died on this model ({e.how})") from None
    if reply[:1] == b"\1":
        name, _, message = reply[1:].decode("utf-8", "replace").partition("\0")
        raise _ERRORS.get(name, RuntimeError)(message)
    return marshal.loads(reply[1:])


def _limit_address_space() -> None:
    """In the child: allocation beyond the parent's address space plus _CHILD_EXTRA_BYTES fails (MemoryError or
    an abort) instead of growing until the OOM killer picks a process, perhaps the parent."""
    try:
        import resource

        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + _CHILD_EXTRA_BYTES
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError, StopIteration, ImportError):
        pass  # no /proc or no limit to set: the child runs unlimited, as the process did before
