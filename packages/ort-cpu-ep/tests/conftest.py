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


@pytest.fixture(params=[0, 1, 2], ids=["portable", "avx2", "avx512"])
def isa_cap(request, library):
    """Each instruction-set path of the C kernels (those this CPU lacks fall back to the next narrower one)."""
    import ctypes

    from ort_cpu_ep import c_kernels

    lib = ctypes.CDLL(str(c_kernels.library_path()))
    before = lib.ort_cpu_ep_isa_cap()
    lib.ort_cpu_ep_set_isa_cap(request.param)
    yield request.param
    lib.ort_cpu_ep_set_isa_cap(before)


@pytest.fixture
def numpy_kernels_only(monkeypatch: pytest.MonkeyPatch):
    """The provider without its C kernels (ORT_CPU_EP_NO_C_KERNELS=1) for the test: what the numpy kernels do."""
    from ort_cpu_ep import c_kernels

    monkeypatch.setenv(c_kernels.DISABLE_ENV, "1")
    c_kernels._load.cache_clear()
    yield
    monkeypatch.delenv(c_kernels.DISABLE_ENV)
    c_kernels._load.cache_clear()
