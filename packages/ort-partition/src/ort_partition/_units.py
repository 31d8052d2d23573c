"""Human byte sizes, parsed in exactly one place (`parse_bytes`) and formatted for reports."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from ._errors import BudgetError

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    # single letters follow the docker / ollama convention: binary multiples
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int) -> int:
    """Parse `6GiB`, `512MB`, `6e9`, `1.5 KiB`, `6442450944` (or an int) into bytes.

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB, GiB, TiB) and the
    single letters K, M, G, T are powers of 1024; units are case-insensitive. Fractions round down.
    """
    if isinstance(text, bool):
        raise BudgetError(f"byte size {text!r} is a bool; give a number of bytes or a string like '6GiB'")
    if isinstance(text, int):
        if text < 0:
            raise BudgetError(f"byte size {text!r} is negative; sizes must be >= 0")
        return text
    if not isinstance(text, str):
        raise BudgetError(f"byte size {text!r} must be a str or int, e.g. '6GiB' or 6442450944")
    m = _SIZE.match(text)
    if not text.strip():
        raise BudgetError("byte size is empty; give a size like '6GiB', '512MB' or '6e9'")
    if m is None:
        raise BudgetError(
            f"cannot parse byte size {text!r}; expected a number with an optional unit "
            f"(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G, T), e.g. '6GiB'"
        )
    number, unit = m.group(1), m.group(2).lower()
    if unit not in _UNITS:
        raise BudgetError(
            f"unknown unit {m.group(2)!r} in byte size {text!r}; use one of "
            "B, KB, MB, GB, TB (x1000) or KiB, MiB, GiB, TiB, K, M, G, T (x1024)"
        )
    try:
        value = Decimal(number) * _UNITS[unit]
    except InvalidOperation as e:  # pragma: no cover - the regex admits only valid decimals
        raise BudgetError(f"cannot parse the number in byte size {text!r}") from e
    if value < 0:
        raise BudgetError(f"byte size {text!r} is negative; sizes must be >= 0")
    return int(value)


def format_bytes(n: int | None) -> str:
    """`1536` -> `1.5 KiB`; exact bytes below 1 KiB; `-` for None."""
    if n is None:
        return "-"
    sign, n_abs = ("-" if n < 0 else ""), abs(n)
    if n_abs < 1024:
        return f"{sign}{n_abs} B"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_abs >= scale:
            return f"{sign}{n_abs / scale:.1f} {unit}"
    return f"{sign}{n_abs} B"  # pragma: no cover
