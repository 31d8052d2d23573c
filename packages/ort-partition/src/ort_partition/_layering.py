"""The layering index: which rule (and so which execution provider) each node is restricted to."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._devices import CPU_EP, CUDA_EP, ep_infos, match_device
from ._errors import RuleDroppedWarning, RuleError
from ._matchers import AnnotationMatcher, NameMatcher, name_match_target
from ._rules import Rule, Rules, parse_rules
from ._unmatched import warn_unmatched

LAYER_ASSIGNMENT_KEY = "session.layer_assignment_settings"
NAME_LAYER_ASSIGNMENT_KEY = "session.name_based_layer_assignment"
DEFAULT_EPS: tuple[str, ...] = (CUDA_EP, CPU_EP)


def _graph_of(graph_or_model: Any):
    return getattr(graph_or_model, "graph", graph_or_model) if not hasattr(graph_or_model, "nodes") else graph_or_model


@attrs.define(eq=False)
class LayeringIndex:
    """Node -> rule assignment for one graph (and its subgraphs).

    `mode` is "annotation" (prefix/exact on `layer_ann`, subgraph inheritance) or "name" (substring
    on the node name or its derived path, no inheritance). Rules whose device matches no available
    provider are in `dropped`; a node whose best rule was dropped is unassigned (ONNX Runtime's rule).
    """

    mode: str
    rules: Rules
    rule_to_ep: dict[int, str]
    dropped: tuple[Rule, ...]
    node_rule: dict[Any, int] = attrs.field(factory=dict, repr=False)
    _matcher: Any = attrs.field(default=None, repr=False, alias="matcher")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(cls, graph: Any, rules: Rules | str, mode: str, available_eps: Sequence[Any] = DEFAULT_EPS,
               strategy: str = "auto") -> LayeringIndex:
        if mode not in ("annotation", "name"):
            raise ValueError(f"mode={mode!r}; use 'annotation' or 'name'")
        if isinstance(rules, str):
            rules = parse_rules(rules)
        eps = ep_infos(available_eps)
        matcher = NameMatcher(rules, strategy) if mode == "name" else AnnotationMatcher(rules)
        rule_to_ep: dict[int, str] = {}
        dropped: list[Rule] = []
        for rule in rules:
            ep = match_device(rule.device, eps)
            if ep is None:
                dropped.append(rule)
            else:
                rule_to_ep[rule.index] = ep
        if dropped:
            by_device: dict[str, list[str]] = {}
            for r in dropped:
                by_device.setdefault(r.device, []).append(r.pattern)
            names = [e.name for e in eps]
            for device, pats in by_device.items():
                shown = ", ".join(repr(p) for p in pats[:4]) + (f" and {len(pats) - 4} more" if len(pats) > 4 else "")
                warnings.warn(
                    f"layer rule device {device!r} matches no available execution provider {names}; "
                    f"dropped its patterns {shown} (their nodes go to the fallback provider). "
                    "Register the provider or fix the device name.",
                    RuleDroppedWarning, stacklevel=3,
                )
        index = cls(mode=mode, rules=rules, rule_to_ep=rule_to_ep, dropped=tuple(dropped), matcher=matcher)
        index._process(_graph_of(graph), None)
        warn_unmatched(_graph_of(graph), rules, mode, set(rule_to_ep))
        return index

    def _match(self, node: Any) -> int | None:
        if self.mode == "name":
            return self._matcher.match(name_match_target(node))
        return self._matcher.match(node.layer_ann)

    def _process(self, graph: Any, parent_rule: int | None) -> None:
        for node in graph.nodes:
            rule = self._match(node)
            if rule is None and self.mode == "annotation":
                rule = parent_rule
            if rule is not None and rule not in self.rule_to_ep:
                rule = None
            if rule is not None:
                self.node_rule[node] = rule
            else:
                self.node_rule.pop(node, None)
            for sub in node.subgraphs:
                self._process(sub, rule if self.mode == "annotation" else None)

    def update(self, nodes: Iterable[Any]) -> None:
        """Re-match nodes added or renamed after the index was built (e.g. by L1 fusions)."""
        for node in nodes:
            rule = self._match(node)
            if rule is not None and rule in self.rule_to_ep:
                self.node_rule[node] = rule

    def make_unassigned(self, node: Any) -> None:
        self.node_rule.pop(node, None)

    # -- queries ------------------------------------------------------------------------------
    def rule_of(self, node: Any) -> Rule | None:
        i = self.node_rule.get(node)
        return None if i is None else self.rules[i]

    def ep_of(self, node: Any) -> str | None:
        i = self.node_rule.get(node)
        return None if i is None else self.rule_to_ep[i]

    def rules_for_ep(self, ep_name: str) -> set[int]:
        return {i for i, ep in self.rule_to_ep.items() if ep == ep_name}

    def nodes_for_ep(self, ep_name: str) -> list[Any]:
        return [n for n, i in self.node_rule.items() if self.rule_to_ep[i] == ep_name]

    def assignment(self) -> dict[str, str]:
        """Node name -> provider name for every assigned node (handy for tests and reports)."""
        return {n.name: self.rule_to_ep[i] for n, i in self.node_rule.items()}


def assign_layers(graph: Any, name_rules: Rules | str | None = None, annotation_rules: Rules | str | None = None,
                  available_eps: Sequence[Any] = DEFAULT_EPS, strategy: str = "auto") -> LayeringIndex | None:
    """Build the layering index from name rules or annotation rules (never both); None if neither."""
    has_name = bool(name_rules) and (not isinstance(name_rules, str) or bool(name_rules.strip()))
    has_ann = bool(annotation_rules) and (not isinstance(annotation_rules, str) or bool(annotation_rules.strip()))
    if has_name and has_ann:
        raise RuleError(
            f"cannot set both {LAYER_ASSIGNMENT_KEY!r} (annotation rules {_text(annotation_rules)!r}) and "
            f"{NAME_LAYER_ASSIGNMENT_KEY!r} (name rules {_text(name_rules)!r}); they are mutually exclusive — "
            "use annotation rules for models with `layer_ann` metadata, or name rules for models with "
            "structured node names, and unset the other"
        )
    if has_name:
        return LayeringIndex.create(graph, name_rules, "name", available_eps, strategy)  # type: ignore[arg-type]
    if has_ann:
        return LayeringIndex.create(graph, annotation_rules, "annotation", available_eps)  # type: ignore[arg-type]
    return None


def assign_layers_from_options(graph: Any, options: Mapping[str, str],
                               available_eps: Sequence[Any] = DEFAULT_EPS) -> LayeringIndex | None:
    """`assign_layers` reading ONNX Runtime's two session option keys from a config mapping."""
    return assign_layers(graph, name_rules=options.get(NAME_LAYER_ASSIGNMENT_KEY) or None,
                         annotation_rules=options.get(LAYER_ASSIGNMENT_KEY) or None, available_eps=available_eps)


def _text(rules: Rules | str | None) -> str:
    return rules.text if isinstance(rules, Rules) else str(rules)
