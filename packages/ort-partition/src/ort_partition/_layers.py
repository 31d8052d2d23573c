"""Layer ids and report groups from node names (or derived paths, or annotations).

`/model/layers.3/mlp/down_proj/MatMul` -> layer 3. Names outside the decoder layers are grouped by
their first scope (`embed_tokens`, `rotary_emb`, `lm_head`, ...). The onnxruntime-genai builder names
its final norm `/model/layers.L/final_norm_layernorm/...` with L = number of layers: that is grouped
as `final_norm`, not as a decoder layer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ._matchers import name_match_target

_LAYER = re.compile(r"(?:^|[/.])(?:layers|layer|h|blocks|block)\.(\d+)(?=[/.]|$)")
FINAL_NORM = "final_norm"
OTHER = "(other)"

GroupKey = int | str


def layer_id(text: str | None) -> int | None:
    """The decoder layer number in a name, path or annotation, or None."""
    if not text:
        return None
    m = _LAYER.search(text)
    return int(m.group(1)) if m else None


def group_of(path: str, annotation: str | None = None) -> GroupKey:
    """Report group of a node path: a layer number, `final_norm`, a first-scope section, or `(other)`."""
    m = _LAYER.search(path)
    if m is not None:
        rest = path[m.end():].lstrip("/.")
        if rest.startswith("final_norm"):
            return FINAL_NORM
        return int(m.group(1))
    if annotation:
        lid = layer_id(annotation)
        if lid is not None:
            return lid
    segments = [s for s in path.split("/") if s]
    if segments and segments[0] == "model":
        segments = segments[1:]
    if len(segments) >= 2:
        return segments[0]
    return annotation.strip() if annotation else OTHER


def node_group(node: Any) -> GroupKey:
    return group_of(name_match_target(node), node.layer_ann)


def layer_groups(nodes: Iterable[Any]) -> dict[Any, GroupKey]:
    """Node -> group for every node given."""
    return {n: node_group(n) for n in nodes}


def group_label(key: GroupKey) -> str:
    return f"layer {key}" if isinstance(key, int) else str(key)
