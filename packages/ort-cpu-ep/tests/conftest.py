"""Fixtures of ort-cpu-ep's tests."""

from __future__ import annotations

import pytest

from ort_cpu_ep.testing import CLibraryUnavailable, require_c_library


@pytest.fixture(scope="module")
def library() -> None:
    """The C kernel library, built in place if missing; skips where no C compiler can build it."""
    try:
        require_c_library()
    except CLibraryUnavailable as e:  # the one real reason: no compiler on this machine
        pytest.skip(str(e))
