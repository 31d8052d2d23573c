"""The layer-rule grammar shared by annotation mode and name mode.

    rules   := entry (';' entry)*            empty entries are skipped
    entry   := device '(' pattern (',' pattern)* ')'
    pattern := ['='] text                     '=' = exact match (annotation mode only)

Whitespace around every token is ignored. A range `[a-b]` inside a pattern expands to one rule per
number (`layers.[0-2]/` -> `layers.0/`, `layers.1/`, `layers.2/`; zero padding is kept: `[08-10]`);
brackets that are not a numeric range stay literal (`/model/constant_nodes/INT64/[1]`). As in ONNX
Runtime a pattern that repeats with the same match kind is an error. Errors quote the string with a
caret under the offending column (`RuleSyntaxError`).

A rule string is untrusted input with bounded cost: at most MAX_TEXT_CHARS characters, MAX_PATTERNS
patterns after range expansion (in the whole string, not per pattern), MAX_PATTERN_CHARS characters in
all expanded patterns together, and range bounds of at most MAX_RANGE_DIGITS digits. Anything over a
limit raises `RuleSyntaxError` quoting the limit before any expansion work is done.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import attrs

from ._errors import RuleError, RuleSyntaxError

_DEVICE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
_RANGE = re.compile(r"\[\s*([0-9]+)\s*-\s*([0-9]+)\s*\]")
_RANGE_START = re.compile(r"\[\s*[0-9]+\s*-")
MAX_TEXT_CHARS = 100_000  # the rule string itself
MAX_PATTERNS = 20_000  # patterns after range expansion, whole string (a 200-layer model uses ~2,000)
MAX_PATTERN_CHARS = 250_000  # all expanded patterns together: the matchers build a trie node per char (measured: ~0.5 s, ~120 MiB at the limit)
MAX_RANGE_DIGITS = 9  # a range bound: layers up to 999,999,999
MAX_EXPANSION = MAX_PATTERNS  # the limit's former name (one pattern's expansion); kept for importers


@attrs.define
class _Work:
    """What the rule string has cost so far, against the limits."""

    patterns: int = 0
    chars: int = 0


@attrs.frozen
class Rule:
    """One (device, pattern) pair. `index` is its priority position in config order."""

    device: str
    pattern: str
    exact: bool
    index: int
    column: int = 0  # where the pattern starts in the rule string
    source: str = ""  # the pattern as written, before range expansion

    def __str__(self) -> str:
        return f"{self.device}({'=' if self.exact else ''}{self.pattern})"


@attrs.frozen
class Rules:
    """Parsed rules in config order (ranges expanded)."""

    text: str
    rules: tuple[Rule, ...]

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __getitem__(self, i: int) -> Rule:
        return self.rules[i]

    @property
    def devices(self) -> tuple[str, ...]:
        """Devices in order of first appearance."""
        return tuple(dict.fromkeys(r.device for r in self.rules))


def _segments(text: str, sep: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    pos = start
    while True:
        cut = text.find(sep, pos, end)
        if cut < 0:
            yield pos, end
            return
        yield pos, cut
        pos = cut + 1


def _strip(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _expand(text: str, s: int, e: int, work: _Work) -> list[str]:
    """Expand numeric ranges in text[s:e]; errors point into `text`. The size of the expansion is
    checked against the string's remaining budget (`work`) before it is built."""
    raw = text[s:e]
    parts: list[list[str]] = []
    spans: list[tuple[int, int, int]] = []
    pos = 0
    count = 1
    literal = 0
    digits = 0
    for m in _RANGE.finditer(raw):
        a_txt, b_txt = m.group(1), m.group(2)
        if max(len(a_txt), len(b_txt)) > MAX_RANGE_DIGITS:
            raise RuleSyntaxError(
                f"range {m.group(0)[:40]!r} has a bound of more than {MAX_RANGE_DIGITS} digits; layer numbers are "
                "small, e.g. 'layers.[0-15]'", text, s + m.start(),
            )
        a, b = int(a_txt), int(b_txt)
        if a > b:
            raise RuleSyntaxError(
                f"range {m.group(0)!r} runs backwards; write the smaller number first, e.g. '[{b}-{a}]'",
                text, s + m.start(),
            )
        width = len(a_txt) if a_txt.startswith("0") and len(a_txt) > 1 else 0
        count *= b - a + 1
        literal += m.start() - pos
        digits += max(width, len(b_txt))
        if work.patterns + count > MAX_PATTERNS:
            raise RuleSyntaxError(
                f"ranges in {_cut(raw)!r} expand to more than {MAX_PATTERNS} patterns, the limit per rule string "
                f"(this pattern: {count}, the patterns before it: {work.patterns}); narrow the ranges or match a shared prefix "
                "instead (e.g. 'layers.1' covers layers.1, layers.10-19, ...)",
                text, s + m.start(),
            )
        spans.append((a, b, width))
        parts.append([raw[pos:m.start()]])
        parts.append([])
        pos = m.end()
    tail = raw[pos:]
    bad = _RANGE_START.search(tail)
    if bad is not None:
        raise RuleSyntaxError(
            f"incomplete range in pattern {_cut(raw)!r}; a range is '[first-last]' with two numbers, e.g. "
            "'layers.[0-15]'", text, s + pos + bad.start(),
        )
    chars = count * (literal + len(tail) + digits)  # an upper bound of the expansion's length
    if work.patterns + count > MAX_PATTERNS:
        raise RuleSyntaxError(
            f"pattern {_cut(raw)!r} brings the rule string to more than {MAX_PATTERNS} patterns, the limit per rule "
            "string; use fewer patterns, ranges ('layers.[0-15]/') or shared prefixes", text, s,
        )
    if work.chars + chars > MAX_PATTERN_CHARS:
        raise RuleSyntaxError(
            f"pattern {_cut(raw)!r} brings the rule string to more than {MAX_PATTERN_CHARS} characters of patterns "
            f"after range expansion (this pattern: {chars}, the patterns before it: {work.chars}), the limit per "
            "rule string; use shorter patterns or narrower ranges", text, s,
        )
    work.patterns += count
    work.chars += chars
    for i, (a, b, width) in enumerate(spans):
        parts[2 * i + 1] = [str(n).zfill(width) for n in range(a, b + 1)]
    parts.append([tail])
    if not spans:
        return [raw]
    return ["".join(p) for p in itertools.product(*parts)]


def _cut(raw: str, limit: int = 60) -> str:
    return raw if len(raw) <= limit else raw[:limit - 3] + "..."


def parse_rules(text: str) -> Rules:
    """Parse `device(pattern, ...); device(...)` into `Rules` (see the module docstring)."""
    if not isinstance(text, str):
        raise RuleError(
            f"rules must be a str like 'cuda(layers.[0-15]/); cpu(layers.[16-31]/)', got {type(text).__name__} "
            f"{_cut(repr(text))}")
    if len(text) > MAX_TEXT_CHARS:
        raise RuleSyntaxError(
            f"rule string has {len(text)} characters, more than the limit of {MAX_TEXT_CHARS}; use ranges "
            "('layers.[0-15]/') or shared prefixes instead of listing every pattern", text, MAX_TEXT_CHARS)
    work = _Work()
    rules: list[Rule] = []
    seen: dict[tuple[bool, str], Rule] = {}
    for es, ee in _segments(text, ";", 0, len(text)):
        s, e = _strip(text, es, ee)
        if s == e:
            continue
        open_ = text.find("(", s, e)
        close = text.find(")", s, e)
        if open_ < 0:
            raise RuleSyntaxError(
                f"missing '(' in entry {text[s:e]!r}; write device(pattern, ...), e.g. 'cuda(layers.0/)'",
                text, close if close >= 0 else e,
            )
        if close >= 0 and close < open_:
            raise RuleSyntaxError("')' comes before '(' in this entry; write device(pattern, ...)", text, close)
        ds, de = _strip(text, s, open_)
        if ds == de:
            raise RuleSyntaxError("empty device name before '('; name a device such as 'cuda', 'cpu' or 'gpu:1'",
                                  text, open_)
        dm = _DEVICE.fullmatch(text, ds, de)
        if dm is None:
            bad = next((i for i in range(ds, de) if not _DEVICE.fullmatch(text, ds, i + 1)), ds)
            raise RuleSyntaxError(
                f"invalid character {text[bad]!r} in device name {text[ds:de]!r}; devices look like "
                "'cuda', 'cuda:1', 'gpu', 'cpu' or an execution provider name", text, bad,
            )
        device = text[ds:de]
        if close < 0:
            raise RuleSyntaxError(f"missing ')' to close the pattern list of device {device!r}", text, e)
        nested = text.find("(", open_ + 1, close)
        if nested >= 0:
            raise RuleSyntaxError("unexpected '(' inside a pattern list; patterns cannot contain parentheses",
                                  text, nested)
        after_s, after_e = _strip(text, close + 1, e)
        if after_s < after_e:
            raise RuleSyntaxError(
                "unexpected text after ')'; separate entries with ';', e.g. 'cuda(layers.0/); cpu(layers.1/)'",
                text, after_s,
            )
        for ps, pe in _segments(text, ",", open_ + 1, close):
            ps, pe = _strip(text, ps, pe)
            if ps == pe:
                continue
            column, exact = ps, False
            if text[ps] == "=":
                exact = True
                ps, pe = _strip(text, ps + 1, pe)
                if ps == pe:
                    raise RuleSyntaxError("'=' must be followed by the exact annotation to match", text, column)
            for pattern in _expand(text, ps, pe, work):
                key = (exact, pattern)
                if key in seen:
                    first = seen[key]
                    raise RuleSyntaxError(
                        f"duplicate {'exact' if exact else 'prefix/substring'} pattern {pattern!r} "
                        f"(already given for device {first.device!r} at column {first.column}); "
                        "each pattern may appear once — remove one of them",
                        text, column,
                    )
                rule = Rule(device=device, pattern=pattern, exact=exact, index=len(rules), column=column,
                            source=text[ps:pe])
                seen[key] = rule
                rules.append(rule)
    return Rules(text=text, rules=tuple(rules))
