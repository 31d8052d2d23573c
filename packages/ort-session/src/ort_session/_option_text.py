"""Options given as text (`ortrun --option KEY=VALUE`, environment-style strings) read by the option's type.

A `session.*` (or any dotted) key is a config entry: its value stays text, as in ONNX Runtime. A typed option
of `SessionOptions` is read by the type of its default: a bool from 1/0, true/false, yes/no, on/off; an int
from decimal digits; an enum by member name (ORT_ENABLE_ALL) or number; a dict or list option from JSON (for
dimensions, `--dim` and `--max-shape` say it shorter). Anything else stays text and meets the option's own
check, whose message names the option and what it accepts.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs

from ._errors import InvalidOptionError

__all__ = ["option_from_text"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _field_default(key: str) -> tuple[bool, Any]:
    from ._options import SessionOptions

    for field in attrs.fields(SessionOptions):
        if field.name == key:
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            return True, default
    return False, None


def option_from_text(key: str, text: str) -> Any:
    """`text` read as the value of option `key` (unknown and config keys: the text itself)."""
    if "." in key:
        return text
    known, default = _field_default(key)
    if not known or not isinstance(text, str):
        return text
    word = text.strip()
    if isinstance(default, bool):
        low = word.lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise InvalidOptionError(f"option {key}={text!r}: expected a bool, one of 1/0, true/false, yes/no, on/off "
                                 f"(e.g. --option {key}=1)")
    if isinstance(default, enum.Enum):
        kind = type(default)
        if word in kind.__members__:
            return kind[word]
        if word.lstrip("-").isdigit():
            return int(word)
        raise InvalidOptionError(f"option {key}={text!r}: expected one of {', '.join(kind.__members__)} or its "
                                 f"number (e.g. --option {key}={next(iter(kind.__members__))})")
    if isinstance(default, int):
        if word.lstrip("+-").isdigit() and len(word) <= 20:
            return int(word)
        raise InvalidOptionError(f"option {key}={text!r}: expected an int in decimal digits (e.g. --option {key}=2)")
    if isinstance(default, dict | list):
        try:
            return json.loads(word)
        except ValueError as e:
            raise InvalidOptionError(f"option {key}={text!r}: a {type(default).__name__} option is given as JSON, e.g. "
                                     f"--option '{key}={json.dumps(_example(default))}'"
                                     + (" (or use --dim NAME=N / --max-shape)" if "dim" in key or "shape" in key
                                        else "")) from e
    return text


def _example(default: Any) -> Any:
    return ["lib.so"] if isinstance(default, list) else {"name": 1}
