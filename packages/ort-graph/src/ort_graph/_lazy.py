"""Package namespaces whose public names are imported on first use (PEP 562), so importing a package costs only
what its first caller reads: `ort_session.InferenceSession` loads the session path, not IOBinding, the capture
or the auto-fit search.

    _WHERE = {"place": "._placement", "bench": ".bench"}  # name -> the submodule that defines it
    __getattr__, __dir__ = lazy_exports(__name__, _WHERE)

A name mapped to its own submodule (`"bench": ".bench"`) is that submodule. An unknown name raises the
AttributeError Python's own lookup gives; a submodule that fails to import raises its error at first use.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package` (its `__name__`) exporting `where`'s names."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module, package)
        value = loaded if module == f".{name}" else getattr(loaded, name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
