"""Guards for the OrtKernelApi host functions: every `extern "Python"` function is defined through
these decorators, so no Python exception ever unwinds through C frames."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ._errors import AbiError, DuplicateKernelError, HandleError, KernelDefError, RegistrationError
from ._ffi import _ffi as ffi
from ._hostapi import AttributeError_, typed_attribute  # noqa: F401  (re-exported for the query module)
from ._status import FAILURES, STATUSES, ErrorCode

_log = logging.getLogger("ort_abi")
_PREFIX = "_ort_host_"
INVALID = (HandleError, KernelDefError, AttributeError_, IndexError, ValueError, TypeError, KeyError)
BAD_STATUS_MSG = ffi.new("char[]", b"(not a live OrtStatus: released already, or not made by CreateStatus)")


def cstring(p: Any) -> str:
    if p == ffi.NULL:
        raise ValueError("a required string argument is NULL")
    return ffi.string(p).decode("utf-8", "replace")


def _failed(code: ErrorCode, name: str, e: BaseException, text: str) -> Any:
    failures = FAILURES.get()
    if failures is not None:  # keep which call failed: the refusal of the library names it
        if isinstance(e, DuplicateKernelError):
            failures.append(e)
        else:
            recorded = RegistrationError(f"{name} returned {code.name}: {text}")
            recorded.__cause__ = e
            failures.append(recorded)
    return STATUSES.create(code, f"{name}: {text}")


def status_api(fn: Callable[..., None]) -> Callable[..., None]:
    name = fn.__name__

    def wrapper(*args: Any) -> Any:
        try:
            fn(*args)
            return ffi.NULL
        except (DuplicateKernelError, *INVALID) as e:
            return _failed(ErrorCode.INVALID_ARGUMENT, name, e, str(e))
        except AbiError as e:
            return _failed(ErrorCode.FAIL, name, e, str(e))
        except Exception as e:  # never raise through C frames
            return _failed(ErrorCode.RUNTIME_EXCEPTION, name, e, repr(e))

    wrapper.__name__ = name
    ffi.def_extern(name=_PREFIX + name, onerror=_on_error)(wrapper)
    return fn


def _on_error(exc_type: Any, value: Any, tb: Any) -> None:
    _log.error("host API callback failed outside its guard: %r", value)


def plain_api(fn: Callable[..., Any]) -> Callable[..., Any]:
    ffi.def_extern(name=_PREFIX + fn.__name__, onerror=_on_error)(fn)
    return fn


