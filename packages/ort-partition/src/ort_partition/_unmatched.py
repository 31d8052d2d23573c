"""Layer rules that match no node: which ones, and the closest names to suggest, at a bounded cost.

Whether a rule hits is a 3-gram filter, then one C-level search over all targets joined (not one Python loop per rule), and
the did-you-mean is a fuzzy ratio against a de-duplicated candidate set of at most MAX_CANDIDATES name
parts, for at most MAX_SUGGESTED unmatched rules; the rest are summarised in one warning. So a rule
string of thousands of typos on a model of thousands of nodes costs at most
MAX_SUGGESTED x MAX_CANDIDATES fuzzy comparisons, not rules x parts.
"""

from __future__ import annotations

import difflib
import heapq
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from ._errors import RuleUnmatchedWarning
from ._matchers import name_match_target
from ._rules import Rule, Rules

MAX_CANDIDATES = 1024  # name parts a suggestion is searched among (path segments first, then whole names)
MAX_SUGGESTED = 8  # unmatched rules that get a warning with suggestions of their own
_SEP = "\0"
_GRAM = 3


def targets_of(graph: Any, mode: str) -> list[str]:
    """What each rule is matched against: node names (or derived paths) in name mode, annotations otherwise."""
    out = []
    for node in graph.walk():
        t = name_match_target(node) if mode == "name" else node.layer_ann
        if t:
            out.append(t)
    return out


class _Hits:
    """Does a rule match at least one target? Substring (name mode), prefix (annotation) or exact."""

    def __init__(self, targets: Sequence[str], mode: str) -> None:
        self._targets, self._mode = targets, mode
        self._exact = set(targets)
        self._joined = None if any(_SEP in t for t in targets) else _SEP + _SEP.join(targets)
        text = self._joined or ""
        self._grams = {text[i:i + _GRAM] for i in range(len(text) - _GRAM + 1)}  # a miss is usually rejected here

    def __call__(self, rule: Rule) -> bool:
        p = rule.pattern
        if rule.exact:
            return p in self._exact
        if self._joined is not None and any(p[i:i + _GRAM] not in self._grams for i in range(len(p) - _GRAM + 1)):
            return False
        if self._joined is None or _SEP in p:  # a separator inside: fall back to one test per target
            if self._mode == "name":
                return any(p in t for t in self._targets)
            return any(t.startswith(p) for t in self._targets)
        return (p if self._mode == "name" else _SEP + p) in self._joined


def _candidates(targets: Iterable[str]) -> dict[str, str]:
    """Name part -> the first whole name it comes from: '/'-separated segments first (a rule names a part
    of a path, 'layers.5'), then whole names, de-duplicated, at most MAX_CANDIDATES."""
    targets = list(targets)
    part_of: dict[str, str] = {}
    for t in targets:
        for part in t.split("/"):
            if part and part not in part_of:
                part_of[part] = t
                if len(part_of) >= MAX_CANDIDATES:
                    return part_of
    for t in targets:
        if t not in part_of:
            part_of[t] = t
            if len(part_of) >= MAX_CANDIDATES:
                break
    return part_of


def _ratio(matcher: difflib.SequenceMatcher) -> float:
    """One fuzzy comparison (the unit the bound counts)."""
    return matcher.ratio()


def _closest(pattern: str, part_of: dict[str, str], n: int) -> list[str]:
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(pattern)
    scored = []
    for part in part_of:
        matcher.set_seq1(part)
        scored.append((_ratio(matcher), part))
    out: list[str] = []
    for _, part in heapq.nlargest(n * 4, scored):
        if part_of[part] not in out:
            out.append(part_of[part])
    return out[:n]


def closest_names(pattern: str, targets: Sequence[str], n: int = 3) -> list[str]:
    """Node names (or annotations) closest to `pattern`: compared by their '/'-separated parts, since a
    rule names a part of a path ('layers.5') rather than a whole node name; at most MAX_CANDIDATES
    distinct parts are compared."""
    return _closest(pattern, _candidates(targets), n)


def _shown(items: Sequence[str], limit: int = 4) -> str:
    return ", ".join(repr(p) for p in items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def warn_unmatched(graph: Any, rules: Rules, mode: str, kept: set[int]) -> None:
    """One warning per rule as written (a range is one rule) whose patterns match no node, with the
    closest names for the first MAX_SUGGESTED of them; one summary warning for the rest."""
    targets = targets_of(graph, mode)
    hits = _Hits(targets, mode)
    unmatched: dict[str, list[Rule]] = {}
    written: dict[str, int] = {}
    for rule in rules:
        key = f"{rule.device}({rule.source or rule.pattern})"
        written[key] = written.get(key, 0) + 1
        if rule.index in kept and not hits(rule):
            unmatched.setdefault(key, []).append(rule)
    what = "node name" if mode == "name" else "layer_ann annotation"
    check = "Check the spelling and numbering against `ortrun plan --json` node names."
    part_of = _candidates(targets)
    for key, missed in list(unmatched.items())[:MAX_SUGGESTED]:
        pats = [r.pattern for r in missed]
        if len(missed) == written[key]:
            says = f"matches no {what}"
        else:
            shown = ", ".join(repr(p) for p in pats[:4]) + (" ..." if len(pats) > 4 else "")
            says = f"has {len(missed)} of {written[key]} patterns that match no {what} ({shown})"
        near = _closest(pats[0], part_of, 3) if part_of else []
        hint = f"; closest {what}s: {', '.join(repr(t) for t in near)}" if near else f"; the graph has no {what}s"
        warnings.warn(f"layer rule {key!r} {says}{hint}. {check}", RuleUnmatchedWarning, stacklevel=4)
    rest = list(unmatched)[MAX_SUGGESTED:]
    if rest:
        warnings.warn(f"{len(rest)} more layer rules match no {what} (or have patterns that match none): "
                      f"{_shown(rest)}; suggestions are given for the first {MAX_SUGGESTED} only. {check}",
                      RuleUnmatchedWarning, stacklevel=4)
