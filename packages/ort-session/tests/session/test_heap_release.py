"""`_heap.release_free_heap`: the C heap's free pages go back to the system (glibc), so what onnx's shape
inference freed does not stay resident under the later stages of initialization."""

from __future__ import annotations

import platform
import sys

import pytest

from ort_session._heap import release_free_heap

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_free_pages_inside_the_heap_go_back():
    # 48 MiB in 16 KiB blocks (malloc's heap, below its mmap threshold), every 64th kept: free() alone cannot
    # shrink the heap past the kept ones, so the freed blocks stay resident until trimmed
    blocks = [bytearray(16384) for _ in range(3072)]
    for b in blocks:
        b[::4096] = b"\1" * len(b[::4096])  # touch every page
    kept = blocks[::64]
    del blocks
    before = _resident()
    assert release_free_heap() is True
    assert before - _resident() > 24 << 20, "the freed 47 MiB stayed resident"
    assert len(kept) == 48


def test_without_glibc_it_says_so(monkeypatch):
    import ort_session._heap as heap

    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.release_free_heap() is False
