"""The file's declared shapes as a fallback, and where resolution stopped.

A value no inference resolves takes the model's declared `value_info` / graph-output annotation (with
dimension overrides applied) at its node, so the nodes after it resolve. `first_unresolved_node` names
the node where unknown sizes start, for the ShapeResolutionWarning and the session's refusals.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._ir import Graph, Node, Shape, Value
from ._topo import topological_order


def _substitute(shape: Shape | None, dims: Mapping[str, int]) -> Shape | None:
    return None if shape is None else tuple(dims.get(d, d) if isinstance(d, str) else d for d in shape)


def _apply_declared(graph: Graph, v: Value, dims: Mapping[str, int]) -> None:
    """Fill what inference left unknown in `v` (dtype, rank, anonymous dims) from the file's annotation."""
    declared = graph.declared_value_info.get(v.name)
    if declared is None:
        return
    if not v.dtype:
        v.dtype = declared.dtype
    named = _substitute(declared.shape, dims)
    if v.shape is None:
        v.shape = named
    elif named is not None and len(named) == len(v.shape):
        v.shape = tuple(d if _anonymous(i) and not _anonymous(d) and not _data_dependent(i) else i
                        for i, d in zip(v.shape, named))


DATA_DEPENDENT = "_data_dependent"  # ends an anonymous dim only a run can tell (control flow: _control_shapes)


def _data_dependent(dim) -> bool:
    """A dim inference knows only a run can tell: a name in the file does not size it."""
    return isinstance(dim, str) and dim.startswith("unk__") and dim.endswith(DATA_DEPENDENT)


def _has_anonymous(shape: Shape | None) -> bool:
    return shape is not None and any(_anonymous(d) for d in shape)


def _resolved(shape: Shape | None) -> bool:
    """Known rank and no anonymous dim: a size that is static, or symbolic in named input dims."""
    return shape is not None and not _has_anonymous(shape)


def first_unresolved_node(graph: Graph) -> Node | None:
    """The first node (topological order) whose inputs are resolved but an output is not: where the
    plan's unknown sizes come from. None when every produced value is resolved."""
    values = graph.values
    if all(_resolved(values[o].shape) for node in graph.nodes for o in node.outputs if o and o in values):
        return None  # the usual case, told without sorting the graph
    for node in topological_order(graph):
        if not all(_resolved(values[n].shape) for n in node.inputs if n and n in values):
            continue  # an input is unresolved already: its producer (or a graph input) is the origin
        if any(o and o in values and not _resolved(values[o].shape) for o in node.outputs):
            return node
    return None


def has_shape_rule(node: Node) -> bool:
    """Whether ort-graph can compute the node's output shapes at all: an ONNX schema or a contrib handler."""
    import onnx

    from ._contrib_shapes import handler_for

    domain = "" if node.domain == "ai.onnx" else node.domain
    return handler_for(domain, node.op_type) is not None or onnx.defs.has(node.op_type, domain)


def unresolved_hint(node: Node) -> str:
    """What to do about a node whose outputs could not be resolved (used in warnings and errors)."""
    dims = [d for o in node.outputs if o and node.graph is not None and o in node.graph.values
            for d in (node.graph.values[o].shape or ()) if _data_dependent(d)]
    if any(d.endswith("_trip_count" + DATA_DEPENDENT) for d in dims):
        return (f"node {node.name!r} (Loop) has a data-dependent trip count (its M input is not a constant, or its "
                "condition can stop it early), so its scan outputs cannot be sized before a run; give the Loop a "
                "constant trip count M with no early exit (a body whose condition output is its condition input), "
                "or accept run-time planning with session.allow_unplanned_shapes=1")
    if dims:
        return (f"node {node.name!r} ({node.qualified_op}) has outputs whose size depends on the data (its "
                "branches, or its carried values from one iteration to the next, give different shapes: "
                f"{dims[:3]!r}), so they cannot be sized before a run; make the shapes agree, or accept run-time "
                "planning with session.allow_unplanned_shapes=1")
    op = node.qualified_op
    refusal = node.graph.shape_refusals.get(node.name) if node.graph is not None else None
    if refusal is not None:
        return (f"node {node.label!r} ({op}) cannot run on its inputs ({refusal}); onnxruntime fails it at run time "
                "too. Fix the model (its attributes or constant inputs), or, if the input sizes planned for are not "
                "ones the model accepts, give its real sizes (free_dimension_overrides / max_shapes; ortrun: --dim "
                "NAME=N or --max-shape INPUT=[d0,...])")
    if not has_shape_rule(node):
        return (f"node {node.name!r} ({op}) has no output-shape rule: neither ONNX nor ort-graph knows {op} and no "
                "registered kernel gave its output shapes, so every value after it has unknown sizes (dimension "
                "overrides such as --dim cannot fix that); declare the node's outputs in the model's value_info "
                "(onnxruntime's symbolic_shape_infer.py writes them), register an output-shape callback with the "
                "op's kernel (KernelRegistry_AddKernelV3 / add_kernel_v2(shape_func=...)), or open an issue asking "
                f"ort-lowmem to support {op}")
    return (f"node {node.name!r} ({op}) is the first whose output shapes could not be resolved; "
            "declare them in the model's value_info (or graph outputs), give free_dimension_overrides for the "
            "symbolic dimensions they depend on, or register an output-shape callback with the op's kernel "
            "(KernelRegistry_AddKernelV3 / add_kernel_v2(shape_func=...))")


def _anonymous(dim) -> bool:
    """An unknown dim, or a symbol onnx inference invented (`unk__N`)."""
    return dim is None or (isinstance(dim, str) and dim.startswith("unk__"))
