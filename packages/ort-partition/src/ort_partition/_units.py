"""Human byte sizes, parsed in exactly one place (`parse_bytes`) and formatted for reports."""

from __future__ import annotations

import numbers
import re
from decimal import Context, Decimal, localcontext

from ._errors import BudgetError

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    # single letters follow the docker / ollama convention: binary multiples
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


MAX_BYTES = 2**63 - 1  # the largest size ONNX Runtime's int64 sizes (and this planner) can hold
MAX_NUMBER_CHARS = 30  # digits, point and exponent of one number; '6442450944' is 10
_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """`repr(value)`, cut to a readable length for error messages (a 1 MB string is not quoted whole)."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else f"<int of {value.bit_length()} bits>"
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS - 20]}...{text[-12:]} ({len(text)} chars)"


def _checked_int(n: int, original: object) -> int:
    if n < 0:
        raise BudgetError(f"byte size {shown(original)} is negative; sizes must be >= 0")
    if n > MAX_BYTES:
        raise BudgetError(f"byte size {shown(original)} exceeds the largest size, 2**63-1 bytes (8 EiB); "
                          "give at most 8388608TiB, e.g. '6GiB'")
    return n


def parse_bytes(text: str | int) -> int:
    """Parse `6GiB`, `512MB`, `6e9`, `1.5 KiB`, `6442450944` (or an integer) into bytes.

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB, GiB, TiB) and the
    single letters K, M, G, T are powers of 1024; units are case-insensitive. Fractions round down.
    Sizes are 0 .. 2**63-1 bytes, numbers at most 30 characters; anything else raises `BudgetError`
    quoting the value (never an OverflowError or ValueError from the conversion).
    """
    if isinstance(text, bool):
        raise BudgetError(f"byte size {text!r} is a bool; give a number of bytes or a string like '6GiB'")
    if isinstance(text, numbers.Integral):  # int, numpy integers
        return _checked_int(int(text), text)
    if not isinstance(text, str):
        raise BudgetError(f"byte size {shown(text)} ({type(text).__name__}) must be a str or int, "
                          "e.g. '6GiB' or 6442450944")
    if not text.strip():
        raise BudgetError("byte size is empty; give a size like '6GiB', '512MB' or '6e9'")
    m = _SIZE.match(text) if len(text) <= MAX_NUMBER_CHARS + 16 else None
    if m is None:
        raise BudgetError(
            f"cannot parse byte size {shown(text)}; expected a number of at most {MAX_NUMBER_CHARS} characters "
            "with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G, T), e.g. '6GiB'"
        )
    number, unit = m.group(1), m.group(2).lower()
    if len(number) > MAX_NUMBER_CHARS:
        raise BudgetError(f"the number in byte size {shown(text)} has {len(number)} characters, more than "
                          f"{MAX_NUMBER_CHARS}; write it with a unit or an exponent, e.g. '6GiB' or '6e9'")
    if unit not in _UNITS:
        raise BudgetError(
            f"unknown unit {m.group(2)!r} in byte size {shown(text)}; use one of "
            "B, KB, MB, GB, TB (x1000) or KiB, MiB, GiB, TiB, K, M, G, T (x1024)"
        )
    mantissa, _, exponent = number.lower().partition("e")
    amount = Decimal(mantissa)  # the regex admits only valid decimals; exponents are applied below
    if amount < 0:
        raise BudgetError(f"byte size {shown(text)} is negative; sizes must be >= 0")
    if amount == 0:
        return 0
    shift = int(exponent) if exponent else 0  # at most 30 characters: no int-conversion limit
    magnitude = amount.adjusted() + shift
    if magnitude < -30:  # far below one byte whatever the unit
        return 0
    if magnitude > 30:  # 1e31 bytes and more: over the limit before the unit, no 1e400 arithmetic
        raise BudgetError(f"byte size {shown(text)} exceeds the largest size, 2**63-1 bytes (8 EiB); "
                          "give at most 8388608TiB, e.g. '6GiB'")
    amount = amount.scaleb(shift, context=Context(prec=80))
    with localcontext() as ctx:
        ctx.prec = 80  # exact for 31-digit numbers times 2**40
        value = amount * _UNITS[unit]
    return _checked_int(int(value), text)


_FORMAT_UNITS = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: int | None) -> str:
    """`1536` -> `1.5 KiB`; exact bytes below 1 KiB; `-` for None. Any int formats (integer arithmetic
    only; beyond 2**70 bytes as a power of two), so printing a plan never raises."""
    if n is None:
        return "-"
    n = int(n)
    sign, n_abs = ("-" if n < 0 else ""), abs(n)
    if n_abs < 1024:
        return f"{sign}{n_abs} B"
    if n_abs >= 2**70:
        return f"{sign}~2^{n_abs.bit_length() - 1} B"
    for unit, scale in _FORMAT_UNITS:
        if n_abs >= scale:
            tenths = (n_abs * 10 + scale // 2) // scale
            return f"{sign}{tenths // 10}.{tenths % 10} {unit}"
    return f"{sign}{n_abs} B"  # pragma: no cover
