"""ONNX Runtime's module-level switches: `get_device()`, `set_default_logger_severity()`,
`set_default_logger_verbosity()`, and the unknown-provider rule of its constructor.

ONNX Runtime logs through its own C++ logger; ort-lowmem's packages log through Python's `logging`, one logger
per package (`ort_graph`, `ort_partition`, `ort_memplan`, `ort_abi`, `ort_cpu_ep`, `ort_cuda_ep`, `ort_session`).
The default severity sets the level of those loggers, ONNX Runtime's scale mapped onto Python's: 0 verbose ->
DEBUG, 1 info -> INFO, 2 warning -> WARNING (the default), 3 error -> ERROR, 4 fatal -> CRITICAL. Verbosity,
as in ONNX Runtime, only matters at severity 0: level N lets records logged at DEBUG - N through too (the
finer-grained records below DEBUG). Python `warnings` (ShapeAnnotationWarning, UnplannedShapesWarning ...) are
not log records: Python's warning filters govern them.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

from ._errors import InvalidOptionError

__all__ = ["UnknownProviderWarning", "get_device", "known_providers", "set_default_logger_severity",
           "set_default_logger_verbosity"]

LOGGERS = ("ort_graph", "ort_partition", "ort_memplan", "ort_abi", "ort_cpu_ep", "ort_cuda_ep", "ort_session")
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL}
_state = {"severity": 2, "verbosity": 0}


class UnknownProviderWarning(UserWarning):
    """A provider name that no provider here answers to was skipped (onnxruntime warns and goes on too)."""


def get_device() -> str:
    """'GPU' when a CUDA device is usable here (ort-cuda-ep with its CUDA wheels and a driver that reports a
    device), else 'CPU' — onnxruntime's answer for the build it is; ours depends on the machine instead."""
    from ._ort_api import cuda_device_count

    return "GPU" if cuda_device_count() else "CPU"


def _int_level(name: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise InvalidOptionError(f"{name}({value!r}): expected an int from 0 to {high}"
                                 + (" (0 verbose, 1 info, 2 warning, 3 error, 4 fatal)" if high == 4 else ""))
    return value


def _apply() -> None:
    level = _LEVELS[_state["severity"]]
    if _state["severity"] == 0:
        level = max(1, level - _state["verbosity"])
    for name in LOGGERS:
        logging.getLogger(name).setLevel(level)


def set_default_logger_severity(severity: int) -> None:
    """The least severe record the project's loggers pass on: 0 verbose, 1 info, 2 warning (default), 3 error,
    4 fatal (onnxruntime's scale)."""
    _state["severity"] = _int_level("set_default_logger_severity", severity, 4)
    _apply()


def set_default_logger_verbosity(verbosity: int) -> None:
    """How much finer than DEBUG the records at severity 0 may be (onnxruntime: verbosity counts only at
    severity 0). 0 is the default."""
    _state["verbosity"] = _int_level("set_default_logger_verbosity", verbosity, 1000)
    _apply()


def known_providers(names: Sequence[str], known: Sequence[str], strict: bool) -> list[str]:
    """`names` without those no provider here answers to. Each one skipped is an UnknownProviderWarning with
    the names available and the closest one, as onnxruntime warns and goes on with the rest (the CPU provider
    when nothing is left); with `strict` (session.disable_cpu_ep_fallback=1: the user asked that nothing run
    elsewhere than asked) it is an InvalidOptionError instead."""
    from ._ort_api import canonical

    kept: list[str] = []
    for name in names:
        if canonical(name) in known:
            kept.append(name)
            continue
        import difflib  # only for an unknown provider: not on every session's import

        close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(repr(k) for k in known)
        if strict:
            raise InvalidOptionError(f"unknown execution provider {name!r}; available: {listed}{hint} (the CPU "
                                     "fallback is disabled, so it is not skipped)")
        warnings.warn(f"specified provider {name!r} is not one of the available providers ({listed}){hint}; it is "
                      "skipped", UnknownProviderWarning, stacklevel=4)
    return kept
