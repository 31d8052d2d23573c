"""Rule matchers: annotations (prefix trie + `=` exact) and node names (substring, longest wins).

Also the path a node is matched on in name mode: its name, or — for exports that put no module path
into names (`torch.onnx.export(dynamo=True)`: `node_linear_3`) — the TorchScript-style path derived
from the deepest scope in the node metadata `pkg.torch.onnx.name_scopes`.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from ._errors import RuleError
from ._rules import Rule, Rules

NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
NAMESPACE_KEY = "namespace"


class AnnotationMatcher:
    """ONNX Runtime's `LayeringRuleMatcher`: prefix rules in a trie, `=` rules in a dict.

    Among prefix hits the lowest rule index wins; an exact rule is used only when no prefix matches.
    """

    def __init__(self, rules: Rules | Sequence[Rule]) -> None:
        self._trie: dict = {}
        self._exact: dict[str, int] = {}
        for rule in rules:
            if rule.exact:
                self._exact.setdefault(rule.pattern, rule.index)
                continue
            node = self._trie
            for ch in rule.pattern:
                node = node.setdefault(ch, {})
            node.setdefault(None, rule.index)  # key None holds the rule index ending here

    def match(self, annotation: str | None) -> int | None:
        if not annotation:
            return None
        best: int | None = None
        node = self._trie
        for ch in annotation:
            node = node.get(ch)
            if node is None:
                break
            hit = node.get(None)
            if hit is not None and (best is None or hit < best):
                best = hit
                if best == 0:
                    return 0
        if best is not None:
            return best
        return self._exact.get(annotation)


class NameMatcher:
    """Substring matcher over node names: the longest matching pattern wins, ties to config order.

    `strategy` is "automaton" (Aho-Corasick: one pass over the name whatever the number of patterns),
    "loop" (ONNX Runtime's reference: patterns longest-first, first `in` hit wins) or "auto" (the
    loop up to LOOP_MAX_PATTERNS patterns, the automaton beyond). Both give the same answer.
    """

    LOOP_MAX_PATTERNS = 128  # measured: the C-level `in` loop wins below ~100 patterns

    def __init__(self, rules: Rules | Sequence[Rule], strategy: str = "auto") -> None:
        rules = list(rules)
        for rule in rules:
            if rule.exact:
                raise RuleError(
                    f"name-based layer assignment does not support the '=' exact-match qualifier "
                    f"(pattern {rule.pattern!r} for device {rule.device!r}); all patterns are substrings "
                    f"of node names — remove the '='"
                )
        if strategy not in ("auto", "loop", "automaton"):
            raise ValueError(f"strategy={strategy!r}; use 'auto', 'loop' or 'automaton'")
        if strategy == "auto":
            strategy = "loop" if len(rules) <= self.LOOP_MAX_PATTERNS else "automaton"
        self.strategy = strategy
        # rank: longer is better, then lower rule index; `best` keeps (length, -index)
        entries = sorted(((r.pattern, r.index) for r in rules if r.pattern), key=lambda e: -len(e[0]))
        self._patterns = entries  # stable: config order among equal lengths
        if strategy == "automaton":
            self._build(entries)

    # -- Aho-Corasick -------------------------------------------------------------------------
    def _build(self, entries: list[tuple[str, int]]) -> None:
        goto: list[dict[str, int]] = [{}]
        own: list[tuple[int, int] | None] = [None]
        for pattern, index in entries:
            s = 0
            for ch in pattern:
                nxt = goto[s].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[s][ch] = nxt
                    goto.append({})
                    own.append(None)
                s = nxt
            cand = (len(pattern), -index)
            if own[s] is None or cand > own[s]:
                own[s] = cand
        fail = [0] * len(goto)
        best: list[tuple[int, int] | None] = list(own)
        order = list(goto[0].values())
        head = 0
        while head < len(order):
            s = order[head]
            head += 1
            f = fail[s]
            if best[f] is not None and (best[s] is None or best[f] > best[s]):
                best[s] = best[f]
            for ch, t in goto[s].items():
                order.append(t)
                g = fail[s]
                while g and ch not in goto[g]:
                    g = fail[g]
                fail[t] = goto[g].get(ch, 0) if goto[g].get(ch, 0) != t else 0
        self._goto, self._fail, self._best = goto, fail, best
        self._delta: list[dict[str, int]] = [dict(g) for g in goto]  # lazily completed DFA rows

    def _step(self, s: int, ch: str) -> int:
        g = s
        while True:
            t = self._goto[g].get(ch)
            if t is not None:
                break
            if g == 0:
                t = 0
                break
            g = self._fail[g]
        self._delta[s][ch] = t
        return t

    def match(self, name: str | None) -> int | None:
        """Index of the winning rule for `name`, or None."""
        if not name:
            return None
        if self.strategy == "loop":
            for pattern, index in self._patterns:
                if pattern in name:
                    return index
            return None
        delta, best_of = self._delta, self._best
        s = 0
        best: tuple[int, int] | None = None
        for ch in name:
            t = delta[s].get(ch)
            s = self._step(s, ch) if t is None else t
            b = best_of[s]
            if b is not None and (best is None or b > best):
                best = b
        return None if best is None else -best[1]


def derived_node_path(node) -> str | None:
    """The TorchScript-style path of a node exported without one in its name, or None.

    `pkg.torch.onnx.name_scopes = ['', 'model', 'model.layers.0', ..., 'model.layers.0.self_attn.q_proj',
    'linear']` -> `/model/layers.0/self_attn/q_proj/MatMul` (deepest module scope, then the op type),
    which is how the TorchScript exporter names the same node.
    """
    scope = _deepest_scope(node.metadata)
    if scope is None:
        return None
    parts: list[str] = []
    for piece in scope.split("."):
        if piece.isdigit() and parts:
            parts[-1] = f"{parts[-1]}.{piece}"
        else:
            parts.append(piece)
    return "/" + "/".join(parts) + "/" + node.op_type if parts else None


def _deepest_scope(metadata: dict[str, str]) -> str | None:
    raw = metadata.get(NAME_SCOPES_KEY)
    if raw:
        try:
            scopes = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            scopes = None
        if isinstance(scopes, (list, tuple)) and all(isinstance(x, str) for x in scopes):
            scopes = list(scopes)
            # the last entry is the fx node itself unless it extends the scope before it
            if len(scopes) >= 2 and not (scopes[-2] and scopes[-1].startswith(scopes[-2] + ".")):
                scopes = scopes[:-1]
            modules = [s for s in scopes if s]
            return modules[-1] if modules else None
    ns = metadata.get(NAMESPACE_KEY)
    if ns:  # ": ...LlamaForCausalLM/model: ...LlamaModel/model.layers.0: ...LlamaDecoderLayer/..."
        names = [part.split(":", 1)[0].strip() for part in ns.split("/") if ":" in part]
        names = [n for n in names if n][:-1]  # the last entry is the fx node itself
        return names[-1] if names else None
    return None


def name_match_target(node) -> str:
    """What name mode matches a node on: its name if that is a path (TorchScript and onnxruntime-genai
    names start with '/'), else the path derived from torch dynamo's scopes, else the name. A node a
    fusion derived from a dynamo node (`node_pow_1/SimplifiedLayerNormFusion/`) keeps its scopes."""
    name = node.name or ""
    if name.startswith("/"):
        return name
    derived = derived_node_path(node)
    return derived if derived is not None else name
